package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The shipped dataset and verifier recipes run end to end through the
// CLI, from a working directory that is not the repository's (mbpp's
// data/mbpp_tiny.jsonl is the embedded file, written under RLNODE_HOME).
func TestRunDataRecipes(t *testing.T) {
	short := []string{"--set", "sft.steps=2", "--set", "schedule.steps=2", "--set", "schedule.eval_every=2",
		"--set", "eval.held_out=4", "--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2"}
	for _, c := range []struct {
		recipe string
		python bool
	}{
		{"grpo_gsm8k", false},
		{"mbpp", true},
	} {
		t.Run(c.recipe, func(t *testing.T) {
			if _, err := os.Stat("/usr/bin/python3"); c.python && err != nil {
				t.Skipf("%s verifies code with /usr/bin/python3: %v", c.recipe, err)
			}
			home, dir := t.TempDir(), filepath.Join(t.TempDir(), "run")
			cmd := rlnodeCmd(t, home, append([]string{"run", c.recipe, "--out", dir}, short...)...)
			cmd.Dir = t.TempDir()
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("rlnode run %s did not finish within 2 minutes", c.recipe)
			}
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("rlnode run %s: exit %d\nstdout:\n%s\nstderr:\n%s", c.recipe, code, out.String(), errb.String())
			}
			f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var lines []map[string]any
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				var m map[string]any
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
					t.Fatalf("metrics line %q: %v", sc.Text(), err)
				}
				lines = append(lines, m)
			}
			if len(lines) != 4 {
				t.Fatalf("metrics.jsonl has %d lines, want 4 (2 warm-up + 2 RL)", len(lines))
			}
			last := lines[3]
			r, ok := last["reward_mean"].(float64)
			if !ok || r < 0 || r > 1 {
				t.Errorf("last step reward_mean %v", last["reward_mean"])
			}
			if a, ok := last["eval_accuracy"].(float64); !ok || a < 0 || a > 1 {
				t.Errorf("last step eval_accuracy %v", last["eval_accuracy"])
			}
			ckpt := filepath.Join(dir, "checkpoints", "step-4")
			if _, err := os.Stat(filepath.Join(ckpt, "driver_state.json")); err != nil {
				t.Fatal(err)
			}
			// rlnode eval scores the checkpoint as the run did: the same
			// held-out problems and the recipe's verifier (gsm8k, code).
			evalOut := filepath.Join(t.TempDir(), "eval.json")
			ecmd := rlnodeCmd(t, home, append([]string{"eval", "--model", ckpt, "--recipe", c.recipe, "--out", evalOut}, short...)...)
			ecmd.Dir = cmd.Dir
			if b, err := ecmd.CombinedOutput(); err != nil {
				t.Fatalf("rlnode eval: %v\n%s", err, b)
			}
			js, err := os.ReadFile(evalOut)
			if err != nil {
				t.Fatal(err)
			}
			var ev struct {
				Accuracy float64 `json:"accuracy"`
				Problems int     `json:"problems"`
			}
			if err := json.Unmarshal(js, &ev); err != nil {
				t.Fatalf("eval output %s: %v", js, err)
			}
			if a, _ := last["eval_accuracy"].(float64); ev.Accuracy != a || ev.Problems != 4 {
				t.Errorf("rlnode eval: accuracy %v on %d problems, the run's last eval_accuracy %v on 4", ev.Accuracy, ev.Problems, a)
			}
		})
	}
}
