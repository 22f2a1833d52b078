package recipes

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A cache laid out as huggingface_hub lays it out: refs/main holds the
// commit hash of the snapshot folder; a second snapshot under a tag.
func writeHubCache(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	repo := filepath.Join(dir, "models--Qwen--Qwen2.5-0.5B-Instruct")
	for path, body := range map[string]string{
		"refs/main":                    "abc123\n",
		"refs/v2":                      "def456",
		"snapshots/abc123/config.json": "{}",
		"snapshots/def456/config.json": "{}",
		"snapshots/0ff/tokenizer.json": "{}",
	} {
		p := filepath.Join(repo, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "models--org--norefs", "snapshots", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestHubSnapshot(t *testing.T) {
	dir := writeHubCache(t)
	repo := filepath.Join(dir, "models--Qwen--Qwen2.5-0.5B-Instruct")
	cases := []struct {
		id, want, err string
	}{
		{id: "Qwen/Qwen2.5-0.5B-Instruct", want: filepath.Join(repo, "snapshots", "abc123")},
		{id: "Qwen/Qwen2.5-0.5B-Instruct@v2", want: filepath.Join(repo, "snapshots", "def456")},
		{id: "Qwen/Qwen2.5-0.5B-Instruct@def456", want: filepath.Join(repo, "snapshots", "def456")},
		{id: "Qwen/Qwen2.5-0.5B-Instruct@0ff", err: "no config.json in " + filepath.Join(repo, "snapshots", "0ff")},
		{id: "Qwen/Qwen2.5-0.5B-Instruct@nope", err: "no config.json in " + filepath.Join(repo, "snapshots", "nope")},
		{id: "Qwen/Qwen3-8B", err: "no folder " + filepath.Join(dir, "models--Qwen--Qwen3-8B") + "); fetch it with: huggingface-cli download Qwen/Qwen3-8B,"},
		{id: "org/norefs", err: "no " + filepath.Join(dir, "models--org--norefs", "refs", "main")},
		{id: "/abs/path", err: "not a hub model id"},
		{id: "a/b/c", err: "not a hub model id"},
		{id: "../x", err: "not a hub model id"},
	}
	for _, c := range cases {
		got, err := hubSnapshotIn(dir, c.id)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: got %q, %v; want an error containing %q", c.id, got, err, c.err)
			}
			if strings.Contains(c.err, "no ") && !errors.Is(err, ErrNotCached) {
				t.Errorf("%s: %v does not wrap ErrNotCached", c.id, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.id, got, err, c.want)
		}
	}
}

func TestHubCacheDirFromEnvironment(t *testing.T) {
	for _, c := range []struct{ hubCache, home, xdg, want string }{
		{"/h/hub", "/hf", "/x", "/h/hub"},
		{"", "/hf", "/x", "/hf/hub"},
		{"", "", "/x", "/x/huggingface/hub"},
	} {
		t.Setenv("HF_HUB_CACHE", c.hubCache)
		t.Setenv("HF_HOME", c.home)
		t.Setenv("XDG_CACHE_HOME", c.xdg)
		if got := HubCacheDir(); got != c.want {
			t.Errorf("HF_HUB_CACHE=%q HF_HOME=%q XDG_CACHE_HOME=%q: HubCacheDir() = %q, want %q", c.hubCache, c.home, c.xdg, got, c.want)
		}
	}
}

func TestModelDir(t *testing.T) {
	dir := writeHubCache(t)
	t.Setenv("HF_HUB_CACHE", dir)
	local := t.TempDir()
	for _, c := range []struct{ in, want string }{
		{local, local},
		{"Qwen/Qwen2.5-0.5B-Instruct", filepath.Join(dir, "models--Qwen--Qwen2.5-0.5B-Instruct", "snapshots", "abc123")},
		{"/no/such/dir", "/no/such/dir"},
	} {
		if got, err := ModelDir(c.in); err != nil || got != c.want {
			t.Errorf("ModelDir(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := ModelDir("Qwen/absent"); !errors.Is(err, ErrNotCached) {
		t.Errorf("ModelDir of an absent id: %v, want ErrNotCached", err)
	}
}
