package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cuda"
)

func TestGPUCommandReports(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runMain([]string{"gpu"}, &out, &errb); code != 0 {
		t.Fatalf("rlnode gpu: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "CUDA backend: ") || !strings.Contains(out.String(), "driver:") {
		t.Errorf("rlnode gpu printed:\n%s", out.String())
	}
	out.Reset()
	code := runMain([]string{"gpu", "--require"}, &out, &errb)
	if want := map[bool]int{true: 0, false: 1}[cuda.Available().Err() == nil]; code != want {
		t.Errorf("rlnode gpu --require: exit %d, want %d:\n%s", code, want, out.String())
	}
	if code := runMain([]string{"gpu", "extra"}, &out, &errb); code != 2 {
		t.Errorf("rlnode gpu extra: exit %d, want 2", code)
	}
}
