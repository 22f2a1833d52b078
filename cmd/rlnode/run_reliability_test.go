package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/logbuf"
	"github.com/rlnode/rlnode/train"
)

// Reliability of `rlnode run` as a process: killed and resumed, scraped
// while it runs, stopped by recipe errors before anything starts.

// deterministicRun is a recipe (seed set, deterministic: true) at a size
// where each step takes milliseconds; the RL steps outnumber the
// checkpoint interval several times, so a kill after the first RL
// checkpoint (step-4) lands before the end.
func deterministicRun(rlSteps int) []string {
	return []string{"--set", "sft.steps=2", "--set", fmt.Sprintf("schedule.steps=%d", rlSteps), "--set", "schedule.eval_every=0",
		"--set", "schedule.checkpoint_every=2", "--set", "eval.held_out=4", "--set", "algorithm.batch_prompts=4",
		"--set", "algorithm.group_size=4", "--set", "checkpoint.keep=0", "--set", "seed=7", "--set", "deterministic=true"}
}

// started is an rlnode process running in the background.
type started struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr *logbuf.Buffer // read while the process writes it (waitFor's conditions)
	done   chan struct{}
}

func startRun(t *testing.T, home string, args ...string) *started {
	t.Helper()
	cmd := rlnodeCmd(t, home, args...)
	// stdout is an OS pipe, not an io.Pipe: the process ends (and done
	// closes) whether or not the test reads its output, so a failing test
	// cannot hang in Cleanup on a copy goroutine nobody drains.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb logbuf.Buffer
	cmd.Stdout, cmd.Stderr = pw, &errb
	err = cmd.Start()
	pw.Close() // the child holds its own copy; EOF on pr once it ends
	if err != nil {
		pr.Close()
		t.Fatal(err)
	}
	s := &started{cmd: cmd, stdout: bufio.NewReader(pr), stderr: &errb, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = cmd.Process.Kill()
			<-s.done
		}
		pr.Close()
	})
	return s
}

// dump ends a process that stopped making progress with SIGQUIT, so that
// the Go runtime writes every goroutine's stack to its stderr, and returns
// that stderr: a stall in CI then says where it stalled.
func (s *started) dump() string {
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	return "stderr (with the goroutine dump):\n" + s.stderr.String()
}

// wait waits (at most 60 s) for the process to end and returns its exit code.
func (s *started) wait(t *testing.T) int {
	t.Helper()
	go func() { _, _ = io.Copy(io.Discard, s.stdout) }()
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("rlnode did not end within 60 s\n%s", s.dump())
	}
	return s.cmd.ProcessState.ExitCode()
}

