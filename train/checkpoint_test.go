package train

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/slowfile"
)

// writeCheckpointFiles makes a checkpoint directory with the given files (path
// → content) and, when manifest, its checksum manifest.
func writeCheckpointFiles(t *testing.T, dir string, files map[string]string, manifest bool) {
	t.Helper()
	for p, content := range files {
		p = filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if manifest {
		if err := WriteManifest(dir); err != nil {
			t.Fatal(err)
		}
	}
}

var ckFiles = map[string]string{
	"model.safetensors":          "weights",
	"optimizer.safetensors":      "moments",
	DriverStateFile:              `{"step": 4}`,
	"feedback/model.safetensors": "feedback weights",
}

// flipByte XORs one byte of the file at p in place.
func flipByte(t *testing.T, p string, at int) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[at%len(b)] ^= 0x01
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A flipped byte in any file, a missing file, or a damaged manifest fails
// verification and names what failed; the untouched checkpoint passes.
func TestVerifyCheckpoint(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(t *testing.T, dir string)
		verify  string // directory verified, relative to the checkpoint
		wantErr error
		names   string // what the error names
	}{
		{"intact", func(*testing.T, string) {}, ".", nil, ""},
		{"intact feedback", func(*testing.T, string) {}, "feedback", nil, ""},
		{"weights flipped", func(t *testing.T, d string) { flipByte(t, filepath.Join(d, "model.safetensors"), 3) }, ".", ErrCorrupt, "model.safetensors"},
		{"optimizer flipped", func(t *testing.T, d string) { flipByte(t, filepath.Join(d, "optimizer.safetensors"), 0) }, ".", ErrCorrupt, "optimizer.safetensors"},
		{"driver state flipped", func(t *testing.T, d string) { flipByte(t, filepath.Join(d, DriverStateFile), 1) }, ".", ErrCorrupt, DriverStateFile},
		{"feedback flipped", func(t *testing.T, d string) { flipByte(t, filepath.Join(d, "feedback/model.safetensors"), 5) }, ".", ErrCorrupt, "feedback/model.safetensors"},
		{"feedback flipped, feedback verified", func(t *testing.T, d string) { flipByte(t, filepath.Join(d, "feedback/model.safetensors"), 5) }, "feedback", ErrCorrupt, "feedback/model.safetensors"},
		{"solver flipped, feedback verified", func(t *testing.T, d string) { flipByte(t, filepath.Join(d, "model.safetensors"), 5) }, "feedback", nil, ""},
		{"weights missing", func(t *testing.T, d string) { os.Remove(filepath.Join(d, "model.safetensors")) }, ".", ErrCorrupt, "model.safetensors"},
		{"manifest flipped", func(t *testing.T, d string) { flipByte(t, filepath.Join(d, ManifestFile), 2) }, ".", ErrCorrupt, ""},
		{"manifest garbled", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, ManifestFile), []byte("not a manifest\n"), 0o644)
		}, ".", ErrCorrupt, "line 1"},
		{"manifest escapes", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, ManifestFile), []byte(strings.Repeat("0", 64)+"  ../../etc/passwd\n"), 0o644)
		}, ".", ErrCorrupt, "not inside the checkpoint"},
		{"manifest empty", func(t *testing.T, d string) { os.WriteFile(filepath.Join(d, ManifestFile), nil, 0o644) }, ".", ErrCorrupt, "empty"},
		{"no manifest", func(t *testing.T, d string) { os.Remove(filepath.Join(d, ManifestFile)) }, ".", ErrNoManifest, ""},
		{"no manifest, feedback verified", func(t *testing.T, d string) { os.Remove(filepath.Join(d, ManifestFile)) }, "feedback", ErrNoManifest, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeCheckpointFiles(t, dir, ckFiles, true)
			c.damage(t, dir)
			err := VerifyCheckpoint(filepath.Join(dir, c.verify))
			switch {
			case c.wantErr == nil && err != nil:
				t.Fatalf("verify: %v, want nil", err)
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Fatalf("verify: %v, want %v", err, c.wantErr)
			case c.names != "" && !strings.Contains(err.Error(), c.names):
				t.Fatalf("verify: %v does not name %s", err, c.names)
			}
		})
	}
}

// The manifest lists every file but itself, sorted, in sha256sum's format.
func TestWriteManifestFormat(t *testing.T) {
	dir := t.TempDir()
	writeCheckpointFiles(t, dir, map[string]string{"b": "", "a/c": "x"}, true)
	writeCheckpointFiles(t, dir, nil, true) // rewritten, not listing itself
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	want := "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881  a/c\n" +
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  b\n"
	if string(b) != want {
		t.Fatalf("manifest:\n%s\nwant:\n%s", b, want)
	}
}

