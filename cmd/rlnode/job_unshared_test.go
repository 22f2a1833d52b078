package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/jobs"
	"github.com/rlnode/rlnode/train"
)

// startBlindNode starts an rlnode node with args in a mount namespace of
// its own where hidden is an empty tmpfs: a host that shares no
// filesystem with the others there (root only; skipped elsewhere).
func startBlindNode(t *testing.T, home, hidden string, args ...string) *runningNode {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skipf("a node that does not see a folder needs unshare and root (%v, uid %d)", err, os.Geteuid())
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(unshare, append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o size=64m rlnode-test "$0" && exec "$@"`, hidden, exe}, args...)...)
	cmd.Env = append(os.Environ(), "RLNODE_CLI_MAIN=1", "RLNODE_HOME="+home)
	n := startNodeCmd(t, cmd, args)
	marker := filepath.Join(hidden, "seen-by-all")
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the marker %s: %v", marker, err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", n.cmd.Process.Pid, marker)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the node that should not see %s sees it (%v)", hidden, err)
	}
	return n
}

// TestJobTakeoverWithoutItsRunFolder: a job whose node is lost, taken
// over by a node on a host that does not see its run folder (no shared
// filesystem), fails at once, naming the node, the folder and the
// command that continues it, rather than starting the run over in an
// empty folder of the same name on that host, as it did before (its
// driver ran with --continue, found no checkpoint and began at step 0).
// The run folder, on the lost node's host, keeps what the run wrote.
// That command is refused by the node that does not see the folder, and,
// run once a node that sees it is back, continues the run there from its
// newest checkpoint.
func TestJobTakeoverWithoutItsRunFolder(t *testing.T) {
	home, parent := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(parent, "seen-by-all"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "job")
	// The job's driver runs on "host", where none of the run's actors fit
	// (0.1 CPU): its learner runs on "blind", which does not see the run
	// folder (its checkpoints come back to the driver over the cluster).
	host := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "host", "--cpus", "0.1")
	blind := startBlindNode(t, home, parent, "join", host.gossip, "--bind", "127.0.0.1:0", "--node-id", "blind", "--cpus", "4")
	dumpOnFailure(t, host, blind)
	const rlSteps = 60 // many more than the kill's step 4
	out, errOut, code := runRlnode(t, home, append([]string{"submit", "quickstart", "--no-wait", "--name", "orphan", "--node", "host",
		"--out", dir, "--address", blind.gossip}, deterministicRun(rlSteps)...)...)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s%s", code, out, errOut)
	}
	waitUntil(t, 2*time.Minute, "checkpoint step-4", func() bool {
		_, err := os.Stat(filepath.Join(dir, "checkpoints", "step-4", train.DriverStateFile))
		return err == nil
	})
	if err := host.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-host.done
	var in jobs.Info
	waitUntil(t, 2*time.Minute, "the job to end", func() bool {
		in = jobInfo(t, home, blind.gossip, "orphan")
		return in.Status == jobs.Failed || in.Status == jobs.Succeeded
	})
	t.Logf("job orphan: %s: %s", in.Status, in.Cause)
	for _, want := range []string{"node blind", "cannot take it over", "does not see its run folder " + dir,
		"rlnode submit " + filepath.Join(dir, jobs.RecipeFile) + " --resume --out " + dir} {
		if !strings.Contains(in.Cause, want) {
			t.Errorf("the job's cause lacks %q", want)
		}
	}
	if in.Status != jobs.Failed {
		t.Errorf("job status %s, want %s", in.Status, jobs.Failed)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", blind.cmd.Process.Pid, dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the node that refused the job made a run folder of its own (%v)", err)
	}
	logged := string(readFileAt(t, filepath.Join(dir, jobs.LogFile)))
	if !strings.Contains(logged, "attempt 1 on node host") || strings.Contains(logged, "attempt 2") {
		t.Errorf("the run folder's job log:\n%s", logged)
	}

	// That command, sent to the node that does not see the folder, is
	// refused there, naming it.
	out, errOut, code = runRlnode(t, home, "submit", filepath.Join(dir, jobs.RecipeFile), "--resume", "--out", dir, "--name", "blindly",
		"--node", "blind", "--address", blind.gossip)
	t.Logf("submit --resume to blind: exit %d: %s", code, errOut)
	if code == 0 || !strings.Contains(errOut, "node blind") || !strings.Contains(errOut, "cannot continue its run") ||
		!strings.Contains(errOut, "does not see the run folder "+dir+" that --resume names") {
		t.Errorf("submit --resume to a node that does not see the folder: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", blind.cmd.Process.Pid, dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the node that refused the resumed job made a run folder of its own (%v)", err)
	}

	// A node that sees the folder comes back: the command the cause
	// names continues the run there.
	back := startRlnode(t, home, "join", blind.gossip, "--bind", "127.0.0.1:0", "--node-id", "back", "--cpus", "4")
	dumpOnFailure(t, back)
	out, errOut, code = runRlnode(t, home, "submit", filepath.Join(dir, jobs.RecipeFile), "--resume", "--out", dir, "--name", "again",
		"--address", back.gossip)
	t.Logf("submit --resume: exit %d\n%s%s", code, out, errOut)
	if code != 0 || !strings.Contains(out, "resuming from "+filepath.Join(dir, "checkpoints", "step-")) || !strings.Contains(out, "job again SUCCEEDED") {
		t.Errorf("the run continued as the cause says: exit %d", code)
	}
	if in := jobInfo(t, home, back.gossip, "again"); in.Node != "back" {
		t.Errorf("the job continuing the run ran on %s, want back: %+v", in.Node, in)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoints", fmt.Sprintf("step-%d", 2+rlSteps), train.DriverStateFile)); err != nil {
		t.Errorf("the continued run's last checkpoint: %v", err)
	}
}