// signalMidway sends sig once midway is closed (a slow read has begun;
// the process ending first, or a minute without it, fails the test) and
// returns the exit code once the process has ended.
func (s *started) signalMidway(t *testing.T, midway <-chan struct{}, sig os.Signal, what string) int {
	t.Helper()
	select {
	case <-midway:
	case <-s.done:
		t.Fatalf("rlnode ended before it read %s\nstderr:\n%s", what, s.stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("nothing read %s within 60 s\n%s", what, s.dump())
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	return s.wait(t)
}

// waitFor polls cond every 5 ms until it holds, the process ends, or 60 s pass.
func (s *started) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for !cond() {
		select {
		case <-s.done:
			if cond() {
				return
			}
			t.Fatalf("rlnode ended before %s\nstderr:\n%s", what, s.stderr)
		case <-deadline:
			t.Fatalf("no %s within 60 s\n%s", what, s.dump())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestRunKilledThenResumedReachesTheSameWeights: a run SIGKILLed after a
// checkpoint and resumed with --resume ends with the same bytes in every
// weights and optimizer file as an uninterrupted run: single-turn GRPO,
// and MLMT three-turn with its trained feedback policy (step-N/feedback).
func TestRunKilledThenResumedReachesTheSameWeights(t *testing.T) {
	for _, c := range []struct {
		recipe  string
		rlSteps int
		files   []string
	}{
		{"quickstart", 24, []string{"model.safetensors", "optimizer.safetensors"}},
		{"mlmt_math", 12, []string{"model.safetensors", "optimizer.safetensors", "feedback/model.safetensors", "feedback/optimizer.safetensors"}},
	} {
		t.Run(c.recipe, func(t *testing.T) { killAndResume(t, c.recipe, c.rlSteps, c.files) })
	}
}

func killAndResume(t *testing.T, recipe string, rlSteps int, files []string) {
	home := t.TempDir()
	whole, killed := filepath.Join(t.TempDir(), "whole"), filepath.Join(t.TempDir(), "killed")
	args := deterministicRun(rlSteps)
	if stdout, stderr, code := runRlnode(t, home, append([]string{"run", recipe, "--out", whole}, args...)...); code != 0 {
		t.Fatalf("uninterrupted run: exit %d\n%s%s", code, stdout, stderr)
	}
	last := fmt.Sprintf("step-%d", 2+rlSteps)

	// The same run, SIGKILLed once the checkpoint after the first RL
	// checkpoint interval is complete (the driver writes its state file last).
	run := startRun(t, home, append([]string{"run", recipe, "--out", killed}, args...)...)
	firstRL := filepath.Join(killed, "checkpoints", "step-4", train.DriverStateFile)
	run.waitFor(t, "checkpoint step-4", func() bool { _, err := os.Stat(firstRL); return err == nil })
	select {
	case <-run.done:
		t.Fatalf("the run ended before the kill: nothing to resume\nstderr:\n%s", run.stderr)
	default:
	}
	if err := run.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := run.wait(t); code != -1 {
		t.Fatalf("killed run exit code %d, want -1 (signal)", code)
	}
	cks, _ := filepath.Glob(filepath.Join(killed, "checkpoints", "step-*"))
	if _, err := os.Stat(filepath.Join(killed, "checkpoints", last)); err == nil {
		t.Fatalf("the killed run reached its last checkpoint before the kill (%v): nothing was resumed", cks)
	}
	t.Logf("killed with checkpoints %v", cks)

	stdout, stderr, code := runRlnode(t, home, "run", filepath.Join(killed, "recipe.yaml"), "--out", killed, "--resume")
	if code != 0 {
		t.Fatalf("resumed run: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "resuming from ") {
		t.Errorf("resumed run does not say where it resumed:\n%s", stdout)
	}
	// Steps change the weights, so equal final weights say the resumed
	// steps were the same steps.
	before := fmt.Sprintf("step-%d", rlSteps)
	for _, f := range files {
		if strings.HasSuffix(f, "model.safetensors") && bytes.Equal(readFile(t, whole, before, f), readFile(t, whole, last, f)) {
			t.Fatalf("%s at %s and %s are equal: the comparison below would prove nothing", f, before, last)
		}
	}
	for _, f := range files {
		a, b := readFile(t, whole, last, f), readFile(t, killed, last, f)
		if !bytes.Equal(a, b) {
			t.Errorf("%s after kill and resume differs from the uninterrupted run's (%d vs %d bytes)", f, len(b), len(a))
		}
	}
	// The resumed run's curves are drawn from the whole metrics.jsonl.
	checkCurves(t, killed)
}

func TestRunResumeSkipsAnIncompleteCheckpoint(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(t.TempDir(), "run")
	if stdout, stderr, code := runRlnode(t, home, append([]string{"run", "quickstart", "--out", dir}, tinyRun...)...); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, stdout, stderr)
	}
	// A checkpoint the kill cut short: weights written, no driver state.
	partial := filepath.Join(dir, "checkpoints", "step-9")
	if err := os.MkdirAll(partial, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "model.safetensors"), []byte("trunc"), 0o644); err != nil {
		t.Fatal(err)
	}
	// One more RL step: the resumed run ends at step 8 and checkpoints it
	// (checkpoint.keep=1). The incomplete step-9 once stayed among the
	// checkpoints, so pruning to the newest one removed step-8, the run's
	// only intact checkpoint.
	stdout, stderr, code := runRlnode(t, home, "run", filepath.Join(dir, "recipe.yaml"), "--out", dir, "--resume", "--set", "schedule.steps=4")
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "skipping "+partial+": incomplete") || !strings.Contains(stdout, "resuming from "+filepath.Join(dir, "checkpoints", "step-7")) {
		t.Errorf("resume did not skip the incomplete checkpoint:\n%s%s", stdout, stderr)
	}
	// The incomplete checkpoint is set aside, whole, and the message names both folders.
	if !strings.Contains(stderr, "moved "+partial+" to "+partial+".incomplete") {
		t.Errorf("resume did not say where the incomplete checkpoint went:\n%s", stderr)
	}
	if b, err := os.ReadFile(filepath.Join(partial+".incomplete", "model.safetensors")); err != nil || string(b) != "trunc" {
		t.Errorf("the incomplete checkpoint's file after the resume: %q, %v", b, err)
	}
	if cks, err := train.Checkpoints(dir); err != nil || len(cks) != 1 || filepath.Base(cks[0]) != "step-8" {
		t.Errorf("checkpoints after the resume: %v, %v; want step-8 alone", cks, err)
	} else if err := train.VerifyCheckpoint(cks[0]); err != nil {
		t.Errorf("the resumed run's checkpoint: %v", err)
	}
	// Nothing to resume from at all: a run that wrote no checkpoint is
	// told to start again there; a folder with no run, or none, is not
	// (it was told the same: "the run in DIR wrote no checkpoint").
	noCheckpoint := t.TempDir()
	if err := os.WriteFile(filepath.Join(noCheckpoint, "metrics.jsonl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runRlnode(t, home, "run", "quickstart", "--out", noCheckpoint, "--resume")
	if code != 1 || !strings.Contains(stderr, "no complete, intact checkpoint in "+filepath.Join(noCheckpoint, "checkpoints")) ||
		!strings.Contains(stderr, "wrote no checkpoint: start it again there with --continue") {
		t.Errorf("resume of a run without checkpoints: exit %d\n%s", code, stderr)
	}
	empty, gone := t.TempDir(), filepath.Join(t.TempDir(), "typo")
	for _, c := range []struct{ dir, want string }{
		{empty, "--out " + empty + " holds no run (none of recipe.yaml, "},
		{gone, "--out " + gone + " does not exist"},
	} {
		_, stderr, code = runRlnode(t, home, "run", "quickstart", "--out", c.dir, "--resume")
		if code != 1 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "there is no run to continue; to start a run there, leave out --resume") ||
			strings.Contains(stderr, "--continue") {
			t.Errorf("resume in %s: exit %d\n%s", c.dir, code, stderr)
		}
		if _, err := os.Stat(gone); err == nil {
			t.Errorf("the refused --resume left %s behind", gone)
		}
	}
}

// TestRunResumeSkipsACorruptCheckpoint: a flipped byte in any file of a
// real checkpoint fails its manifest; --resume says so and continues from
// the checkpoint before (4,096 bytes XORed inside model.safetensors once
// resumed silently); eval and serve refuse the corrupt checkpoint.
func TestRunResumeSkipsACorruptCheckpoint(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(t.TempDir(), "run")
	if stdout, stderr, code := runRlnode(t, home, append(append([]string{"run", "quickstart", "--out", dir}, tinyRun...), "--set", "checkpoint.keep=0")...); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, stdout, stderr)
	}
	cks, err := train.Checkpoints(dir)
	if err != nil || len(cks) < 2 {
		t.Fatalf("checkpoints %v, %v: want at least 2", cks, err)
	}
	newest, previous := cks[len(cks)-1], cks[len(cks)-2]

	// Any file: one flipped byte is found, and the file named.
	var files []string
	_ = filepath.WalkDir(newest, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && d.Name() != train.ManifestFile {
			files = append(files, p)
		}
		return err
	})
	if len(files) < 5 {
		t.Fatalf("checkpoint files %v: want weights, optimizer, learner and driver state, tokenizer", files)
	}
	for _, f := range files {
		orig, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b := bytes.Clone(orig)
		b[len(b)/2] ^= 0x80
		writeFile(t, f, b)
		if err := train.VerifyCheckpoint(newest); !errors.Is(err, train.ErrCorrupt) || !strings.Contains(err.Error(), ": "+strings.TrimPrefix(f, newest+"/")+" has SHA-256") {
			t.Errorf("%s with a flipped byte: verify says %v", f, err)
		}
		writeFile(t, f, orig)
	}
	if err := train.VerifyCheckpoint(newest); err != nil {
		t.Fatalf("restored checkpoint: %v", err)
	}

	model := filepath.Join(newest, "model.safetensors")
	b, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 3*4096 {
		t.Fatalf("%s: %d bytes, too small for the test", model, len(b))
	}
	for i := len(b) / 2; i < len(b)/2+4096; i++ {
		b[i] ^= 0x5a
	}
	writeFile(t, model, b)

	if _, stderr, code := runRlnode(t, home, "serve", "--model", newest, "--listen", "127.0.0.1:0"); code != 1 || !strings.Contains(stderr, "fails its checksums") {
		t.Errorf("serve of the corrupt checkpoint: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := runRlnode(t, home, "eval", "--model", newest, "--recipe", filepath.Join(dir, "recipe.yaml")); code != 1 || !strings.Contains(stderr, "fails its checksums") {
		t.Errorf("eval of the corrupt checkpoint: exit %d\n%s", code, stderr)
	}

	// eval of the run folder takes the checkpoint before, and says why (it
	// once evaluated it without a word, as if it were the newest).
	if stdout, stderr, code := runRlnode(t, home, "eval", "--model", dir); code != 0 ||
		!strings.Contains(stderr, "rlnode eval: --model "+dir+": skipping checkpoint "+newest+": fails its checksums") ||
		!strings.Contains(stderr, "rlnode eval: --model "+dir+": evaluating "+previous) {
		t.Errorf("eval of the run folder: exit %d\n%s%s", code, stdout, stderr)
	}

	stdout, stderr, code := runRlnode(t, home, "run", filepath.Join(dir, "recipe.yaml"), "--out", dir, "--resume")
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "skipping checkpoint "+newest+": fails its checksums: model.safetensors has SHA-256") ||
		!strings.Contains(stdout, "resuming from "+previous) {
		t.Errorf("resume did not skip the corrupt checkpoint for %s:\n%s%s", previous, stdout, stderr)
	}
	// The corrupt checkpoint was moved aside, whole, before the resumed run
	// wrote the newest checkpoint again (it once wrote over it, mixing its
	// files with the corrupt ones and losing them), and the message says
	// where it went.
	if !strings.Contains(stderr, "moved "+newest+" to "+newest+".corrupt") {
		t.Errorf("resume did not say where the corrupt checkpoint went:\n%s", stderr)
	}
	if kept, err := os.ReadFile(filepath.Join(newest+".corrupt", "model.safetensors")); err != nil || !bytes.Equal(kept, b) {
		t.Errorf("the corrupt checkpoint's weights after the resume: %d bytes, %v; want the corrupt %d bytes kept", len(kept), err, len(b))
	}
	if err := train.VerifyCheckpoint(newest); err != nil {
		t.Errorf("the resumed run's %s: %v", newest, err)
	}
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

