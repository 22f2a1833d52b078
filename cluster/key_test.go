package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// A key file is the cluster's secret: LoadOrCreateKey creates it readable
// by its owner only, refuses one that its group or others may read or
// write (naming the file, its mode and the chmod that fixes it), reads
// one of the owner's own modes, and reads a bounded amount of whatever the
// path names.
func TestKeyFileMode(t *testing.T) {
	dir := t.TempDir()
	created := filepath.Join(dir, "sub", "cluster.key")
	key, made, err := LoadOrCreateKey(created, true)
	if err != nil || !made || len(key) != 32 {
		t.Fatalf("create: %v (created %v, %d bytes)", err, made, len(key))
	}
	if fi, err := os.Stat(created); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("created key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	again, made, err := LoadOrCreateKey(created, true)
	if err != nil || made || string(again) != string(key) {
		t.Fatalf("second load: %v (created %v)", err, made)
	}

	for _, mode := range []os.FileMode{0o400, 0o600} {
		if err := os.Chmod(created, mode); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadOrCreateKey(created, false); err != nil {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o602} {
		if err := os.Chmod(created, mode); err != nil {
			t.Fatal(err)
		}
		for _, create := range []bool{false, true} {
			_, _, err := LoadOrCreateKey(created, create)
			want := []string{created, "mode " + octal(mode), "chmod 600 " + created}
			if !errors.Is(err, ErrKeyFileMode) {
				t.Fatalf("mode %04o (create %v): %v, want ErrKeyFileMode", mode, create, err)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("mode %04o: %q does not say %q", mode, err, w)
				}
			}
		}
	}

	// /dev/zero would be read until memory ran out.
	if _, _, err := LoadOrCreateKey("/dev/zero", false); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("/dev/zero: %v", err)
	}
	big := filepath.Join(dir, "big.key")
	if err := os.WriteFile(big, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateKey(big, false); err == nil || !strings.Contains(err.Error(), "more than 4096 bytes") {
		t.Errorf("1 MiB key file: %v", err)
	}
	missing := filepath.Join(dir, "missing.key")
	if _, _, err := LoadOrCreateKey(missing, false); !errors.Is(err, os.ErrNotExist) || strings.Count(err.Error(), missing) != 1 {
		t.Errorf("missing key file: %v, want ErrNotExist naming the file once", err)
	}
}

func octal(m os.FileMode) string {
	const digits = "01234567"
	p := uint32(m.Perm())
	return string([]byte{'0', digits[p>>6&7], digits[p>>3&7], digits[p&7]})
}

// Nodes starting at once on one home all create-or-load the key file:
// each gets the one key, none an empty file (the key used to be written
// after its file was created, and a second process reading in between
// failed with "key is 0 bytes").
func TestKeyFileCreatedAtOnce(t *testing.T) {
	dir := t.TempDir()
	for round := range 200 {
		path := filepath.Join(dir, fmt.Sprintf("k%d", round), "cluster.key")
		keys := make([][]byte, 8)
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range keys {
			wg.Go(func() { keys[i], _, errs[i] = LoadOrCreateKey(path, true) })
		}
		wg.Wait()
		for i := range keys {
			if errs[i] != nil {
				t.Fatalf("round %d, caller %d: %v", round, i, errs[i])
			}
			if !bytes.Equal(keys[i], keys[0]) {
				t.Fatalf("round %d: callers got different keys", round)
			}
		}
		if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
			t.Fatalf("round %d: the key's folder holds %d entries, want the key alone", round, len(ents))
		}
	}
}
