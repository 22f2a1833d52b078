package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/traces"
)

// TestOutDanglingSymlink: an --out folder that is a symbolic link to a
// missing target is refused naming the link, its target and the mkdir
// that fixes it (rlnode run said only "mkdir DIR: file exists"); an
// --out file that is such a link is written where it points when that
// folder exists (the link was replaced by the file), and refused naming
// the missing folder when it does not (eval said "no such file or
// directory" after evaluating).
func TestOutDanglingSymlink(t *testing.T) {
	home, tmp := t.TempDir(), t.TempDir()
	link := func(name, target string) string {
		p := filepath.Join(tmp, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := filepath.Join(tmp, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":32,"intermediate_size":64,
		"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":800,"max_position_embeddings":128,
		"tie_word_embeddings":true,"torch_dtype":"float32","bos_token_id":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(tmp, "gone", "runs")
	folder := link("folder", gone)
	want := folder + " is a symbolic link to " + gone + ", which does not exist: create that folder (mkdir -p " + gone + ")"
	for _, args := range [][]string{
		append([]string{"run", "quickstart", "--out", folder}, tinyRun...),
		{"ctxopt", "train", "ctxopt_bandit", "--out", folder},
		{"ctxopt", "benchmark", "ctxopt_bandit", "--out", folder, "--policy", filepath.Join(tmp, "p.json")},
		{"model", "init", "--config", cfg, "--out", folder},
	} {
		if out, stderr, code := runRlnode(t, home, args...); code == 0 || !strings.Contains(stderr, want) {
			t.Errorf("rlnode %s: exit %d\n%s%s\nwant %q", strings.Join(args[:2], " "), code, out, stderr, want)
		}
	}
	if _, err := os.Stat(gone); err == nil {
		t.Errorf("%s was made", gone)
	}

	store := filepath.Join(tmp, "store")
	w, err := traces.OpenWriter(store, traces.WriterOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	turn := data.Turn{EpisodeID: "g0-s0", PolicyID: "solver", PromptIDs: []int32{1}, ResponseIDs: []int32{2}, LogProbs: []float32{-1}, FinishReason: "stop"}
	if err := w.Add(traces.SpansFromTurns("r", 1, []data.Turn{turn}, 1, time.Now())...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	missingDir := filepath.Join(tmp, "nowhere")
	for _, c := range []struct {
		name string
		args func(out string) []string
	}{
		{"env", func(out string) []string {
			return []string{"env", "rollout", "equations", "--policy", "scripted", "--episodes", "2", "--out", out}
		}},
		{"traces", func(out string) []string { return []string{"traces", "export", "--store", store, "--out", out} }},
		{"eval", func(out string) []string {
			return []string{"eval", "--model", filepath.Join(tmp, "no-model"), "--recipe", "quickstart", "--out", out}
		}},
	} {
		bad := link(c.name+"-bad.jsonl", filepath.Join(missingDir, "x.jsonl"))
		want := bad + " is a symbolic link to " + filepath.Join(missingDir, "x.jsonl") + ", whose folder " + missingDir + " does not exist"
		if out, stderr, code := runRlnode(t, home, c.args(bad)...); code == 0 || !strings.Contains(stderr, want) {
			t.Errorf("rlnode %s --out %s: exit %d\n%s%s\nwant %q", c.name, bad, code, out, stderr, want)
		}
		if c.name == "eval" {
			continue // no model to evaluate
		}
		target := filepath.Join(tmp, c.name+"-target.jsonl")
		good := link(c.name+"-good.jsonl", target)
		if out, stderr, code := runRlnode(t, home, c.args(good)...); code != 0 {
			t.Errorf("rlnode %s --out %s: exit %d\n%s%s", c.name, good, code, out, stderr)
		}
		if fi, err := os.Lstat(good); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("rlnode %s --out %s: the link was replaced (%v)", c.name, good, err)
		}
		if st, err := os.Stat(target); err != nil || st.Size() == 0 {
			t.Errorf("rlnode %s --out %s: nothing written at its target %s (%v)", c.name, good, target, err)
		}
	}
}

// TestSubmitOutDanglingSymlink: rlnode submit --out DIR, DIR a symbolic
// link to a missing target, is refused by the node naming the link, its
// target and the mkdir that fixes it; it said "mkdir DIR: file exists".
func TestSubmitOutDanglingSymlink(t *testing.T) {
	home, tmp := t.TempDir(), t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head")
	dumpOnFailure(t, head)
	gone, dir := filepath.Join(tmp, "gone"), filepath.Join(tmp, "run")
	if err := os.Symlink(gone, dir); err != nil {
		t.Fatal(err)
	}
	want := "run folder on node head: " + dir + " is a symbolic link to " + gone + ", which does not exist: create that folder (mkdir -p " + gone + ")"
	out, stderr, code := runRlnode(t, home, append([]string{"submit", "quickstart", "--name", "dangling", "--out", dir, "--address", head.gossip, "--no-wait"}, tinyRun...)...)
	if code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("submit --out %s: exit %d\n%s%s\nwant %q", dir, code, out, stderr, want)
	}
}

// TestDefaultRunsDanglingSymlink: a run given no --out goes to
// ./runs/NAME-DATE; ./runs a symbolic link to a missing folder (a
// scratch disk not mounted) is refused naming it and its target, as
// --out is; it said "mkdir runs: file exists".
func TestDefaultRunsDanglingSymlink(t *testing.T) {
	home, wd := t.TempDir(), t.TempDir()
	gone := filepath.Join(t.TempDir(), "scratch", "runs")
	if err := os.Symlink(gone, filepath.Join(wd, "runs")); err != nil {
		t.Fatal(err)
	}
	cmd := rlnodeCmd(t, home, append([]string{"run", "quickstart"}, tinyRun...)...)
	cmd.Dir = wd
	out, err := cmd.CombinedOutput()
	if want := "runs is a symbolic link to " + gone + ", which does not exist: create that folder (mkdir -p " + gone + ")"; err == nil || !strings.Contains(string(out), want) {
		t.Errorf("run with ./runs a dangling link: %v\n%s\nwant %q", err, out, want)
	}
}