var metricLine = regexp.MustCompile(`(?m)^(rlnode_[a-z_]+)\{run="quickstart"\} (\S+)$`)

func scrape(url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range metricLine.FindAllStringSubmatch(string(b), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, err
		}
		out[m[1]] = v
	}
	return out, nil
}

// TestRunMetricsEndpoint scrapes --metrics-addr while a run lasts: the
// run is long enough never to end by itself within the test; Ctrl-C
// (SIGINT) stops it after the step that was scraped.
func TestRunMetricsEndpoint(t *testing.T) {
	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "run")
	args := []string{"run", "quickstart", "--out", dir, "--metrics-addr", "127.0.0.1:0", "--set", "sft.steps=2",
		"--set", "schedule.steps=100000", "--set", "schedule.eval_every=3", "--set", "schedule.checkpoint_every=0",
		"--set", "eval.held_out=4", "--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2"}
	run := startRun(t, home, args...)
	urls := make(chan string, 1)
	go func() {
		for {
			line, err := run.stdout.ReadString('\n')
			if err != nil {
				close(urls)
				return
			}
			if u, ok := strings.CutPrefix(strings.TrimSpace(line), "metrics endpoint: "); ok {
				urls <- u
				_, _ = io.Copy(io.Discard, run.stdout)
				return
			}
		}
	}()
	var url string
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatalf("rlnode run printed no metrics endpoint\nstderr:\n%s", run.stderr)
		}
		url = u
	case <-time.After(60 * time.Second):
		t.Fatal("no metrics endpoint line within 60 s")
	}
	var got map[string]float64
	run.waitFor(t, "an RL step and an evaluation in the scrape", func() bool {
		m, err := scrape(url)
		if err != nil {
			return false
		}
		got = m
		_, reward := m["rlnode_reward_mean"]
		_, eval := m["rlnode_eval_accuracy"]
		return reward && eval && m["rlnode_step"] >= 3
	})
	if err := run.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := run.wait(t); code != 130 {
		t.Errorf("interrupted run: exit %d, want 130\nstderr:\n%s", code, run.stderr)
	}
	// checkpoint_every 0 writes none on schedule but the warm-up's last
	// (step 2): the interrupted step is checkpointed too, and the resume
	// hint names it.
	cks, err := train.Checkpoints(dir)
	if err != nil || len(cks) != 2 || filepath.Base(cks[0]) != "step-2" {
		t.Fatalf("interrupted run left checkpoints %v (%v), want the warm-up's last step's and the interrupted step's\nstderr:\n%s", cks, err, run.stderr)
	}
	if want := "continue from checkpoint " + filepath.Base(cks[1]) + " with: rlnode run"; !strings.Contains(run.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, run.stderr)
	}
	t.Logf("scraped: %v", got)
	checks := []struct {
		name   string
		lo, hi float64
	}{
		{"rlnode_steps_planned", 100002, 100002},
		{"rlnode_run_state", 0, 0},
		{"rlnode_reward_mean", 0, 1},
		{"rlnode_eval_accuracy", 0, 1},
		{"rlnode_weight_version", 1, 1e9},
		{"rlnode_tokens_total", 1, 1e12},
		{"rlnode_tokens_per_second", 1e-9, 1e12},
		{"rlnode_learning_rate", 1e-12, 1},
		{"rlnode_elapsed_seconds", 0, 1e6},
	}
	for _, c := range checks {
		v, ok := got[c.name]
		if !ok || v < c.lo || v > c.hi {
			t.Errorf("%s = %v (present %v), want in [%v, %v]", c.name, v, ok, c.lo, c.hi)
		}
	}
	// The interrupted run still drew its curves, and the endpoint is gone.
	checkCurves(t, dir)
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics")
	if c, err := net.DialTimeout("tcp", host, time.Second); err == nil {
		c.Close()
		t.Errorf("metrics endpoint %s still listens after the run", host)
	}
}

