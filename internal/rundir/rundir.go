// Package rundir reserves a run's default folder: the first of BASE,
// BASE-2, BASE-3… that does not exist, created at once so that two runs
// started in the same second take different ones.
package rundir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rlnode/rlnode/internal/outpath"
)

// Reserve creates and returns the first of base, base-2 … base-1000 that
// did not exist (and base's parent folders where missing).
func Reserve(base string) (string, error) {
	if err := outpath.MkdirAll(filepath.Dir(base)); err != nil {
		return "", err
	}
	for i := 1; i <= 1000; i++ {
		dir := base
		if i > 1 {
			dir = fmt.Sprintf("%s-%d", base, i)
		}
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("%s and %s-2 to -1000 all exist: give the run a folder with --out", base, base)
}
