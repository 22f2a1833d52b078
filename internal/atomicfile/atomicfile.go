// Package atomicfile writes files that later commands read so that a
// reader finds either the old file whole or the new one whole: the bytes
// go to a temporary file in the same folder, which is synced and then
// renamed over the target. A crash, a full disk or a failed write midway
// leaves the old file as it was (and no temporary file behind, unless the
// process itself dies).
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile writes data to path atomically, with permissions perm.
// Errors name path.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write writes what write writes to path atomically, with permissions
// perm. An error of write, of the disk or of the rename leaves path as it
// was. Errors name path.
func Write(path string, perm fs.FileMode, write func(io.Writer) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	err = write(tmp)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync() // the bytes are on disk before the name points at them
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	// The rename itself reaches the disk with the folder's next sync; some
	// filesystems refuse to sync a folder, and the file is in place
	// either way, so a failure here is not the write's.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
