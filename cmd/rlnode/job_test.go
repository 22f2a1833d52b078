package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/ctlsign"
	"github.com/rlnode/rlnode/jobs"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/train"
)

// waitUntil polls cond every 50 ms until it holds or limit passes.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jobInfo is `rlnode job status NAME --json`.
func jobInfo(t *testing.T, home, addr, name string) jobs.Info {
	t.Helper()
	out, errOut, code := runRlnode(t, home, "job", "status", name, "--json", "--address", addr)
	if code != 0 {
		t.Fatalf("job status %s: exit %d: %s", name, code, errOut)
	}
	var in jobs.Info
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("job status --json: %v\n%s", err, out)
	}
	return in
}

// TestJobSurvivesItsNode: a job whose node is killed (SIGKILL) mid-run
// is taken over by another node, which waits for the lost driver's
// actors to be released and continues the run from its newest
// checkpoint; the run ends with the same weights as an uninterrupted run
// in one process. The job's driver, the node's child, dies with it.
func TestJobSurvivesItsNode(t *testing.T) {
	home := t.TempDir()
	// The job runs on "host", where none of the run's actors fit (0.1
	// CPU): they run on "keep", and outlive the driver killed with host.
	keep := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "keep", "--cpus", "4")
	host := startRlnode(t, home, "join", keep.gossip, "--bind", "127.0.0.1:0", "--node-id", "host", "--cpus", "0.1")
	dumpOnFailure(t, keep, host)
	const rlSteps = 60 // many more than the kill's step 4: the run is far from its end then
	args := deterministicRun(rlSteps)
	whole, dir := filepath.Join(t.TempDir(), "whole"), filepath.Join(t.TempDir(), "job")
	if stdout, stderr, code := runRlnode(t, home, append([]string{"run", "quickstart", "--out", whole}, args...)...); code != 0 {
		t.Fatalf("uninterrupted run: exit %d\n%s%s", code, stdout, stderr)
	}

	out, errOut, code := runRlnode(t, home, append([]string{"submit", "quickstart", "--no-wait", "--name", "survivor", "--node", "host",
		"--out", dir, "--address", keep.gossip}, args...)...)
	if code != 0 || !strings.Contains(out, "job survivor submitted: quickstart on node host, writing to "+dir) {
		t.Fatalf("submit: exit %d\n%s%s", code, out, errOut)
	}
	firstRL := filepath.Join(dir, "checkpoints", "step-4", train.DriverStateFile)
	waitUntil(t, 2*time.Minute, "checkpoint step-4", func() bool { _, err := os.Stat(firstRL); return err == nil })
	driver := jobDriverPID(t, dir)
	if err := host.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-host.done
	last := fmt.Sprintf("step-%d", 2+rlSteps)
	if _, err := os.Stat(filepath.Join(dir, "checkpoints", last)); err == nil {
		t.Fatal("the job's run ended before its node was killed: nothing was taken over")
	}
	// The driver dies with its node (the kernel's parent-death signal):
	// it must not go on beside the one that takes the job over.
	waitUntil(t, 10*time.Second, "end of the killed node's driver", func() bool { return processGone(driver) })

	out, errOut, code = runRlnode(t, home, "job", "logs", "survivor", "--follow", "--address", keep.gossip)
	if code != 0 {
		t.Fatalf("job logs --follow: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"rlnode job survivor: attempt 1 on node host",
		"rlnode job survivor: attempt 2 on node keep",
		"rlnode job survivor: waiting for the lost attempt's actors to be released",
		"--continue", "resuming from " + filepath.Join(dir, "checkpoints", "step-"),
		"job survivor SUCCEEDED: job succeeded",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the job's log lacks %q:\n%s", want, out)
		}
	}
	// Had the killed node's driver lived on, it would have run to the end
	// (a step takes milliseconds) and the next attempt resumed from there.
	var from int
	if i := strings.Index(out, "resuming from "+filepath.Join(dir, "checkpoints", "step-")); i < 0 {
		t.Fatal("no resume")
	} else if _, err := fmt.Sscanf(out[i+len("resuming from "+filepath.Join(dir, "checkpoints", "step-")):], "%d", &from); err != nil || from >= 2+rlSteps {
		t.Errorf("the job was taken over from step %d (%v): the killed node's driver went on after its node was gone", from, err)
	}
	in := jobInfo(t, home, keep.gossip, "survivor")
	if in.Status != jobs.Succeeded || in.Restarts != 1 || in.Node != "keep" || in.Out != dir || in.Recipe != "quickstart" {
		t.Errorf("job status: %+v", in)
	}
	for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
		if a, b := readFile(t, whole, last, f), readFile(t, dir, last, f); !bytes.Equal(a, b) {
			t.Errorf("%s of the job taken over differs from the uninterrupted run's", f)
		}
	}
}

// jobDriverPID is the pid of the driver that the job log's last attempt
// started: the process whose environment names the job's folder.
func jobDriverPID(t *testing.T, dir string) int {
	t.Helper()
	var pid int
	waitUntil(t, 10*time.Second, "the job's driver process", func() bool {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			var p int
			if _, err := fmt.Sscanf(e.Name(), "%d", &p); err != nil {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && bytes.Contains(cmdline, []byte(filepath.Join(dir, jobs.RecipeFile))) {
				pid = p
				return true
			}
		}
		return false
	})
	return pid
}