// A stop while the manifest's files are hashed (seconds for a large
// model's) gives up, with an error wrapping ctx's, and writes no manifest:
// it read every file to the end, deaf to the stop.
func TestWriteManifestStops(t *testing.T) {
	dir := t.TempDir()
	writeCheckpointFiles(t, dir, map[string]string{"model.safetensors": strings.Repeat("x", 3<<20)}, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WriteManifestContext(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("WriteManifestContext stopped: %v, want context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err == nil {
		t.Error("a stopped WriteManifestContext wrote the manifest")
	}
}

// NewestIntact passes over an incomplete and a corrupt checkpoint, saying
// why, and takes one without a manifest unverified.
func TestNewestIntact(t *testing.T) {
	cases := []struct {
		name        string
		steps       []string // per step-1, step-2, ...: intact, corrupt, incomplete, old (no manifest)
		want        string
		skipped     []string
		noManifest  bool
		wantErrText string
	}{
		{"newest intact", []string{"intact", "intact"}, "step-2", nil, false, ""},
		{"newest corrupt", []string{"intact", "corrupt"}, "step-1", []string{"step-2"}, false, ""},
		{"corrupt and incomplete", []string{"intact", "corrupt", "incomplete"}, "step-1", []string{"step-3", "step-2"}, false, ""},
		{"older without a manifest", []string{"old", "corrupt"}, "step-1", []string{"step-2"}, true, ""},
		{"none intact", []string{"corrupt", "incomplete"}, "", []string{"step-2", "step-1"}, false, "no complete, intact checkpoint"},
		{"no checkpoints", nil, "", nil, false, "no complete, intact checkpoint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			for i, kind := range c.steps {
				dir := filepath.Join(out, "checkpoints", "step-"+string(rune('1'+i)))
				writeCheckpointFiles(t, dir, ckFiles, kind != "old")
				switch kind {
				case "corrupt":
					flipByte(t, filepath.Join(dir, "model.safetensors"), 0)
				case "incomplete":
					os.Remove(filepath.Join(dir, DriverStateFile))
				}
			}
			dir, skipped, noManifest, err := NewestIntact(out)
			if c.wantErrText != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErrText) {
					t.Fatalf("err %v, want %q", err, c.wantErrText)
				}
			} else if err != nil || filepath.Base(dir) != c.want || noManifest != c.noManifest {
				t.Fatalf("got %s (no manifest %v), %v; want %s (no manifest %v)", dir, noManifest, err, c.want, c.noManifest)
			}
			if len(skipped) != len(c.skipped) {
				t.Fatalf("skipped %v, want %v", skipped, c.skipped)
			}
			for i, s := range c.skipped {
				if !strings.Contains(skipped[i].Error(), filepath.Join("checkpoints", s)) {
					t.Errorf("skipped[%d] = %v, want %s", i, skipped[i], s)
				}
			}
		})
	}
}

// SetAside moves a skipped checkpoint to step-N.corrupt or
// step-N.incomplete, numbering the name when it is taken, and keeps its
// files.
func TestSetAside(t *testing.T) {
	out := t.TempDir()
	dir := filepath.Join(out, "checkpoints", "step-4")
	for _, want := range []string{"step-4.corrupt", "step-4.corrupt-2", "step-4.incomplete"} {
		writeCheckpointFiles(t, dir, ckFiles, true)
		var s Skipped
		if strings.HasSuffix(want, ".incomplete") {
			s = Skipped{dir, fmt.Errorf("%s: incomplete", dir)}
		} else {
			s = Skipped{dir, fmt.Errorf("checkpoint %s: %w", dir, ErrCorrupt)}
		}
		to, err := SetAside(s)
		if err != nil || to != filepath.Join(out, "checkpoints", want) {
			t.Fatalf("SetAside: %s, %v; want %s", to, err, want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there after SetAside: %v", dir, err)
		}
		if err := VerifyCheckpoint(to); err != nil {
			t.Errorf("%s: %v", to, err)
		}
	}
	if cks, err := Checkpoints(out); err != nil || len(cks) != 0 {
		t.Errorf("checkpoints after SetAside: %v, %v; want none", cks, err)
	}
}

// TestVerifyCheckpointContextGivesUp: verification whose context ends
// while it hashes a file returns at once with the context's error, not
// ErrCorrupt (the checkpoint is not at fault). The weights come from a
// pipe that never ends, as from a very slow disk: --resume's verification
// once hashed on to the end (minutes for a 7B model's weights and
// optimizer state), deaf to SIGTERM.
func TestVerifyCheckpointContextGivesUp(t *testing.T) {
	dir := t.TempDir()
	writeCheckpointFiles(t, dir, map[string]string{"model.safetensors": strings.Repeat("weights ", 1<<14)}, true)
	half := slowfile.Replace(t, filepath.Join(dir, "model.safetensors"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	verified := make(chan error, 1)
	go func() { verified <- VerifyCheckpointContext(ctx, dir) }()
	<-half
	cancel()
	select {
	case err := <-verified:
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrCorrupt) {
			t.Errorf("VerifyCheckpointContext: %v, want context.Canceled and not ErrCorrupt", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("VerifyCheckpointContext did not return within 60 s of its context's end")
	}
}