// TestRunRecipeErrorsStartNothing: recipe errors (in the file, in --set,
// a taken --metrics-addr) stop rlnode run before the run directory, any
// checkpoint or any actor exists, and name where the problem is.
func TestRunRecipeErrorsStartNothing(t *testing.T) {
	home := t.TempDir()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\nseed: 1\nschedule:\n  steps: many\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"file", []string{bad}, []string{bad + ":4:", "schedule.steps"}},
		{"set unknown key", []string{"quickstart", "--set", "algorithm.lrr=1"}, []string{"--set algorithm.lrr=1", `unknown key "lrr"`}},
		{"set bad value", []string{"quickstart", "--set", "algorithm.group_size=0"}, []string{"--set algorithm.group_size=0", "algorithm.group_size"}},
		{"metrics port taken", []string{"quickstart", "--metrics-addr", ln.Addr().String()}, []string{"--metrics-addr", "address already in use"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			stdout, stderr, code := runRlnode(t, home, append(append([]string{"run"}, c.args...), "--out", dir)...)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the run directory exists (%v)", err)
			}
			if strings.Contains(stdout, "writing to") {
				t.Errorf("the run started:\n%s", stdout)
			}
		})
	}
}

func readFile(t *testing.T, run, checkpoint, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(run, "checkpoints", checkpoint, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A run folder another run is using is refused, naming the process, with
// --resume and --overwrite too: before, a second `rlnode run --resume` on
// a folder whose run still ran trained beside it, both writing
// checkpoints and the second cutting the first's metrics.jsonl back to
// its resume step. The lock goes with the run.
func TestRunFolderInUseIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	unlock, err := lockRunDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockRunDir(dir); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second lock in the same folder: %v; want it refused naming pid %d", err, os.Getpid())
	}
	for _, extra := range [][]string{nil, {"--resume"}, {"--overwrite"}} {
		args := append([]string{"run", "quickstart", "--out", dir, "--set", "sft.steps=2", "--set", "schedule.steps=2"}, extra...)
		_, stderr, code := runRlnode(t, t.TempDir(), args...)
		if code != 1 || !strings.Contains(stderr, "is in use by another run (pid") {
			t.Errorf("rlnode %v while the folder is locked: exit %d\n%s", extra, code, stderr)
		}
	}
	unlock()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the folder the lock made is still there after unlock (%v)", err)
	}
	_, stderr, code := runRlnode(t, t.TempDir(), "run", "quickstart", "--out", dir, "--set", "sft.steps=2", "--set", "schedule.steps=2")
	if code != 0 {
		t.Fatalf("run after the lock was released: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, runLockFile)); !os.IsNotExist(err) {
		t.Errorf("the finished run left %s (%v)", runLockFile, err)
	}
}

// An archer run cannot be resumed (its critic and replay buffer are not in
// checkpoints): when --resume is refused, or such a run fails, rlnode run
// does not advise continuing it with --resume.
func TestRunArcherDoesNotAdviseResume(t *testing.T) {
	home := t.TempDir()
	out := filepath.Join(home, "run")
	args := []string{"run", "archer", "--out", out, "--set", "sft.steps=1", "--set", "eval.held_out=4", "--set", "algorithm.archer.warmup_steps=0"}
	if stdout, stderr, code := runRlnode(t, home, append(args, "--set", "schedule.steps=1")...); code != 0 {
		t.Fatalf("archer run: exit %d\n%s%s", code, stdout, stderr)
	}
	_, stderr, code := runRlnode(t, home, append(args, "--set", "schedule.steps=2", "--resume")...)
	if code == 0 || !strings.Contains(stderr, "resuming is not supported") {
		t.Fatalf("archer --resume: exit %d: %s", code, stderr)
	}
	if strings.Contains(stderr, "continue from checkpoint") {
		t.Errorf("the refusal advises --resume:\n%s", stderr)
	}
}