// TestJobCommands: a job followed to its end, stopped after a step,
// failing, and every refusal naming what is wrong.
func TestJobCommands(t *testing.T) {
	home := t.TempDir()
	if _, errOut, code := runRlnode(t, home, "job", "list"); code != 1 || !strings.Contains(errOut, "no rlnode node") {
		t.Errorf("job list with no node: exit %d, %q", code, errOut)
	}
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head")
	dumpOnFailure(t, head)
	addr := []string{"--address", head.gossip}
	dir := filepath.Join(t.TempDir(), "ok")

	// Followed to its end: the submit's exit code is the job's.
	out, errOut, code := runRlnode(t, home, append(append([]string{"submit", "quickstart", "--name", "ok", "--out", dir}, addr...), tinyRun...)...)
	if code != 0 || !strings.Contains(out, "done: 7 steps") || !strings.Contains(out, "job ok SUCCEEDED: job succeeded") {
		t.Fatalf("submit: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoints", "step-7", train.DriverStateFile)); err != nil {
		t.Errorf("the job's run: %v", err)
	}
	out, _, _ = runRlnode(t, home, append([]string{"job", "list"}, addr...)...)
	if !strings.Contains(out, "ok") || !strings.Contains(out, "SUCCEEDED") || !strings.Contains(out, dir) {
		t.Errorf("job list:\n%s", out)
	}
	logged, _, code := runRlnode(t, home, append([]string{"job", "logs", "ok"}, addr...)...)
	if code != 0 || !strings.Contains(logged, "done: 7 steps") || !strings.Contains(logged, "driver exited (status 0)") {
		t.Errorf("job logs of an ended job: exit %d\n%s", code, logged)
	}

	// A job into a folder that holds another run is refused, and
	// nothing there is written over; with --resume it continues the run.
	recipe := readFileAt(t, filepath.Join(dir, jobs.RecipeFile))
	_, errOut, code = runRlnode(t, home, append(append([]string{"submit", "quickstart", "--name", "clash", "--out", dir}, addr...), tinyRun...)...)
	if code != 1 || !strings.Contains(errOut, "run folder "+dir+" on node head holds another run or job (recipe.yaml)") {
		t.Errorf("a job into another run's folder: exit %d\n%s", code, errOut)
	}
	if !bytes.Equal(readFileAt(t, filepath.Join(dir, jobs.RecipeFile)), recipe) {
		t.Error("the refused job wrote over the folder's job recipe")
	}
	out, errOut, code = runRlnode(t, home, append(append(append([]string{"submit", "quickstart", "--name", "more", "--resume", "--out", dir}, addr...), tinyRun...), "--set", "schedule.steps=5")...)
	if code != 0 || !strings.Contains(out, "resuming from "+filepath.Join(dir, "checkpoints", "step-7")) || !strings.Contains(out, "done: 9 steps") || !strings.Contains(out, "job more SUCCEEDED") {
		t.Errorf("submit --resume: exit %d\n%s%s", code, out, errOut)
	}

	// A job that failed before its first checkpoint (no node has the
	// resource its learner asks for) is run again into its folder with
	// --resume: it starts over there.
	again := filepath.Join(t.TempDir(), "again")
	out, errOut, code = runRlnode(t, home, append(append([]string{"submit", "quickstart", "--name", "nowhere", "--out", again}, addr...),
		append(tinyRun, "--set", "placement.learner.custom={nowhere: 1}")...)...)
	if code != 1 || !strings.Contains(out, "job nowhere FAILED") {
		t.Fatalf("a job whose learner fits nowhere: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runRlnode(t, home, append(append([]string{"submit", "quickstart", "--name", "again", "--resume", "--out", again}, addr...), tinyRun...)...)
	if code != 0 || !strings.Contains(out, "holds a run that wrote no checkpoint: starting it over") || !strings.Contains(out, "job again SUCCEEDED") {
		t.Errorf("submit --resume of a job that wrote no checkpoint: exit %d\n%s%s", code, out, errOut)
	}

	// Stopped after a step: the run checkpoints it and the job is STOPPED.
	long := filepath.Join(t.TempDir(), "long")
	out, errOut, code = runRlnode(t, home, append(append([]string{"submit", "quickstart", "--no-wait", "--name", "long", "--out", long}, addr...),
		"--set", "sft.steps=2", "--set", "schedule.steps=100000", "--set", "schedule.eval_every=0", "--set", "eval.held_out=4",
		"--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2")...)
	if code != 0 {
		t.Fatalf("submit --no-wait: exit %d\n%s%s", code, out, errOut)
	}
	waitUntil(t, 2*time.Minute, "the long job's RL steps", func() bool {
		b, _ := os.ReadFile(filepath.Join(long, jobs.LogFile))
		return bytes.Contains(b, []byte("(RL 2/100000)"))
	})
	if out, errOut, code = runRlnode(t, home, append([]string{"job", "stop", "long"}, addr...)...); code != 0 {
		t.Fatalf("job stop: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = runRlnode(t, home, append([]string{"job", "logs", "long", "--follow"}, addr...)...)
	if code != 1 || !strings.Contains(out, "job long STOPPED: job stopped") || !strings.Contains(out, "interrupted; stopping after the current step") {
		t.Errorf("job logs --follow of a stopped job: exit %d\n%s", code, out)
	}
	if cks, err := train.Checkpoints(long); err != nil || len(cks) == 0 {
		t.Errorf("the stopped job wrote no checkpoint: %v %v", cks, err)
	}

	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"submit", "quickstart", "--name", "ok", "--out", dir + "2"}, 1, ": job ok exists (SUCCEEDED): choose another name, or forget it first with rlnode job delete ok"},
		{[]string{"submit", "quickstart", "--name", "bad name"}, 2, `--name: job name "bad name": want 1 to 64 letters`},
		{[]string{"submit", "quickstart", "--max-restarts", "101"}, 2, "--max-restarts 101: want 0 to 100"},
		{[]string{"submit", "quickstart", "--set", "algorithm.lr=-1"}, 1, "algorithm.lr"},
		{[]string{"submit", "quickstart", "--node", "nowhere"}, 1, "nowhere"},
		{[]string{"job", "status", "missing"}, 1, "job missing: no such job"},
		{[]string{"job", "stop", "ok"}, 1, "job ok is SUCCEEDED: it has ended"},
		{[]string{"job", "logs", "../etc"}, 2, `job name "../etc"`},
		{[]string{"job", "frobnicate"}, 2, `unknown subcommand "frobnicate"`},
	} {
		_, errOut, code := runRlnode(t, home, append(c.args, addr...)...)
		if code != c.code || !strings.Contains(errOut, c.says) {
			t.Errorf("rlnode %v: exit %d, %q; want %d, %q", c.args, code, errOut, c.code, c.says)
		}
		// The command's name begins the line once ("rlnode submit: node
		// N: submit: job ok exists" said it twice).
		if n := strings.Count(errOut, c.args[0]+": "); n > 1 {
			t.Errorf("rlnode %v: %q names %q %d times", c.args, errOut, c.args[0], n)
		}
	}

	// The job routes act for the node's user: no token, no answer.
	t.Setenv("RLNODE_HOME", home)
	ri, err := cluster.FindRunning(head.gossip)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ method, path string }{{"GET", "/jobs"}, {"POST", "/jobs"}, {"GET", "/jobs/ok/log"}, {"POST", "/jobs/long/stop"}} {
		req, _ := http.NewRequest(r.method, "http://"+ri.Control+r.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without the token: HTTP %d, want 401", r.method, r.path, resp.StatusCode)
		}
	}
}

