package jobs

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file that changes between its listing and its packing is refused,
// naming it, not packed torn: one that grows (a dataset still being
// written), one rewritten in place, one swapped for a link out of the
// folder.
func TestPackWorkingDirRefusesChangesWhilePacked(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("not for the cluster\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		change func(p string) error
	}{
		{"grown", func(p string) error {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString("{\"more\": 1}\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}},
		{"swapped for a link out", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink(secret, p)
		}},
	}
	defer func(f func(string)) { beforePackOpen = f }(beforePackOpen)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{"data/train.jsonl": "{\"a\": 1}\n{\"a\": 2}\n"})
			beforePackOpen = func(p string) {
				if strings.HasSuffix(p, "train.jsonl") {
					if err := c.change(p); err != nil {
						t.Fatal(err)
					}
				}
			}
			_, err := PackWorkingDir(dir, nil, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "data/train.jsonl") || !strings.Contains(err.Error(), "changed while packed") {
				t.Errorf("packed: %v, want refused naming data/train.jsonl as changed", err)
			}
		})
	}
}
