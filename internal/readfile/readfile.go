// Package readfile reads a whole small file a user named (a config, a
// tokenizer, an index, an input): only a regular file, and only up to a
// limit, so that a path to a pipe cannot block the reader and a path to a
// device (/dev/zero) or a huge file cannot fill its memory.
package readfile

import (
	"fmt"
	"io"
	"os"
)

// Regular reads the regular file at path, of at most limit bytes. Errors
// name the path, as os's do.
func Regular(path string, limit int64) ([]byte, error) {
	st, err := Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, over the %d-byte limit", path, st.Size(), limit)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: over the %d-byte limit", path, limit)
	}
	return b, nil
}

// Stat is os.Stat for a file about to be opened and read: anything but a
// regular file is an error saying what it is. Call it before opening:
// opening a pipe waits for a writer.
func Stat(path string) (os.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s, not a regular file", path, kind(st.Mode()))
	}
	return st, nil
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "a " + m.Type().String() + " file"
}