// TestRunContinue: rlnode run --continue resumes a run that wrote a
// checkpoint, starts over one that wrote none, and starts a new run in
// an empty folder (what a job's driver does on the node that takes the
// job over).
func TestRunContinue(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(t.TempDir(), "run")
	if _, errOut, code := runRlnode(t, home, "run", "quickstart", "--continue"); code != 2 || !strings.Contains(errOut, "--continue needs --out DIR") {
		t.Errorf("--continue without --out: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runRlnode(t, home, "run", "quickstart", "--out", dir, "--continue", "--resume"); code != 2 || !strings.Contains(errOut, "neither --resume nor --overwrite") {
		t.Errorf("--continue --resume: exit %d, %q", code, errOut)
	}
	out, errOut, code := runRlnode(t, home, append([]string{"run", "quickstart", "--out", dir, "--continue"}, tinyRun...)...)
	if code != 0 || strings.Contains(out, "resuming") || !strings.Contains(out, "done: 7 steps") {
		t.Fatalf("--continue into an empty folder: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runRlnode(t, home, append(append([]string{"run", filepath.Join(dir, "recipe.yaml"), "--out", dir, "--continue"}, tinyRun...), "--set", "schedule.steps=4")...)
	if code != 0 || !strings.Contains(out, "resuming from "+filepath.Join(dir, "checkpoints", "step-7")) || !strings.Contains(out, "done: 8 steps") {
		t.Errorf("--continue of a run with a checkpoint: exit %d\n%s%s", code, out, errOut)
	}
	// A run stopped before its first checkpoint: started over.
	if err := os.RemoveAll(filepath.Join(dir, "checkpoints")); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runRlnode(t, home, append([]string{"run", "quickstart", "--out", dir, "--continue"}, tinyRun...)...)
	if code != 0 || strings.Contains(out, "resuming") || !strings.Contains(errOut, "holds a run that wrote no checkpoint: starting it over") || !strings.Contains(out, "done: 7 steps") {
		t.Errorf("--continue of a run without a checkpoint: exit %d\n%s%s", code, out, errOut)
	}
}

// TestFollowThroughANodeThatStops: submit follows the log through the
// node on its host; when that node stops, submit says which node no
// longer answers and that the job goes on (it said only "log: Get
// http://127.0.0.1:PORT/...: connection refused"), and the job does.
func TestFollowThroughANodeThatStops(t *testing.T) {
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head")
	via := startRlnode(t, home, "join", head.gossip, "--bind", "127.0.0.1:0", "--node-id", "via", "--cpus", "0.1")
	dumpOnFailure(t, head, via)
	dir := filepath.Join(t.TempDir(), "long")
	sub := startRun(t, home, "submit", "quickstart", "--name", "long", "--node", "head", "--out", dir, "--address", via.gossip,
		"--set", "sft.steps=2", "--set", "schedule.steps=100000", "--set", "schedule.eval_every=0", "--set", "eval.held_out=4",
		"--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2")
	sub.waitFor(t, "the job's RL steps", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, jobs.LogFile))
		return bytes.Contains(b, []byte("(RL 2/100000)"))
	})
	if out, errOut, code := runRlnode(t, home, "stop", "--address", via.gossip); code != 0 {
		t.Fatalf("stop via: exit %d\n%s%s", code, out, errOut)
	}
	if code := sub.wait(t); code != 1 || !strings.Contains(sub.stderr.String(), "rlnode job: long: node via (control endpoint ") ||
		!strings.Contains(sub.stderr.String(), "the job goes on where it runs") {
		t.Errorf("submit following through a node that stopped: exit %d\n%s", code, sub.stderr)
	}
	if in := jobInfo(t, home, head.gossip, "long"); in.Status != jobs.Running || in.Node != "head" {
		t.Errorf("the job once the node it was followed through stopped: %+v", in)
	}
	// The status command it suggests asks the same node (two run here).
	if out, errOut, code := runRlnode(t, home, "job", "stop", "long", "--now", "--address", head.gossip); code != 0 ||
		!strings.Contains(out, "rlnode job status long --address "+head.gossip+" shows it STOPPED") {
		t.Errorf("job stop --now: exit %d\n%s%s", code, out, errOut)
	}
}

