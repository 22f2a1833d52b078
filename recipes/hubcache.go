package recipes

// Models named by Hugging Face hub id ("ORG/NAME") are found in the local
// Hugging Face cache, as the HF libraries do offline: the cache is read,
// never downloaded to.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// ErrNotCached is returned when a hub id has no snapshot in the cache.
var ErrNotCached = errors.New("not in the local Hugging Face cache")

var hubID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9._/-]+)?$`)

// IsHubID tells whether s has the form of a hub model id, ORG/NAME,
// optionally with @REVISION (a branch, tag or commit hash).
func IsHubID(s string) bool {
	return hubID.MatchString(s) && !strings.Contains(s, "..") && !strings.HasPrefix(s, ".")
}

// HubCacheDir is the hub cache folder the HF libraries use: HF_HUB_CACHE, else
// HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
func HubCacheDir() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface", "hub")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", "huggingface", "hub")
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// HubSnapshot returns the snapshot folder of model id (ORG/NAME[@REVISION])
// in the cache HubCacheDir names: DIR/models--ORG--NAME/snapshots/HASH, HASH read
// from refs/REVISION (refs/main without a revision), or REVISION itself
// when it is a snapshot's commit hash. The error, wrapping ErrNotCached,
// says where it looked and how to fetch the model.
func HubSnapshot(id string) (string, error) {
	return hubSnapshotIn(HubCacheDir(), id)
}

// hubSnapshotIn is HubSnapshot in the cache folder dir.
func hubSnapshotIn(dir, id string) (string, error) {
	if !IsHubID(id) {
		return "", fmt.Errorf("%q is not a hub model id (want ORG/NAME or ORG/NAME@REVISION)", id)
	}
	name, rev, hasRev := strings.Cut(id, "@")
	if !hasRev {
		rev = "main"
	}
	repo := filepath.Join(dir, "models--"+strings.ReplaceAll(name, "/", "--"))
	fetch := "huggingface-cli download " + name
	if hasRev {
		fetch += " --revision " + rev
	}
	notCached := func(why string) error {
		return fmt.Errorf("model %s: %w (%s); fetch it with: %s, or set HF_HOME or HF_HUB_CACHE to the cache that holds it",
			id, ErrNotCached, why, fetch)
	}
	if _, err := os.Stat(repo); err != nil {
		return "", notCached("no folder " + repo)
	}
	hash := rev
	if b, err := os.ReadFile(filepath.Join(repo, "refs", filepath.FromSlash(rev))); err == nil {
		hash = strings.TrimSpace(string(b))
	} else if !hasRev {
		return "", notCached("no " + filepath.Join(repo, "refs", "main"))
	}
	if hash == "" || strings.ContainsAny(hash, `/\`) || hash == "." || hash == ".." {
		return "", notCached(fmt.Sprintf("revision %q names no snapshot", rev))
	}
	snap := filepath.Join(repo, "snapshots", hash)
	if _, err := os.Stat(filepath.Join(snap, "config.json")); err != nil {
		return "", notCached("no config.json in " + snap)
	}
	return snap, nil
}

// ModelDir returns path when it exists on disk; otherwise, when it
// has the form of a hub id, its snapshot folder in the cache. Other paths
// come back as they are, for the caller's own "not found".
func ModelDir(path string) (string, error) {
	if _, err := os.Stat(path); err == nil || !IsHubID(path) {
		return path, nil
	}
	dir, err := HubSnapshot(path)
	if err != nil {
		// ORG/NAME is also a relative path: say that it is not one here.
		return "", fmt.Errorf("%s: no such folder here, and %w", path, err)
	}
	return dir, nil
}
