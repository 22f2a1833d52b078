// Package outpath prepares the output paths commands are given (--out):
// it makes an output folder, or finds where an output file goes, and
// where the path cannot serve, says what it is and what to do (a
// symbolic link to a missing target, a file where a folder is wanted)
// instead of the system's bare "file exists" or "not a directory". It
// writes nothing but the folders MkdirAll makes.
package outpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// maxLinks bounds the symbolic links followed from one path (Linux's
// own bound is 40).
const maxLinks = 40

// MkdirAll makes the folder dir and its parents, as os.MkdirAll does.
// Where dir or one of its parents cannot be a folder, the error says
// which path is what, and what to do.
func MkdirAll(dir string) error {
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		return nil
	}
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if fi, lerr := os.Lstat(p); lerr == nil {
			if why := notAFolder(p, fi); why != nil {
				return why
			}
			break
		}
		if filepath.Dir(p) == p {
			break
		}
	}
	return err
}

// notAFolder explains why p, which exists (fi is its Lstat), cannot be
// used as a folder, or is nil when it can.
func notAFolder(p string, fi fs.FileInfo) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		end, missing, err := follow(p)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", p, err)
		case missing:
			return fmt.Errorf("%s is a symbolic link to %s, which does not exist: create that folder (mkdir -p %s), or remove the link, or give another folder",
				p, end, end)
		}
		if st, err := os.Stat(end); err == nil && !st.IsDir() {
			return fmt.Errorf("%s is a symbolic link to %s, a file, not a folder: give another folder", p, end)
		}
		return nil
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is a file, not a folder: give another folder", p)
	}
	return nil
}

// follow follows the symbolic links from p to the path they end at:
// something that is not a link, or a path that does not exist (missing).
// Relative targets are taken from their link's folder.
func follow(p string) (end string, missing bool, err error) {
	end = p
	for range maxLinks {
		fi, err := os.Lstat(end)
		if errors.Is(err, fs.ErrNotExist) {
			return end, true, nil
		}
		if err != nil {
			return "", false, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return end, false, nil
		}
		t, err := os.Readlink(end)
		if err != nil {
			return "", false, err
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(end), t)
		}
		end = t
	}
	return "", false, fmt.Errorf("more than %d symbolic links in a row", maxLinks)
}

// File is where an output file given as path is written: path, or, when
// path is a symbolic link, the file it points to (followed as a shell's
// > follows it, so the link stays and its target gets the output; a
// writer that renames a temporary file over path would replace the link
// instead). A link to a missing file is followed when the file's folder
// exists; when it does not, the error says so. path itself a folder is
// an error.
func File(path string) (string, error) {
	end, missing, err := follow(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if missing {
		if end != path {
			if st, err := os.Stat(filepath.Dir(end)); err != nil || !st.IsDir() {
				return "", fmt.Errorf("%s is a symbolic link to %s, whose folder %s does not exist: create it (mkdir -p %s), or remove the link, or give another file",
					path, end, filepath.Dir(end), filepath.Dir(end))
			}
		}
		return end, nil
	}
	if st, err := os.Stat(end); err == nil && st.IsDir() {
		if end != path {
			return "", fmt.Errorf("%s is a symbolic link to %s, a folder, not a file: give a file", path, end)
		}
		return "", fmt.Errorf("%s is a folder, not a file: give a file", path)
	}
	return end, nil
}