// TestSubmitsInOneSecond: submit's default folder names the second, and
// a job submitted beside another in the same second (a sweep's loop)
// takes the next free NAME-DATE-N, as rlnode run's does; it was refused,
// the folder holding the other's run. Every folder of the next two
// minutes holds another run here, so no clock decides the outcome.
func TestSubmitsInOneSecond(t *testing.T) {
	home, wd := t.TempDir(), t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head")
	dumpOnFailure(t, head)
	now := time.Now()
	for s := range 120 {
		taken := filepath.Join(wd, "runs", "quickstart-"+now.Add(time.Duration(s)*time.Second).Format("20060102-150405"))
		if err := os.MkdirAll(taken, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(taken, "recipe.yaml"), []byte("name: other\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := rlnodeCmd(t, home, append([]string{"submit", "quickstart", "--name", "sweep1", "--address", head.gossip}, tinyRun...)...)
	cmd.Dir = wd
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "job sweep1 SUCCEEDED") {
		t.Fatalf("submit with the default folder taken: %v\n%s", err, out)
	}
	in := jobInfo(t, home, head.gossip, "sweep1")
	if !strings.HasPrefix(in.Out, filepath.Join(wd, "runs", "quickstart-")) || !strings.HasSuffix(in.Out, "-2") {
		t.Errorf("the job's folder: %s, want the second of its name", in.Out)
	}
}

// TestSubmitHintsWork: the commands submit prints to follow and stop its
// job run as printed. With two nodes on the host (README's walk-through)
// they lacked the --address submit was given, and each one failed with
// "2 nodes run on this host ... choose one with --address".
func TestSubmitHintsWork(t *testing.T) {
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head")
	other := startRlnode(t, home, "join", head.gossip, "--bind", "127.0.0.1:0", "--node-id", "other", "--cpus", "0.1")
	dumpOnFailure(t, head, other)
	dir := filepath.Join(t.TempDir(), "hinted")
	out, errOut, code := runRlnode(t, home, append([]string{"submit", "quickstart", "--name", "hinted", "--node", "head", "--out", dir,
		"--address", head.gossip, "--no-wait"}, tinyRun...)...)
	if code != 0 {
		t.Fatalf("submit --no-wait: exit %d\n%s%s", code, out, errOut)
	}
	var hints [][]string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "rlnode" && f[1] == "job" {
			hints = append(hints, f[1:])
		}
	}
	if len(hints) != 2 || hints[0][1] != "logs" || hints[1][1] != "stop" {
		t.Fatalf("submit's hints: %q\n%s", hints, out)
	}
	// Follow first (the job ends), then stop: an ended job is told so.
	for _, h := range hints {
		if hout, herr, hcode := runRlnode(t, home, h...); hcode != 0 && !strings.Contains(herr, "it has ended") {
			t.Errorf("rlnode %s, as submit printed it: exit %d\n%s%s", strings.Join(h, " "), hcode, hout, herr)
		}
	}
}

// bannerValue is the value of a node's banner line "NAME: VALUE".
func bannerValue(t *testing.T, n *runningNode, name string) string {
	t.Helper()
	for _, line := range strings.Split(n.out.String(), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name+":" {
			return f[1]
		}
	}
	t.Fatalf("no %s: line in the node's banner:\n%s", name, n.out)
	return ""
}

// A host with no node of the cluster submits and follows a job through a
// node's control endpoint by URL, its requests signed with a copy of the
// cluster key: the run lands in the node's runs folder; a wrong or
// missing key, https, a relative --out and a recipe naming a file the
// node does not see are refused, naming why.
func TestRemoteSubmit(t *testing.T) {
	home, laptop, work := t.TempDir(), t.TempDir(), t.TempDir()
	_, url, key, clusterKey := remoteHead(t, home, work, laptop)
	args := append([]string{"submit", "quickstart", "--name", "far", "--address", url, "--key-file", key}, deterministicRun(2)...)
	out, errOut, code := runRlnode(t, laptop, args...)
	if code != 0 || !strings.Contains(out, "job far SUCCEEDED") {
		t.Fatalf("remote submit: exit %d\n%s%s", code, out, errOut)
	}
	// The node picked the folder, in its working folder's runs/.
	st, errOut, code := runRlnode(t, laptop, "job", "status", "far", "--json", "--address", url, "--key-file", key)
	var in jobs.Info
	if err := json.Unmarshal([]byte(st), &in); code != 0 || err != nil {
		t.Fatalf("job status: exit %d, %v\n%s%s", code, err, st, errOut)
	}
	if in.Status != jobs.Succeeded || filepath.Dir(in.Out) != filepath.Join(work, "runs") || !strings.HasPrefix(filepath.Base(in.Out), "quickstart-") {
		t.Fatalf("job far: %+v (want SUCCEEDED in %s)", in, filepath.Join(work, "runs"))
	}
	if _, err := os.Stat(filepath.Join(in.Out, "checkpoints", "step-4")); err != nil {
		t.Errorf("the remote job's last checkpoint: %v", err)
	}
	// The hints it printed carry the key file (not the default one).
	if !strings.Contains(out, "rlnode job logs far --follow --address "+url+" --key-file "+key) {
		t.Errorf("submit's hints:\n%s", out)
	}
	logs, errOut, code := runRlnode(t, laptop, "job", "logs", "far", "--address", url, "--key-file", key)
	if code != 0 || !strings.Contains(logs, "done: 4 steps") {
		t.Errorf("job logs: exit %d\n%s%s", code, logs, errOut)
	}
	// A recipe file of this host, naming a dataset by a relative path:
	// the node reads it, the dataset is the one in its working folder.
	if err := os.MkdirAll(filepath.Join(work, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	var rows strings.Builder
	for i := range 32 {
		fmt.Fprintf(&rows, "{\"prompt\": \"%d+%d\", \"answer\": \"%d\"}\n", i%7, i%5, i%7+i%5)
	}
	if err := os.WriteFile(filepath.Join(work, "data", "train.jsonl"), []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(laptop, "mine.yaml")
	if err := os.WriteFile(mine, []byte("name: mine\nmodels: {policy: {init: {}}}\ndata: {dataset: {train: data/train.jsonl}}\neval: {held_out: 4}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"submit", mine, "--name", "mine", "--address", url, "--key-file", key}, deterministicRun(2)...)
	if out, errOut, code := runRlnode(t, laptop, args...); code != 0 || !strings.Contains(out, "job mine SUCCEEDED") || !strings.Contains(out, filepath.Join(work, "runs", "mine-")) {
		t.Fatalf("remote submit of a recipe file: exit %d\n%s%s", code, out, errOut)
	}
	bad := filepath.Join(laptop, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\nmodels: {policy: {init: {}}}\ndata: {dataset: {train: data/missing.jsonl}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runRlnode(t, laptop, "submit", bad, "--address", url, "--key-file", key); code == 0 ||
		!strings.Contains(errOut, "as node head reads it") || !strings.Contains(errOut, bad+":3: data.dataset.train") || !strings.Contains(errOut, filepath.Join(work, "data", "missing.jsonl")) {
		t.Errorf("a recipe file naming a dataset the node does not have: exit %d\n%s%s", code, out, errOut)
	}
	// The dashboard on this host shows the remote cluster, its jobs too.
	d := startUntil(t, laptop, "dashboard:", "dashboard", "--bind", "127.0.0.1:0", "--runs", laptop, "--address", url)
	waitUntil(t, time.Minute, "the remote cluster on the dashboard", func() bool {
		resp, err := http.Get(strings.TrimSuffix(d.banner["dashboard:"], "/") + "/api/cluster")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"id":"head"`) && strings.Contains(string(b), `"name":"far"`)
	})
	if st, errOut, code := runRlnode(t, laptop, "status", "--address", url); code != 0 || !strings.Contains(st, "head") {
		t.Errorf("remote status: exit %d\n%s%s", code, st, errOut)
	}
	other := filepath.Join(laptop, "other.key")
	if err := os.WriteFile(other, []byte("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refusals := []struct {
		args []string
		want string
	}{
		{[]string{"job", "list", "--address", url, "--key-file", other}, "signature does not match"},
		{[]string{"job", "list", "--address", url}, filepath.Join(laptop, "cluster.key")},
		{[]string{"job", "list", "--address", strings.Replace(url, "http:", "https:", 1), "--key-file", key}, "speaks plain HTTP"},
		{[]string{"job", "list", "--address", url + "/jobs", "--key-file", key}, "want http://HOST:PORT"},
		{[]string{"submit", "quickstart", "--address", url, "--key-file", key, "--out", "runs/x"}, "an absolute path on the cluster's filesystem"},
	}
	for _, r := range refusals {
		out, errOut, code := runRlnode(t, laptop, r.args...)
		if code == 0 || !strings.Contains(errOut, r.want) {
			t.Errorf("rlnode %v: exit %d, want a refusal saying %q\n%s%s", r.args, code, r.want, out, errOut)
		}
	}
	// The node checks the recipe on its host: a dataset it does not see.
	recipe := "name: gone\nmodels:\n  policy:\n    init: {layers: 1, hidden: 32, heads: 2, vocab: 64}\ndata:\n  dataset:\n    train: " + filepath.Join(laptop, "missing.jsonl") + "\n"
	c := jobs.Client{Control: strings.TrimPrefix(url, "http://"), Key: clusterKey}
	_, err := c.Submit(t.Context(), jobs.SubmitRequest{Recipe: recipe, RecipeName: "gone", Out: filepath.Join(work, "gone")})
	var he *jobs.HTTPError
	if !errors.As(err, &he) || he.Code != http.StatusBadRequest || !strings.Contains(he.Msg, "checked on node head") || !strings.Contains(he.Msg, "missing.jsonl") {
		t.Errorf("a recipe naming a file the node does not see: %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, "gone")); err == nil {
		t.Error("a refused submit made its run folder")
	}
}

// remoteHead starts node "head" (4 CPUs) with home, in the working
// folder work, and copies its cluster key into laptop (mode 0600), as a
// host without a node holds it: the node, its control endpoint's URL,
// the copy's path and the key.
func remoteHead(t *testing.T, home, work, laptop string) (*runningNode, string, string, []byte) {
	t.Helper()
	headKey := filepath.Join(home, "cluster.key")
	head := startRlnodeIn(t, work, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head", "--cpus", "4", "--key-file", headKey)
	dumpOnFailure(t, head)
	b, err := os.ReadFile(headKey)
	if err != nil {
		t.Fatal(err)
	}
	keyCopy := filepath.Join(laptop, "copy.key")
	if err := os.WriteFile(keyCopy, b, 0o600); err != nil {
		t.Fatal(err)
	}
	key, _, err := cluster.LoadOrCreateKey(headKey, false)
	if err != nil {
		t.Fatal(err)
	}
	return head, "http://" + bannerValue(t, head, "control"), keyCopy, key
}

// A job submitted while another holds the cluster's room waits PENDING,
// saying what its run lacks, and runs once the room frees; one stopped
// while it waits ends STOPPED. (A run that no node could ever hold fails
// at once: TestPlacementNoRoomNow.)
func TestJobsWaitForRoom(t *testing.T) {
	home, work := t.TempDir(), t.TempDir()
	n := startRlnodeIn(t, work, home, "start", "--bind", "127.0.0.1:0", "--node-id", "only", "--cpus", "2")
	dumpOnFailure(t, n)
	submit := func(name string, steps int) string {
		t.Helper()
		dir := filepath.Join(work, name)
		out, errOut, code := runRlnode(t, home, append([]string{"submit", "quickstart", "--no-wait", "--name", name, "--out", dir}, deterministicRun(steps)...)...)
		if code != 0 {
			t.Fatalf("submit %s: exit %d\n%s%s", name, code, out, errOut)
		}
		return dir
	}
	status := func(name string) jobs.Info { return jobInfo(t, home, n.gossip, name) }
	holder := submit("holder", 400)
	waitUntil(t, 3*time.Minute, "the holder's first RL step", func() bool {
		b, _ := os.ReadFile(filepath.Join(holder, "job.log"))
		return strings.Contains(string(b), "(RL 1/400)")
	})
	waiter := submit("waiter", 2)
	waitUntil(t, 2*time.Minute, "waiter PENDING", func() bool { return status("waiter").Status == jobs.Pending })
	// It names what holds the room, and the job whose it is, and neither
	// the run's made-up actor names nor the placement error's sentinel
	// (PENDING says that).
	if in := status("waiter"); !strings.Contains(in.Cause, "waiting for room") || !strings.Contains(in.Cause, "no node can host") ||
		!strings.Contains(in.Cause, "the room is held by actor") || !strings.Contains(in.Cause, " of job holder (") ||
		strings.Contains(in.Cause, "spawn learner-") || strings.Contains(in.Cause, "infeasible placement") {
		t.Errorf("the waiting job's cause: %q", in.Cause)
	}
	submit("quitter", 2)
	waitUntil(t, 2*time.Minute, "quitter PENDING", func() bool { return status("quitter").Status == jobs.Pending })
	if out, errOut, code := runRlnode(t, home, "job", "stop", "quitter"); code != 0 {
		t.Fatalf("job stop quitter: exit %d\n%s%s", code, out, errOut)
	}
	waitUntil(t, time.Minute, "quitter STOPPED", func() bool { return status("quitter").Status == jobs.Stopped })
	if in := status("quitter"); !strings.Contains(in.Cause, "while it waited for room") {
		t.Errorf("a job stopped while pending: %+v", in)
	}
	if out, errOut, code := runRlnode(t, home, "job", "stop", "holder", "--now"); code != 0 {
		t.Fatalf("job stop holder --now: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := runRlnode(t, home, "job", "logs", "waiter", "--follow")
	if code != 0 || !strings.Contains(out, "job waiter SUCCEEDED") || !strings.Contains(out, "starting its driver again") {
		t.Fatalf("the waiting job, once the room freed: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(waiter, "checkpoints", "step-4")); err != nil {
		t.Errorf("the waiting job's last checkpoint: %v", err)
	}
}

// Jobs submitted together race for the same room: on a node of 2 CPUs,
// each of two places its learner (1 CPU) and finds none for its rollout
// actor, and both drivers exit, freeing it, before either job begins to
// wait. No room grew after that, so both waited PENDING the 5 minutes of
// roomRetry on an idle node (four such jobs on three nodes did so by
// hand). They try again after 5 s now, the earlier first, and both run.
func TestJobsSubmittedTogetherAllRun(t *testing.T) {
	home, work := t.TempDir(), t.TempDir()
	n := startRlnodeIn(t, work, home, "start", "--bind", "127.0.0.1:0", "--node-id", "only", "--cpus", "2")
	dumpOnFailure(t, n)
	names := []string{"first", "second"}
	for _, name := range names {
		args := append([]string{"submit", "quickstart", "--no-wait", "--name", name, "--out", filepath.Join(work, name)}, deterministicRun(2)...)
		if out, errOut, code := runRlnode(t, home, args...); code != 0 {
			t.Fatalf("submit %s: exit %d\n%s%s", name, code, out, errOut)
		}
	}
	// Well within roomRetry: a job that waited it out fails here.
	waitUntil(t, 3*time.Minute, "both jobs to end", func() bool {
		for _, name := range names {
			if jobs.Active(jobInfo(t, home, n.gossip, name).Status) {
				return false
			}
		}
		return true
	})
	raced := 0
	for _, name := range names {
		b, _ := os.ReadFile(filepath.Join(work, name, "job.log"))
		if strings.Contains(string(b), "has no room for its run now") {
			raced++
		}
		if in := jobInfo(t, home, n.gossip, name); in.Status != jobs.Succeeded {
			t.Errorf("job %s: %s (%s)\n%s", name, in.Status, in.Cause, b)
		}
	}
	t.Logf("%d of the jobs found no room at first", raced)
}

// TestJobWithNoRestartsLeftWhenItsNodeStops: a job whose node stops
// (gracefully) with no restarts left ends FAILED, and its cause says
// that the node stopped, that --max-restarts were used up, and how to
// continue the run; it said only "node stopped". The command it gives
// continues the run as a new job.
func TestJobWithNoRestartsLeftWhenItsNodeStops(t *testing.T) {
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head")
	host := startRlnode(t, home, "join", head.gossip, "--bind", "127.0.0.1:0", "--node-id", "host", "--cpus", "0.1")
	dumpOnFailure(t, head, host)
	dir := filepath.Join(t.TempDir(), "norestart")
	long := []string{"--set", "sft.steps=2", "--set", "schedule.steps=100000", "--set", "schedule.eval_every=0", "--set", "eval.held_out=4",
		"--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2", "--set", "schedule.checkpoint_every=1"}
	out, errOut, code := runRlnode(t, home, append([]string{"submit", "quickstart", "--no-wait", "--name", "once", "--node", "host",
		"--max-restarts", "0", "--out", dir, "--address", head.gossip}, long...)...)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s%s", code, out, errOut)
	}
	waitUntil(t, 2*time.Minute, "the job's RL steps", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, jobs.LogFile))
		return bytes.Contains(b, []byte("(RL 2/100000)"))
	})
	if out, errOut, code := runRlnode(t, home, "stop", "--address", host.gossip); code != 0 {
		t.Fatalf("stop host: exit %d\n%s%s", code, out, errOut)
	}
	var in jobs.Info
	waitUntil(t, time.Minute, "the job's end", func() bool {
		in = jobInfo(t, home, head.gossip, "once")
		return in.Status != jobs.Running && in.Status != jobs.Restarting
	})
	resume := "rlnode submit " + filepath.Join(dir, jobs.RecipeFile) + " --resume --out " + dir
	if in.Status != jobs.Failed || !strings.Contains(in.Cause, "node host stopped") || !strings.Contains(in.Cause, "--max-restarts 0") ||
		!strings.HasSuffix(in.Cause, resume) {
		t.Fatalf("job status once its node stopped with no restarts left: %+v; want FAILED, the node, --max-restarts and %q", in, resume)
	}
	// The command continues the run from its newest checkpoint.
	args := append(strings.Fields(strings.TrimPrefix(resume, "rlnode ")), "--name", "again", "--no-wait", "--address", head.gossip)
	if out, errOut, code := runRlnode(t, home, args...); code != 0 {
		t.Fatalf("%s: exit %d\n%s%s", resume, code, out, errOut)
	}
	waitUntil(t, 2*time.Minute, "the resumed job's first step", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, jobs.LogFile))
		return bytes.Contains(b, []byte("resuming from "+filepath.Join(dir, "checkpoints", "step-")))
	})
	if out, errOut, code := runRlnode(t, home, "job", "stop", "again", "--now", "--address", head.gossip); code != 0 {
		t.Errorf("job stop again --now: exit %d\n%s%s", code, out, errOut)
	}
}

// A signed submit seen on the way (the endpoint is plain HTTP) and sent
// again, as it was, to another node of the cluster: that node has not
// seen its nonce, and Host travels in the request itself, so the
// signature holds there. The copy must not start a second job: the
// job's default name comes from the signed time and nonce, so the copy
// names the same job and is refused.
func TestRemoteSubmitReplayedToAnotherNode(t *testing.T) {
	home, other, work, work2 := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	headKey := filepath.Join(home, "cluster.key")
	head := startRlnodeIn(t, work, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head", "--cpus", "4", "--key-file", headKey)
	n2 := startRlnodeIn(t, work2, other, "join", head.gossip, "--bind", "127.0.0.1:0", "--node-id", "n2", "--cpus", "0.1", "--key-file", headKey)
	dumpOnFailure(t, head, n2)
	headCtl, n2Ctl := bannerValue(t, head, "control"), bannerValue(t, n2, "control")
	clusterKey, _, err := cluster.LoadOrCreateKey(headKey, false)
	if err != nil {
		t.Fatal(err)
	}
	sets := []string{}
	for i, a := range deterministicRun(2) {
		if i%2 == 1 {
			sets = append(sets, a)
		}
	}
	body, _ := json.Marshal(jobs.SubmitRequest{SourceName: "quickstart", Sets: sets, Node: "head"})
	sent, _ := http.NewRequest("POST", "http://"+headCtl+"/jobs", bytes.NewReader(body))
	ctlsign.Sign(sent, clusterKey, body, time.Now())
	copied, _ := http.NewRequest("POST", "http://"+n2Ctl+"/jobs", bytes.NewReader(body))
	copied.Header, copied.Host = sent.Header.Clone(), headCtl
	answer := func(req *http.Request) (int, string) {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(msg)
	}
	code, msg := answer(sent)
	if code != http.StatusCreated {
		t.Fatalf("the submit: HTTP %d %s", code, msg)
	}
	var in jobs.Info
	if err := json.Unmarshal([]byte(msg), &in); err != nil {
		t.Fatal(err)
	}
	if code, msg := answer(copied); code != http.StatusConflict || !strings.Contains(msg, in.Name) {
		t.Errorf("the copy, sent to node n2: HTTP %d %s (want 409: job %s exists)", code, msg, in.Name)
	}
	logs, errOut, code := runRlnode(t, home, "job", "logs", in.Name, "--follow", "--address", head.gossip)
	if code != 0 {
		t.Errorf("job logs %s: exit %d\n%s%s", in.Name, code, logs, errOut)
	}
	list, errOut, code := runRlnode(t, home, "job", "list", "--json", "--address", head.gossip)
	var all []jobs.Info
	if err := json.Unmarshal([]byte(list), &all); code != 0 || err != nil || len(all) != 1 {
		t.Errorf("jobs after the copy: exit %d, %v, want one\n%s%s", code, err, list, errOut)
	}
	// The run continued from a host that does not see its folder, as a
	// failed resume's hint says (resume with DIR/recipe.yaml): the node
	// reads the run's own recipe.
	c := jobs.Client{Control: headCtl, Key: clusterKey}
	again, err := c.Submit(t.Context(), jobs.SubmitRequest{Name: "again", SourceName: filepath.Join(in.Out, "recipe.yaml"), Sets: []string{"schedule.steps=4"}, Resume: true, Out: in.Out})
	if err != nil {
		t.Fatalf("resume with the run's recipe.yaml, which only the node sees: %v", err)
	}
	if logs, errOut, code := runRlnode(t, home, "job", "logs", again.Name, "--follow", "--address", head.gossip); code != 0 || !strings.Contains(logs, "done: 4 steps") {
		t.Errorf("the resumed job: exit %d\n%s%s", code, logs, errOut)
	}
}

// A remote submit --resume of OUT/recipe.yaml lets the node read it:
// the run's folder is the cluster's, and may not be on this host.
func TestNodeReadsTheRunsRecipe(t *testing.T) {
	if jobs.RunRecipeFile != recipes.ResolvedFile {
		t.Fatalf("jobs.RunRecipeFile %q, the file a run writes %q", jobs.RunRecipeFile, recipes.ResolvedFile)
	}
	for _, c := range []struct {
		recipe, out  string
		resume, want bool
	}{
		{"/runs/a/recipe.yaml", "/runs/a", true, true},
		{"/runs/a//recipe.yaml", "/runs/a/", true, true},
		{"/runs/a/recipe.yaml", "/runs/a", false, false},
		{"/runs/b/recipe.yaml", "/runs/a", true, false},
		{"runs/a/recipe.yaml", "runs/a", true, false},
		{"/runs/a/other.yaml", "/runs/a", true, false},
		{"/runs/a/job-recipe.yaml", "/runs/a", true, true},
	} {
		if got := jobs.IsRunRecipe(c.recipe, c.out, c.resume); got != c.want {
			t.Errorf("IsRunRecipe(%q, %q, %v) = %v", c.recipe, c.out, c.resume, got)
		}
	}
}

// A job stopped from a host without a node, followed to its end there:
// the hint it ends with continues the run as a job through the same
// address, and works as printed; the driver's own hint in the job's log
// is a submit too (rlnode run --address would run the driver in the
// terminal, with the node's key file and gossip address).
func TestRemoteStopThenResumeAsPrinted(t *testing.T) {
	home, laptop, work := t.TempDir(), t.TempDir(), t.TempDir()
	_, url, key, _ := remoteHead(t, home, work, laptop)
	long := []string{"--set", "sft.steps=0", "--set", "schedule.steps=100000", "--set", "schedule.eval_every=0", "--set", "eval.held_out=4",
		"--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2", "--set", "schedule.checkpoint_every=1"}
	args := append([]string{"submit", "quickstart", "--name", "long", "--no-wait", "--address", url, "--key-file", key}, long...)
	if out, errOut, code := runRlnode(t, laptop, args...); code != 0 {
		t.Fatalf("submit: exit %d\n%s%s", code, out, errOut)
	}
	// Once a step is checkpointed, the driver's hint is printed too.
	waitUntil(t, 2*time.Minute, "second step in the job's log", func() bool {
		logs, _, _ := runRlnode(t, laptop, "job", "logs", "long", "--address", url, "--key-file", key)
		return strings.Contains(logs, "step 2/")
	})
	if out, errOut, code := runRlnode(t, laptop, "job", "stop", "long", "--address", url, "--key-file", key); code != 0 {
		t.Fatalf("job stop: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := runRlnode(t, laptop, "job", "logs", "long", "--follow", "--address", url, "--key-file", key)
	if code == 0 || !strings.Contains(out, "job long STOPPED") {
		t.Fatalf("job logs --follow of a stopped job: exit %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(out, "with: rlnode run ") || !strings.Contains(out, "with: rlnode submit ") {
		t.Errorf("the job's log hints at rlnode run, not at a job:\n%s", out)
	}
	var hint []string
	for _, line := range strings.Split(out, "\n") {
		if _, cmd, ok := strings.Cut(line, "continue it with: "); ok {
			hint = strings.Fields(cmd)
		}
	}
	if len(hint) < 2 || hint[0] != "rlnode" || hint[1] != "submit" || !strings.Contains(strings.Join(hint, " "), "--address "+url+" --key-file "+key) {
		t.Fatalf("no hint to continue the stopped job through %s:\n%s", url, out)
	}
	hint = append(hint[1:], "--name", "again", "--no-wait")
	if out, errOut, code := runRlnode(t, laptop, hint...); code != 0 {
		t.Fatalf("rlnode %s, as printed: exit %d\n%s%s", strings.Join(hint, " "), code, out, errOut)
	}
	runRlnode(t, laptop, "job", "stop", "again", "--now", "--address", url, "--key-file", key)
	logs, errOut, _ := runRlnode(t, laptop, "job", "logs", "again", "--follow", "--address", url, "--key-file", key)
	if !strings.Contains(logs, "attempt 1 on node head") || !strings.Contains(logs, "--continue") {
		t.Errorf("the continued job's log:\n%s%s", logs, errOut)
	}
}

// An --address that names no node on this host, given without http://
// (a new user's slip from a host without a node), says how to reach a
// node on another host; rlnode stop, which cannot, says so.
func TestAddressWithoutHTTPSaysSo(t *testing.T) {
	home := t.TempDir()
	for _, args := range [][]string{
		{"job", "list", "--address", "127.0.0.1:1", "--key-file", "k"},
		{"submit", "quickstart", "--address", "127.0.0.1:1"},
		{"status", "--address", "127.0.0.1:1"},
	} {
		out, errOut, code := runRlnode(t, home, args...)
		if code == 0 || !strings.Contains(errOut, "--address http://HOST:PORT") || strings.Contains(errOut, "status and stop talk to a node on the same host") {
			t.Errorf("rlnode %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	out, errOut, code := runRlnode(t, home, "stop", "--address", "http://127.0.0.1:1")
	if code == 0 || !strings.Contains(errOut, "its own host") {
		t.Errorf("rlnode stop --address http://...: exit %d\n%s%s", code, out, errOut)
	}
}

// The commands submit and job print to run next carry the key file by an
// absolute path, quoted for the shell: they are copied into other
// terminals, in other folders.
func TestAddressFlagKeyFileWorksElsewhere(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if got, want := addressFlag("http://h:1", "copy.key"), " --address http://h:1 --key-file "+filepath.Join(dir, "copy.key"); got != want {
		t.Errorf("addressFlag with a relative key file: %q, want %q", got, want)
	}
	if got, want := addressFlag("http://h:1", "/keys/my key"), " --address http://h:1 --key-file '/keys/my key'"; got != want {
		t.Errorf("addressFlag with a space in the key file: %q, want %q", got, want)
	}
}

// What a submitter controls (a recipe's name and folder, a driver's last
// line) is printed with its control characters escaped: job lists show
// them in other users' terminals.
func TestJobListsEscapeControlCharacters(t *testing.T) {
	var b strings.Builder
	printJobs(&b, []jobs.Info{{Name: "j", Status: jobs.Failed, Recipe: "evil\x1b[2J", Out: "/runs/a\nb"}})
	out := b.String()
	if strings.ContainsAny(out, "\x1b") || !strings.Contains(out, `evil\x1b[2J`) || !strings.Contains(out, `/runs/a\nb`) {
		t.Errorf("job list:\n%q", out)
	}
	if got := printable("ünïcode\tx"); got != `ünïcode\tx` {
		t.Errorf("printable: %q", got)
	}
}

// job list says under the table what each PENDING job waits for, as
// README promises; it showed the status alone.
func TestJobListSaysWhatPendingJobsWaitFor(t *testing.T) {
	var b strings.Builder
	list := []jobs.Info{
		{Name: "run", Status: jobs.Running},
		{Name: "wait", Status: jobs.Pending, Cause: "waiting for room: no node can host {CPU:1}\x1b[2J"},
		{Name: "done", Status: jobs.Failed, Cause: "job failed"},
	}
	printJobs(&b, list)
	printPending(&b, list)
	out := b.String()
	if !strings.Contains(out, "\nwait PENDING: waiting for room: no node can host {CPU:1}\\x1b[2J\n") || strings.Contains(out, "job failed") {
		t.Errorf("job list:\n%s", out)
	}
}
