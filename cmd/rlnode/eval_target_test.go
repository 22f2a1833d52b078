package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --model names what it could not use: a missing path, a file, a folder
// that is neither a run nor a checkpoint, a checkpoint without --recipe.
func TestEvalTargetErrors(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HF_HUB_CACHE", filepath.Join(dir, "hub"))
	file := filepath.Join(dir, "f.txt")
	empty := filepath.Join(dir, "empty")
	ckpt := filepath.Join(dir, "ck")
	for _, d := range []string{empty, ckpt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ckpt, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]string{
		"runs/nope":                     "runs/nope: no such folder here, and model runs/nope: not in the local Hugging Face cache",
		filepath.Join(dir, "nope", "x"): filepath.Join(dir, "nope", "x") + ": no such folder (want a run folder",
		file:                            "not a folder",
		empty:                           "neither a run folder (no checkpoints/) nor a checkpoint (no config.json)",
		ckpt:                            "is a checkpoint, not a run folder: give --recipe RECIPE",
	} {
		m, r := model, ""
		if err := evalTarget(&m, &r, io.Discard); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--model %s: %v, want %q", model, err, want)
		}
	}
}
