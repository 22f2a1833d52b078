package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// slurmTool finds a Slurm or munge program on PATH or in /usr/sbin.
func slurmTool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := filepath.Join("/usr/sbin", name); fileExists(p) {
		return p
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// killSlurmLeftovers SIGKILLs every process whose environment holds
// marker (this test's SLURM_CONF=…): slurmstepd and the job steps under it.
func killSlurmLeftovers(t *testing.T, marker string) {
	t.Helper()
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(b), "\x00"), marker) {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil && p.Signal(syscall.SIGKILL) == nil {
			t.Logf("killed pid %d, left over from a Slurm job", pid)
		}
	}
}

// daemon starts a foreground daemon and stops it (TERM, then KILL after
// 10s) when the test ends.
func daemon(t *testing.T, env []string, logFile string, path string, args ...string) {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = env
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
}

// TestSbatchUnderSlurm runs generated scripts under a real Slurm on this
// machine (Debian's slurm-wlm: munged, slurmctld and two slurmd started
// here with a configuration in a temporary directory; the two slurmd are
// Slurm nodes n1 and n2 on this host, on their own ports). It needs root
// (slurmd starts jobs as their user) and is skipped where Slurm is not
// installed.
func TestSbatchUnderSlurm(t *testing.T) {
	tools := map[string]string{}
	for _, name := range []string{"munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "scancel"} {
		if tools[name] = slurmTool(name); tools[name] == "" {
			t.Skipf("%s not installed (Debian: apt-get install slurm-wlm munge)", name)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: slurmd starts jobs as their owner")
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	dir, err := os.MkdirTemp("", "rlslurm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil { // munged wants its socket directory searchable
		t.Fatal(err)
	}
	for _, d := range []string{"state", "spool", "spool/n1", "spool/n2"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	for i := range key {
		key[i] = byte(i*7 + i/13)
	}
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o400); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "munge.sock")
	conf := filepath.Join(dir, "slurm.conf")
	// Slurm SIGKILLs a cancelled job's processes KillWait seconds after its
	// TERM: with the jobs' --stop-timeout (45 s for each of three stops)
	// that leaves a loaded host time to stop every node gracefully.
	cfg := fmt.Sprintf(`ClusterName=rlnodetest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=%[2]d
AuthType=auth/munge
AuthInfo=socket=%[4]s
CredType=cred/munge
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool/%%n
SlurmctldPidFile=%[5]s/slurmctld.pid
SlurmdPidFile=%[5]s/slurmd-%%n.pid
SlurmctldLogFile=%[5]s/slurmctld.log
SlurmdLogFile=%[5]s/slurmd-%%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
KillWait=150
MessageTimeout=60
NodeName=n1 NodeHostname=%[1]s NodeAddr=127.0.0.1 Port=%[3]d CPUs=%[6]d RealMemory=1000 State=UNKNOWN
NodeName=n2 NodeHostname=%[1]s NodeAddr=127.0.0.1 Port=%[7]d CPUs=%[6]d RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
`, host, freePort(t), freePort(t), sock, dir, runtime.NumCPU(), freePort(t))
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The jobs' TMPDIR (their nodes' RLNODE_HOME is under it) is this
	// test's, so that what a job leaves there is its own.
	tmpDir := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmpDir, 0o1777); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "SLURM_CONF="+conf, "TMPDIR="+tmpDir)
	// Job steps run under slurmstepd, which leaves slurmd: a step still
	// running when the test ends (a failed check, a job that outlived its
	// wait) would outlive the daemons. Cleanups run last-registered first,
	// so this one runs after the daemons have stopped.
	t.Cleanup(func() { killSlurmLeftovers(t, "SLURM_CONF="+conf) })
	daemon(t, env, filepath.Join(dir, "munged.out"), tools["munged"], "-F", "-f", "-S", sock,
		"--key-file="+filepath.Join(dir, "munge.key"), "--log-file="+filepath.Join(dir, "munged.log"),
		"--pid-file="+filepath.Join(dir, "munged.pid"), "--seed-file="+filepath.Join(dir, "munged.seed"))
	waitFor(t, 20*time.Second, "munged socket", func() bool { return fileExists(sock) })
	daemon(t, env, filepath.Join(dir, "slurmctld.out"), tools["slurmctld"], "-D", "-f", conf)
	daemon(t, env, filepath.Join(dir, "slurmd-n1.out"), tools["slurmd"], "-D", "-f", conf, "-N", "n1")
	daemon(t, env, filepath.Join(dir, "slurmd-n2.out"), tools["slurmd"], "-D", "-f", conf, "-N", "n2")
	// slurmIn runs a Slurm command in cwd (sbatch: the job's
	// SLURM_SUBMIT_DIR); slurm, in this process's folder.
	slurmIn := func(cwd, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, tools[name], args...)
		cmd.Env, cmd.Dir = env, cwd
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	slurm := func(name string, args ...string) (string, error) { return slurmIn("", name, args...) }
	waitFor(t, 120*time.Second, "Slurm nodes n1 and n2 to be idle", func() bool {
		out, err := slurm("sinfo", "-h", "-N", "-o", "%N %T")
		return err == nil && strings.Count(out, " idle") == 2
	})

	rl := rlnodeWrapper(t)
	home := t.TempDir()
	submit := func(nodes int, extra ...string) (id, runDir string) {
		t.Helper()
		runDir = filepath.Join(dir, fmt.Sprintf("run%d", time.Now().UnixNano()))
		args := append([]string{"sbatch", "quickstart", "--nodes", fmt.Sprint(nodes), "--gpus-per-node", "0",
			"--rlnode", rl, "--out", runDir, "--wait-timeout", "120s", "--stop-timeout", "45s"}, extra...)
		script, errOut, code := runRlnode(t, home, args...)
		if code != 0 {
			t.Fatalf("rlnode sbatch: exit %d: %s", code, errOut)
		}
		path := filepath.Join(dir, "job.sh")
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := slurm("sbatch", "--parsable", "--output="+filepath.Join(dir, "job-%j.out"), path)
		if err != nil {
			t.Fatalf("sbatch: %v: %s", err, out)
		}
		return strings.TrimSpace(out), runDir
	}
	finished := func(id string) (state, output string) {
		t.Helper()
		waitFor(t, 400*time.Second, "job "+id+" to finish", func() bool {
			out, err := slurm("squeue", "-h", "-j", id, "-o", "%T")
			return err == nil && strings.TrimSpace(out) == "" || strings.Contains(out, "Invalid job id")
		})
		info, _ := slurm("scontrol", "show", "job", id)
		b, _ := os.ReadFile(filepath.Join(dir, "job-"+id+".out"))
		t.Logf("job %s:\n%s", id, b)
		return info, string(b)
	}

	// Every node left the cluster gracefully: rlnode prints "leaving" on
	// a TERM and "stopped" when done.
	leftGracefully := func(runDir string, nodes ...string) {
		t.Helper()
		for _, n := range nodes {
			b, _ := os.ReadFile(filepath.Join(runDir, "node-"+n+".log"))
			if !strings.Contains(string(b), "stopped") {
				t.Errorf("node %s did not stop gracefully:\n%s", n, b)
			}
		}
	}

	// No node leaves its node-local RLNODE_HOME behind ($TMPDIR/rlnode-JOB-NODE:
	// the joining nodes' once stayed, empty).
	noNodeHomes := func(id string) {
		t.Helper()
		if left, _ := filepath.Glob(filepath.Join(tmpDir, "rlnode-"+id+"-*")); len(left) > 0 {
			t.Errorf("job %s left %v", id, left)
		}
	}

	// A smoke run: the job sees both nodes, and shuts down cleanly.
	id, runDir := submit(2, "--run-cmd", `"$RLNODE" status --json`)
	info, out := finished(id)
	noNodeHomes(id)
	if !strings.Contains(info, "JobState=COMPLETED") || !strings.Contains(info, "ExitCode=0:0") {
		t.Errorf("job %s: %s\n%s", id, info, out)
	}
	for _, want := range []string{"2 of 2 nodes up", `"slurm_node": "n1"`, `"slurm_node": "n2"`, "run finished with exit status 0", "all nodes stopped cleanly"} {
		if !strings.Contains(out, want) {
			t.Errorf("job output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, `"state": "ALIVE"`); n != 2 {
		t.Errorf("status in the job shows %d ALIVE entries, want 2:\n%s", n, out)
	}
	leftGracefully(runDir, "n1", "n2")

	// --serve: the allocation serves jobs submitted from outside it, through
	// the address file it writes in the submit folder; scancel stops every
	// node and removes the file.
	serveDir := filepath.Join(dir, "serve")
	if err := os.Mkdir(serveDir, 0o755); err != nil {
		t.Fatal(err)
	}
	runDir = filepath.Join(dir, "serve-cluster")
	script, errOut, code := runRlnode(t, home, "sbatch", "--serve", "--nodes", "2", "--gpus-per-node", "0", "--rlnode", rl, "--out", runDir,
		"--control-port", fmt.Sprint(freePort(t)), "--wait-timeout", "120s", "--stop-timeout", "45s")
	if code != 0 {
		t.Fatalf("rlnode sbatch --serve: exit %d: %s", code, errOut)
	}
	if err := os.WriteFile(filepath.Join(serveDir, "serve.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err = slurmIn(serveDir, "sbatch", "--parsable", "--output="+filepath.Join(dir, "job-%j.out"), "serve.sh")
	if err != nil {
		t.Fatalf("sbatch: %v: %s", err, out)
	}
	id = strings.TrimSpace(out)
	addrFile := filepath.Join(serveDir, "rlnode-"+id+".address")
	waitFor(t, 180*time.Second, "job "+id+"'s address file", func() bool {
		if st, _ := slurm("squeue", "-h", "-j", id, "-o", "%T"); strings.TrimSpace(st) == "" {
			b, _ := os.ReadFile(filepath.Join(dir, "job-"+id+".out"))
			t.Fatalf("job %s ended before serving:\n%s\n%s", id, b, nodeLogs(runDir))
		}
		return fileExists(addrFile)
	})
	url, keyFile := serveAddress(t, addrFile)
	// From outside the allocation (no node, a home of its own): without
	// --out the run goes to runs/ in the job's working folder.
	login := t.TempDir()
	subOut, subErr, code := runRlnode(t, login, "submit", "quickstart", "--address", url, "--key-file", keyFile, "--name", "served",
		"--set", "sft.steps=2", "--set", "schedule.steps=2")
	if code != 0 || !strings.Contains(subOut, "done: 4 steps") {
		b, _ := os.ReadFile(filepath.Join(dir, "job-"+id+".out"))
		t.Errorf("rlnode submit through %s: exit %d\n%s\n%s\njob output:\n%s", url, code, subOut, subErr, b)
	}
	if st, _, _ := runRlnode(t, login, "job", "status", "served", "--json", "--address", url, "--key-file", keyFile); !strings.Contains(st, `"status": "SUCCEEDED"`) {
		t.Errorf("job served: %s", st)
	}
	if cps, _ := filepath.Glob(filepath.Join(serveDir, "runs", "quickstart-*", "checkpoints", "step-4")); len(cps) != 1 {
		t.Errorf("no final checkpoint under %s/runs: %v", serveDir, cps)
	}
	// A long run is training when the allocation is told to end as at its
	// time limit (a TERM to the batch shell alone): the run stops after its
	// step, which it checkpoints, then the nodes stop.
	longDir := filepath.Join(serveDir, "runs", "long")
	if _, errOut, code := runRlnode(t, login, "submit", "quickstart", "--address", url, "--key-file", keyFile, "--name", "long",
		"--out", longDir, "--set", "sft.steps=1", "--set", "schedule.steps=100000", "--no-wait"); code != 0 {
		t.Fatalf("submit long: exit %d: %s", code, errOut)
	}
	waitFor(t, 180*time.Second, "the long job's first RL step", func() bool {
		b, _ := os.ReadFile(filepath.Join(longDir, "job.log"))
		return strings.Contains(string(b), "(RL 1/")
	})
	if out, err := slurm("scancel", "--batch", "--signal=TERM", id); err != nil {
		t.Fatalf("scancel: %v: %s", err, out)
	}
	info, out = finished(id)
	if !strings.Contains(info, "JobState=COMPLETED") || !strings.Contains(out, "job long: asked to stop") || !strings.Contains(out, "all nodes stopped cleanly") {
		t.Errorf("served job %s did not stop in order: %s\n%s\n%s", id, info, out, nodeLogs(runDir))
	}
	jl, _ := os.ReadFile(filepath.Join(longDir, "job.log"))
	stoppedCheckpointed(t, string(jl))
	servedEnded := func(id, addrFile, runDir string) {
		t.Helper()
		if fileExists(addrFile) {
			t.Errorf("the address file %s outlived job %s", addrFile, id)
		}
		if pids := procsNaming(runDir); len(pids) > 0 {
			t.Errorf("processes of job %s left running: %v", id, pids)
		}
		noNodeHomes(id)
		leftGracefully(runDir, "n1", "n2")
	}
	servedEnded(id, addrFile, runDir)

	// A plain scancel (every process of the job signalled at once) stops
	// a serving allocation too.
	out, err = slurmIn(serveDir, "sbatch", "--parsable", "--output="+filepath.Join(dir, "job-%j.out"), "serve.sh")
	if err != nil {
		t.Fatalf("sbatch: %v: %s", err, out)
	}
	id = strings.TrimSpace(out)
	addrFile = filepath.Join(serveDir, "rlnode-"+id+".address")
	waitFor(t, 180*time.Second, "job "+id+"'s address file", func() bool { return fileExists(addrFile) })
	if out, err := slurm("scancel", id); err != nil {
		t.Fatalf("scancel: %v: %s", err, out)
	}
	info, out = finished(id)
	if !strings.Contains(info, "JobState=CANCELLED") || !strings.Contains(out, "all nodes stopped cleanly") {
		t.Errorf("served job %s did not stop cleanly: %s\n%s\n%s", id, info, out, nodeLogs(runDir))
	}
	servedEnded(id, addrFile, runDir)

	// scancel mid-run: the trap stops the node cleanly.
	id, runDir = submit(2, "--run-cmd", `sleep 300`)
	waitFor(t, 180*time.Second, "job "+id+" to run its command", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "job-"+id+".out"))
		return strings.Contains(string(b), "running: sleep 300")
	})
	if out, err := slurm("scancel", id); err != nil {
		t.Fatalf("scancel: %v: %s", err, out)
	}
	info, out = finished(id)
	if !strings.Contains(info, "JobState=CANCELLED") {
		t.Errorf("job %s: %s", id, info)
	}
	if !strings.Contains(out, "all nodes stopped cleanly") {
		t.Errorf("cancelled job did not stop cleanly:\n%s\n%s", out, nodeLogs(runDir))
	}
	noNodeHomes(id)
	leftGracefully(runDir, "n1", "n2")

	// The default path: the generated script runs a short real recipe to
	// completion on one node and on two, and stops every node.
	for _, nodes := range []int{1, 2} {
		id, runDir := submit(nodes, "--set", "sft.steps=2", "--set", "schedule.steps=2", "--set", "schedule.eval_every=1",
			"--set", "schedule.checkpoint_every=4", "--set", "eval.held_out=8", "--set", "algorithm.batch_prompts=4")
		info, out := finished(id)
		if !strings.Contains(info, "JobState=COMPLETED") || !strings.Contains(info, "ExitCode=0:0") {
			t.Errorf("%d nodes: job %s: %s\n%s\n%s", nodes, id, info, out, nodeLogs(runDir))
		}
		for _, want := range []string{fmt.Sprintf("%d of %d nodes up", nodes, nodes), "done: 4 steps", "run finished with exit status 0", "all nodes stopped cleanly"} {
			if !strings.Contains(out, want) {
				t.Errorf("%d nodes: job output lacks %q:\n%s", nodes, want, out)
			}
		}
		if _, err := os.Stat(filepath.Join(runDir, "run", "checkpoints", "step-4")); err != nil {
			t.Errorf("%d nodes: no final checkpoint: %v", nodes, err)
		}
		// The driver offers nothing (the first node offers its host
		// already), so the learner and the rollout actor are on the
		// job's nodes. The driver offered the host a second time, and
		// took the learner in two of three runs.
		var slurmNodes []string
		for _, n := range []string{"n1", "n2"}[:nodes] {
			b, _ := os.ReadFile(filepath.Join(runDir, "node-"+n+".log"))
			if m := regexp.MustCompile(`(?m)^node (\S+) is up$`).FindSubmatch(b); m != nil {
				slurmNodes = append(slurmNodes, string(m[1]))
			}
		}
		if !strings.Contains(out, "offering nothing (--driver-only)") {
			t.Errorf("%d nodes: the driver did not join as --driver-only:\n%s", nodes, out)
		}
		for _, what := range []string{`msg="learner placed"`, `msg="rollout actors placed"`} {
			line := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, what) {
					line = l
				}
			}
			if !slices.ContainsFunc(slurmNodes, func(id string) bool { return strings.Contains(line, "node "+id) }) {
				t.Errorf("%d nodes: %s: %q names none of the job's nodes %v", nodes, what, line, slurmNodes)
			}
		}
		leftGracefully(runDir, []string{"n1", "n2"}[:nodes]...)
	}

	// --cpus-per-task: each node offers the CPUs Slurm gave it.
	id, _ = submit(2, "--cpus-per-task", "1", "--run-cmd", `"$RLNODE" status --json | tr -d ' \n'`)
	info, out = finished(id)
	if !strings.Contains(info, "JobState=COMPLETED") || strings.Count(out, `"total":{"CPU":1`) != 2 {
		t.Errorf("--cpus-per-task 1: want both nodes offering 1 CPU: %s\n%s", info, out)
	}

	// A binary the nodes cannot see: the job says so and starts nothing.
	id, _ = submit(1, "--rlnode", filepath.Join(dir, "not-here", "rlnode"), "--run-cmd", "true")
	info, out = finished(id)
	if !strings.Contains(info, "ExitCode=127:0") || !strings.Contains(out, "is not an executable file on") {
		t.Errorf("job with a missing binary: %s\n%s", info, out)
	}
}

// procsNaming is the processes whose command line holds s, with it.
func procsNaming(s string) []string {
	var found []string
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			found = append(found, d.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("gave up waiting %v for %s", limit, what)
}
