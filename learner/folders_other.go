//go:build !unix

package learner

import (
	"fmt"
	"os"
)

// freeBytes cannot be read here.
func freeBytes(string) (int64, bool) { return 0, false }

// processAlive cannot be told here: staging folders are never swept.
func processAlive(int) bool { return true }

// openNoFollow opens path to read, refusing a symbolic link (checked,
// then opened: no O_NOFOLLOW here).
func openNoFollow(path string) (*os.File, error) {
	if st, err := os.Lstat(path); err != nil {
		return nil, err
	} else if st.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s is a symbolic link: refused", path)
	}
	return os.Open(path)
}
