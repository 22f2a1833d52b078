package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/train"
)

// The generated scripts' text is pinned by golden files (regenerate with
// go test ./cmd/rlnode -run TestSbatchGolden -update) and must parse as
// bash. The first case's script is pinned whole; the others share most of
// it, so each is pinned as its line diff from the first (NAME.diff).
func TestSbatchGolden(t *testing.T) {
	home := t.TempDir()
	cases := []struct {
		name string
		args []string
	}{
		{"quickstart_cpu", []string{"quickstart", "--nodes", "2", "--gpus-per-node", "0", "--rlnode", "/opt/rlnode/bin/rlnode"}},
		{"mlmt_gpu", []string{"mlmt_math", "--nodes", "4", "--gpus-per-node", "8", "--partition", "gpu", "--time", "2-00:00:00",
			"--account", "rl", "--out", "/shared/runs/mlmt", "--set", "algorithm.lr=1e-5", "--set", "placement.rollout.gpus=1",
			"--rlnode", "/opt/rlnode/bin/rlnode", "--port", "7946"}},
		{"quickstart_cpus_mem", []string{"quickstart", "--nodes", "2", "--gpus-per-node", "0", "--rlnode", "/opt/rlnode/bin/rlnode",
			"--cpus-per-task", "16", "--mem", "64G", "--exclusive"}},
		{"smoke_single", []string{"quickstart", "--nodes", "1", "--gpus-per-node", "0", "--rlnode", "/opt/rlnode/bin/rlnode",
			"--run-cmd", `"$RLNODE" status --json`, "--wait-timeout", "60s", "--stop-timeout", "10s"}},
		{"quickstart_lan", []string{"quickstart", "--nodes", "2", "--gpus-per-node", "0", "--rlnode", "/opt/rlnode/bin/rlnode", "--detection", "lan"}},
		{"serve", []string{"--serve", "--nodes", "2", "--gpus-per-node", "0", "--rlnode", "/opt/rlnode/bin/rlnode"}},
		{"serve_gpu", []string{"--serve", "--nodes", "4", "--gpus-per-node", "8", "--partition", "gpu", "--time", "1-00:00:00",
			"--rlnode", "/opt/rlnode/bin/rlnode", "--control-port", "0", "--address-file", "/shared/rl/addr-%j", "--out", "/shared/rl/cluster"}},
	}
	var base string
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runRlnode(t, home, append([]string{"sbatch"}, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			bashSyntax(t, out)
			golden, pinned := filepath.Join("testdata", "sbatch", c.name+".sh"), out
			if i == 0 {
				base = out
			} else {
				if base == "" {
					t.Fatalf("no %s script to compare with", cases[0].name)
				}
				golden, pinned = filepath.Join("testdata", "sbatch", c.name+".diff"), lineDiff(base, out)
			}
			if *updateGolden {
				if err := os.WriteFile(golden, []byte(pinned), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if pinned != string(want) {
				t.Errorf("script differs from %s (rerun with -update and review the diff):\n%s", golden, pinned)
			}
		})
	}
}

// lineDiff is b's lines against a's: a hunk per run of changes, headed by
// the line of a where it starts ("@@ 12"), with a's lines as "-" and b's
// as "+" (a longest-common-subsequence diff; the scripts are short).
func lineDiff(a, b string) string {
	x, y := strings.SplitAfter(a, "\n"), strings.SplitAfter(b, "\n")
	// lcs[i][j] is the longest common subsequence of x[i:] and y[j:].
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var sb strings.Builder
	inHunk := false
	for i, j := 0, 0; i < len(x) || j < len(y); {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			i, j, inHunk = i+1, j+1, false
			continue
		case !inHunk:
			fmt.Fprintf(&sb, "@@ %d\n", i+1)
			inHunk = true
		}
		if j == len(y) || i < len(x) && lcs[i+1][j] >= lcs[i][j+1] {
			sb.WriteString("-" + strings.TrimSuffix(x[i], "\n") + "\n")
			i++
		} else {
			sb.WriteString("+" + strings.TrimSuffix(y[j], "\n") + "\n")
			j++
		}
	}
	return sb.String()
}

func bashSyntax(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("bash", "-n")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v\n%s", err, out)
	}
}

func TestSbatchRefuses(t *testing.T) {
	home := t.TempDir()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("models: {policy: {init: {}}}\ndata: {task: {}}\nalgorithm: {lr: -1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{bad, "--nodes", "2", "--gpus-per-node", "1"}, 1, bad + ":3: algorithm.lr: -1: want a positive learning rate"},
		{[]string{"quickstart", "--nodes", "-1", "--gpus-per-node", "1"}, 2, "--nodes -1: want at least 1"},
		{[]string{"quickstart", "--gpus-per-node", "1"}, 2, "--nodes is required (at least 1)"},
		{[]string{"quickstart", "--nodes", "2"}, 2, "--gpus-per-node is required"},
		{[]string{"quickstart", "--nodes", "2", "--gpus-per-node", "1", "--time", "soon"}, 2, `--time "soon"`},
		{[]string{"quickstart", "--nodes", "2", "--gpus-per-node", "1", "--partition", "a b"}, 2, "--partition"},
		{[]string{"quickstart", "--nodes", "1", "--gpus-per-node", "1", "--set", "placement.learner.gpus=2"}, 2, "reserve 2 GPUs"},
		{[]string{"quickstart", "--nodes", "2", "--gpus-per-node", "1", "--set", "placement.learner_shards=2", "--set", "placement.learner.gpus=2"}, 2, "reserve 4 GPUs"},
		// MLMT's feedback policy has a learner of its own (README's
		// mlmt_math example needs 2 GPUs; 1 node × 1 GPU was accepted).
		{[]string{"mlmt_math", "--nodes", "1", "--gpus-per-node", "1", "--set", "placement.learner.gpus=1"}, 2, "reserve 2 GPUs (2 rollout actors × 0 + 2 learners × 1 shards × 1)"},
		{[]string{"mlmt_math", "--nodes", "2", "--gpus-per-node", "1", "--set", "placement.learner_shards=2", "--set", "placement.learner.gpus=1"}, 2, "reserve 4 GPUs"},
		{[]string{"--nodes", "2", "--gpus-per-node", "1"}, 2, "want one recipe"},
		{[]string{"quickstart", "--nodes", "1", "--gpus-per-node", "0", "--cpus-per-task", "-1"}, 2, "--cpus-per-task -1"},
		{[]string{"quickstart", "--nodes", "1", "--gpus-per-node", "0", "--mem", "lots"}, 2, `--mem "lots"`},
		{[]string{"quickstart", "--nodes", "2", "--gpus-per-node", "0", "--detection", "slow"}, 2, `--detection: failure detection "slow": want fast or lan`},
		{[]string{"nonesuch", "--nodes", "2", "--gpus-per-node", "1"}, 1, "no built-in recipe by that name"},
		// --serve runs no recipe: what only a recipe's run uses is refused.
		{[]string{"--serve", "quickstart", "--nodes", "2", "--gpus-per-node", "0"}, 2, `--serve takes no recipe (got "quickstart")`},
		{[]string{"--serve", "--nodes", "2", "--gpus-per-node", "0", "--run-cmd", "true"}, 2, "--serve and --run-cmd: pick one"},
		{[]string{"--serve", "--nodes", "2", "--gpus-per-node", "0", "--set", "seed=1"}, 2, "--set with --serve: there is no recipe to override"},
		{[]string{"--serve", "--gpus-per-node", "0"}, 2, "--nodes is required"},
		{[]string{"--serve", "--nodes", "2"}, 2, "--gpus-per-node is required"},
		{[]string{"--serve", "--nodes", "2", "--gpus-per-node", "0", "--control-port", "70000"}, 2, "--control-port 70000: want 0..65535"},
		{[]string{"--serve", "--nodes", "2", "--gpus-per-node", "0", "--control-port", "7946", "--port", "7946"}, 2, "--control-port 7946 and --port 7946"},
		{[]string{"--serve", "--nodes", "2", "--gpus-per-node", "0", "--address-file", "a\nb"}, 2, `\nb": no line breaks`},
		{[]string{"--serve", "--nodes", "1", "--gpus-per-node", "0", "--time", "2:00"}, 2, "in 2m0s: raise --time"},
		{[]string{"quickstart", "--nodes", "2", "--gpus-per-node", "0", "--control-port", "8266"}, 2, "--control-port: only with --serve"},
		{[]string{"quickstart", "--nodes", "2", "--gpus-per-node", "0", "--address-file", "a"}, 2, "--address-file: only with --serve"},
		{[]string{"--nodes", "2", "--gpus-per-node", "0"}, 2, "or --serve, to serve jobs"},
		// The TERM before the time limit (3 × --stop-timeout + 15 s, Slurm
		// may send it 60 s early) must leave time to run, and fit --signal.
		{[]string{"quickstart", "--nodes", "1", "--gpus-per-node", "0", "--time", "1"}, 2, "--time 1: the job is told to stop 3 × --stop-timeout (30s) + 15 s = 105 s before its end"},
		{[]string{"quickstart", "--nodes", "1", "--gpus-per-node", "0", "--time", "2:30"}, 2, "in 2m30s: raise --time"},
		{[]string{"quickstart", "--nodes", "1", "--gpus-per-node", "0", "--time", "0-0:02"}, 2, "in 2m0s: raise --time"},
		{[]string{"quickstart", "--nodes", "1", "--gpus-per-node", "0", "--time", "1-0", "--stop-timeout", "8h"}, 2, "86415 s before its end, over the 65535 s"},
	}
	for _, c := range cases {
		out, errOut, code := runRlnode(t, home, append([]string{"sbatch"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("sbatch %v: exit %d (want %d), stdout %d bytes, stderr:\n%s\nwant it to contain %q", c.args, code, c.code, len(out), errOut, c.want)
		}
	}
}

// A recipe file's name and --set values with line breaks, quotes and shell
// characters run nothing when the script runs: they stay inside the header's
// comments (which all come before the first command, so Slurm reads every
// #SBATCH line) and inside quotes.
func TestSbatchOddNamesRunNothing(t *testing.T) {
	home := t.TempDir()
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned") // the script runs in dir: "touch pwned" makes it
	odd := filepath.Join(dir, "a\ntouch pwned\n$(touch pwned) 'q\".yaml")
	if err := os.WriteFile(odd, []byte("models: {policy: {init: {}}}\ndata: {task: {kinds: [word]}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := [][]string{
		{odd, "--set", "description=x\n  touch pwned"},
		{"quickstart", "--set", "description=x\n  touch pwned `touch pwned` $(touch pwned)"},
	}
	for _, args := range runs {
		script, errOut, code := runRlnode(t, home, append(append([]string{"sbatch"}, args...),
			"--nodes", "2", "--gpus-per-node", "0", "--out", filepath.Join(dir, "out $(touch pwned)"), "--rlnode", "/opt/rl node")...)
		if code != 0 {
			t.Fatalf("sbatch %q: exit %d: %s", args, code, errOut)
		}
		header, _, ok := strings.Cut(script, "\nset -uo pipefail\n")
		if !ok {
			t.Fatalf("no 'set -uo pipefail' line:\n%s", script)
		}
		for i, line := range strings.Split(header, "\n") {
			if !strings.HasPrefix(line, "#") {
				t.Errorf("sbatch %q: header line %d is a command, not a comment: %q", args, i+1, line)
			}
		}
		// Outside a job the script stops at its first check; nothing before
		// it may have run.
		path := filepath.Join(dir, "job.sh")
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", path)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "not inside a Slurm job") {
			t.Errorf("sbatch %q: the script outside a job: %v\n%s", args, err, out)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("sbatch %q: the script ran a command from the recipe's name or a --set value:\n%s", args, script)
		}
	}
}

// GPUs asked for a recipe whose actors reserve none: the script is written,
// with a warning.
func TestSbatchWarnsUnusedGPUs(t *testing.T) {
	home := t.TempDir()
	for _, c := range []struct {
		gpus string
		warn bool
	}{{"4", true}, {"0", false}} {
		out, errOut, code := runRlnode(t, home, "sbatch", "quickstart", "--nodes", "1", "--gpus-per-node", c.gpus, "--rlnode", "/opt/rlnode")
		if code != 0 || !strings.HasPrefix(out, "#!/bin/bash") {
			t.Fatalf("--gpus-per-node %s: exit %d, stderr %s", c.gpus, code, errOut)
		}
		if got := strings.Contains(errOut, "warning: --gpus-per-node "+c.gpus+": the recipe's actors reserve no GPUs"); got != c.warn {
			t.Errorf("--gpus-per-node %s: warned %v, want %v; stderr:\n%s", c.gpus, got, c.warn, errOut)
		}
	}
}

// fakeSlurm puts scontrol and srun on PATH that make one machine look like
// an allocation of nodes fake1..fakeN: srun starts each task as a local
// process with its own SLURMD_NODENAME and passes TERM on, as srun does.
func fakeSlurm(t *testing.T, nodes int) string {
	t.Helper()
	dir := t.TempDir()
	scontrol := `#!/bin/bash
case "$1 $2" in
"show hostnames") for i in $(seq 1 ` + itoa(nodes) + `); do echo fake$i; done ;;
"show node") echo "NodeName=$3 Arch=x86_64 CoresPerSocket=1"; echo "   NodeAddr=127.0.0.1 NodeHostName=$3" ;;
*) echo "fake scontrol: $*" >&2; exit 1 ;;
esac
`
	srun := `#!/bin/bash
n=1
while [ $# -gt 0 ]; do
  case "$1" in --ntasks=*) n=${1#--ntasks=} ;; --*) ;; *) break ;; esac
  shift
done
pids=()
for i in $(seq 1 "$n"); do
  node=fake$((i + 1))
  extra=FAKE_ENV_$node  # per-node environment, as Slurm sets GPU variables per step
  env -u SLURM_GPUS_ON_NODE -u CUDA_VISIBLE_DEVICES SLURMD_NODENAME=$node SLURM_PROCID=$((i - 1)) ${!extra:-} "$@" &
  pids+=($!)
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
while [ -n "$(jobs -r)" ]; do wait; done
`
	// No step list: the script falls back to signalling srun, which passes
	// TERM on (the real-Slurm test covers scancel --signal).
	squeue := "#!/bin/sh\nexit 0\n"
	scancel := "#!/bin/sh\necho fake scancel: no job >&2\nexit 1\n"
	for name, body := range map[string]string{"scontrol": scontrol, "srun": srun, "squeue": squeue, "scancel": scancel} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// rlnodeWrapper is an executable named rlnode that runs this test binary
// as rlnode, for scripts that call "$RLNODE".
func rlnodeWrapper(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "rlnode")
	body := "#!/bin/sh\nRLNODE_CLI_MAIN=1 exec " + shellQuote(exe) + " \"$@\"\n"
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The generated script, run as a 3-node job on this machine (fake scontrol
// and srun, real rlnode processes on 127.0.0.1): three nodes come up with
// the GPUs Slurm's variables give them, the run command sees all three,
// and everything stops cleanly. The nodes run with --detection lan, which
// the script passes to start and join.
func TestSbatchScriptRunsThreeNodes(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2) to find the node address")
	}
	home := t.TempDir()
	rl := rlnodeWrapper(t)
	runDir := filepath.Join(t.TempDir(), "run")
	// A recipe file: the script carries it resolved, and the job checks it.
	recipe := filepath.Join(t.TempDir(), "tiny.yaml")
	if err := os.WriteFile(recipe, []byte("models: {policy: {init: {}}}\ndata: {task: {kinds: [word]}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script, errOut, code := runRlnode(t, home, "sbatch", recipe, "--set", "schedule.steps=7", "--nodes", "3", "--gpus-per-node", "4",
		"--rlnode", rl, "--out", runDir, "--wait-timeout", "60s", "--stop-timeout", "20s", "--detection", "lan",
		"--run-cmd", `"$RLNODE" recipe validate "$RLNODE_OUT/recipe.yaml" && "$RLNODE" status --json > "$RLNODE_OUT/status.json"`)
	if code != 0 {
		t.Fatalf("sbatch: exit %d: %s", code, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-s")
	cmd.Stdin = strings.NewReader(script)
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+fakeSlurm(t, 3)+":"+os.Getenv("PATH"), "SLURM_JOB_ID=4242",
		"SLURM_JOB_NODELIST=fake[1-3]", "SLURMD_NODENAME=fake1", "TMPDIR="+tmp, "SLURM_SUBMIT_DIR="+tmp,
		"SLURM_GPUS_ON_NODE=2", "CUDA_VISIBLE_DEVICES=0,1", // first node: Slurm's count
		"FAKE_ENV_fake2=CUDA_VISIBLE_DEVICES=1,3,5",      // CUDA_VISIBLE_DEVICES only
		"FAKE_ENV_fake3=CUDA_VISIBLE_DEVICES=NoDevFiles") // Slurm's "none"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	log := out.String()
	if err != nil {
		t.Fatalf("job failed: %v\n%s\n%s", err, log, nodeLogs(runDir))
	}
	for _, want := range []string{"3 of 3 nodes up", "recipe.yaml: ok (tiny, grpo, single episodes, 7 steps)", "run finished with exit status 0", "all nodes stopped cleanly"} {
		if !strings.Contains(log, want) {
			t.Errorf("job output lacks %q:\n%s", want, log)
		}
	}
	var st struct {
		Nodes []struct {
			State  string             `json:"state"`
			Labels map[string]string  `json:"labels"`
			Total  map[string]float64 `json:"total"`
		} `json:"nodes"`
	}
	b, err := os.ReadFile(filepath.Join(runDir, "status.json"))
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("status.json: %v\n%s", err, b)
	}
	gpus := map[string]float64{}
	for _, n := range st.Nodes {
		if n.State == "ALIVE" {
			gpus[n.Labels["slurm_node"]] = n.Total["GPU"]
		}
	}
	if want := map[string]float64{"fake1": 2, "fake2": 3, "fake3": 0}; !reflect.DeepEqual(gpus, want) {
		t.Errorf("the run command saw nodes with GPUs %v, want %v", gpus, want)
	}
	// Every node left: "node ... stopped" in each node's log.
	for _, n := range []string{"fake1", "fake2", "fake3"} {
		b, _ := os.ReadFile(filepath.Join(runDir, "node-"+n+".log"))
		if !strings.Contains(string(b), "stopped") {
			t.Errorf("node %s did not stop gracefully:\n%s", n, b)
		}
	}
	// Each node's RLNODE_HOME ($TMPDIR/rlnode-JOB-NODE) is gone, on the
	// joining nodes as on the first: the joining nodes' once stayed, empty
	// folders on every node's /tmp after every job. ($TMPDIR/rlnode-UID,
	// the user's folder for same-host sockets, is shared by every node and
	// job of the user on a host, like /tmp/tmux-UID, and stays.)
	var left []string
	_ = filepath.WalkDir(tmp, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != tmp && p != filepath.Join(tmp, fmt.Sprintf("rlnode-%d", os.Geteuid())) {
			left = append(left, strings.TrimPrefix(p, tmp+"/"))
		}
		return err
	})
	if len(left) > 0 {
		t.Errorf("left in $TMPDIR after the job: %v", left)
	}
}

func nodeLogs(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "node-*.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		b.WriteString("== " + f + "\n" + string(data))
	}
	return b.String()
}

// A recipe that puts the learner and the engine on GPUs is written into a
// batch script and validated on a host without them (a Slurm login node),
// while a run in this process refuses it at the recipe's field with the
// CUDA backend's reason.
func TestGPURecipeOffTheGPUHost(t *testing.T) {
	if cuda.Available().Err() == nil {
		t.Skip("the CUDA backend can run here")
	}
	home := t.TempDir()
	sets := []string{"--set", "placement.learner_device=cuda", "--set", "engines.policy.device=cuda-bf16"}
	out, errOut, code := runRlnode(t, home, append([]string{"sbatch", "quickstart", "--nodes", "2", "--gpus-per-node", "1"}, sets...)...)
	if code != 0 || !strings.Contains(out, "learner_device=cuda") {
		t.Errorf("sbatch: exit %d, stderr %s\nscript:\n%s", code, errOut, out)
	}
	if _, errOut, code := runRlnode(t, home, append([]string{"recipe", "validate", "quickstart"}, sets...)...); code != 0 {
		t.Errorf("recipe validate: exit %d: %s", code, errOut)
	}
	_, errOut, code = runRlnode(t, home, append([]string{"run", "quickstart", "--out", filepath.Join(home, "run")}, sets...)...)
	for _, want := range []string{"placement.learner_device: cuda: the CUDA backend cannot run here", "engines.policy.device: cuda-bf16: the CUDA backend cannot run here"} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("run: exit %d, stderr %s; want exit 1 and %q", code, errOut, want)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "run")); err == nil {
		t.Error("the refused run made its directory")
	}
}

func TestSlurmSeconds(t *testing.T) {
	for v, want := range map[string]int{"5": 300, "5:30": 330, "1:02:03": 3723, "2-3": 2*86400 + 3*3600,
		"2-3:04": 2*86400 + 3*3600 + 240, "2-3:04:05": 2*86400 + 3*3600 + 245, "": -1, "infinite": -1, "UNLIMITED": -1} {
		got, ok := slurmSeconds(v)
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("slurmSeconds(%q) = %d, want %d", v, got, want)
		}
	}
}

// A --serve script as a 2-node job on this machine (fake scontrol and
// srun, real rlnode processes on 127.0.0.1): it writes the address file
// (mode 0600: the control URL and the key file, itself 0600), a host
// without a node submits a short run through it that succeeds, and at the
// end (a TERM to the batch shell, as Slurm sends before the time limit) a
// job still running is asked to stop after its step, which it checkpoints,
// before the nodes stop; the address file is gone.
func TestSbatchServeScript(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2) to find the node address")
	}
	home := t.TempDir()
	rl := rlnodeWrapper(t)
	tmp := t.TempDir()
	runDir := filepath.Join(tmp, "cluster")
	addrFile := filepath.Join(tmp, "addr-%j")
	script, errOut, code := runRlnode(t, home, "sbatch", "--serve", "--nodes", "2", "--gpus-per-node", "0", "--rlnode", rl,
		"--out", runDir, "--control-port", "0", "--address-file", addrFile, "--wait-timeout", "60s", "--stop-timeout", "45s")
	if code != 0 {
		t.Fatalf("sbatch --serve: exit %d: %s", code, errOut)
	}
	addrFile = filepath.Join(tmp, "addr-4343")
	logPath := filepath.Join(tmp, "job.out")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// A file, not bash's stdin: the nodes inherit stdin, and a pipe they
	// hold would keep Wait from returning.
	scriptPath := filepath.Join(tmp, "job.sh")
	if err := os.WriteFile(scriptPath, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", scriptPath)
	cmd.Env = append(os.Environ(), "PATH="+fakeSlurm(t, 2)+":"+os.Getenv("PATH"), "SLURM_JOB_ID=4343",
		"SLURM_JOB_NODELIST=fake[1-2]", "SLURMD_NODENAME=fake1", "TMPDIR="+tmp, "SLURM_SUBMIT_DIR="+tmp)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	done := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
			_, _, _ = runRlnode(t, home, "stop", "--all")
		}
	})
	jobLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	waitFor(t, 120*time.Second, "the address file", func() bool {
		if strings.Contains(jobLog(), "shutting down") {
			t.Fatalf("the job ended:\n%s\n%s", jobLog(), nodeLogs(runDir))
		}
		return fileExists(addrFile)
	})
	url, key := serveAddress(t, addrFile)
	if want := filepath.Join(runDir, "cluster.key"); key != want {
		t.Errorf("address file names key %s, want %s", key, want)
	}
	if !strings.Contains(jobLog(), "submit with: "+rl+" submit RECIPE --address "+url+" --key-file "+key) {
		t.Errorf("the job's output lacks the submit line for %s:\n%s", url, jobLog())
	}

	// From a host without a node (a home of its own): a short run succeeds.
	login := t.TempDir()
	out, errOut, code := runRlnode(t, login, "submit", "quickstart", "--address", url, "--key-file", key, "--name", "short",
		"--out", filepath.Join(tmp, "runs", "short"), "--set", "sft.steps=2", "--set", "schedule.steps=2")
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s\n%s\n%s", code, out, errOut, jobLog())
	}
	// A long one is running when the allocation ends.
	longDir := filepath.Join(tmp, "runs", "long")
	if _, errOut, code := runRlnode(t, login, "submit", "quickstart", "--address", url, "--key-file", key, "--name", "long",
		"--out", longDir, "--set", "sft.steps=1", "--set", "schedule.steps=100000", "--no-wait"); code != 0 {
		t.Fatalf("submit long: exit %d: %s", code, errOut)
	}
	waitFor(t, 120*time.Second, "the long job's first RL step", func() bool {
		b, _ := os.ReadFile(filepath.Join(longDir, "job.log"))
		return strings.Contains(string(b), "(RL 1/")
	})
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(4 * time.Minute):
		t.Fatalf("the job did not end after its TERM:\n%s", jobLog())
	}
	if waitErr != nil {
		t.Errorf("the job ended with %v, want exit status 0 (told to end while serving, everything stopped in order)", waitErr)
	}
	log := jobLog()
	t.Logf("job output:\n%s", log)
	for _, want := range []string{"2 of 2 nodes up", "job long: asked to stop after its current step", "all nodes stopped cleanly"} {
		if !strings.Contains(log, want) {
			t.Errorf("job output lacks %q:\n%s", want, log)
		}
	}
	if fileExists(addrFile) {
		t.Errorf("the address file %s outlived the job", addrFile)
	}
	b, _ := os.ReadFile(filepath.Join(longDir, "job.log"))
	stoppedCheckpointed(t, string(b))
	for _, n := range []string{"fake1", "fake2"} {
		b, _ := os.ReadFile(filepath.Join(runDir, "node-"+n+".log"))
		if !strings.Contains(string(b), "stopped") {
			t.Errorf("node %s did not stop gracefully:\n%s", n, b)
		}
	}
}

// serveAddress reads a --serve job's address file: the control URL and
// the key file's path, both files their owner's alone.
func serveAddress(t *testing.T, path string) (url, key string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "http://") {
		t.Fatalf("address file %s: want the URL and the key file on two lines, got %q", path, b)
	}
	for _, p := range []string{path, lines[1]} {
		if fi, err := os.Stat(p); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %04o, want 0600", p, fi.Mode().Perm())
		}
	}
	return lines[0], lines[1]
}

// stoppedCheckpointed checks a job's log: its run was asked to stop, and
// stopped after a step it checkpointed.
func stoppedCheckpointed(t *testing.T, jobLog string) {
	t.Helper()
	m := regexp.MustCompile(`stopped after step (\d+); continue from checkpoint step-(\d+)`).FindStringSubmatch(jobLog)
	if !strings.Contains(jobLog, "job stopped: its run was asked to stop") || m == nil || m[1] != m[2] {
		t.Errorf("the job did not stop after a step it checkpointed:\n%s", jobLog)
	}
}

// A --serve job whose control port another process holds on the first
// node says so, and how to take a free one.
func TestSbatchServeControlPortTaken(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2) to find the node address")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	home, tmp := t.TempDir(), t.TempDir()
	script, errOut, code := runRlnode(t, home, "sbatch", "--serve", "--nodes", "1", "--gpus-per-node", "0", "--rlnode", rlnodeWrapper(t),
		"--out", filepath.Join(tmp, "cluster"), "--control-port", fmt.Sprint(port), "--wait-timeout", "60s", "--stop-timeout", "20s")
	if code != 0 {
		t.Fatalf("sbatch --serve: exit %d: %s", code, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	path := filepath.Join(tmp, "job.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "bash", path)
	cmd.Env = append(os.Environ(), "PATH="+fakeSlurm(t, 1)+":"+os.Getenv("PATH"), "SLURM_JOB_ID=4344",
		"SLURM_JOB_NODELIST=fake1", "SLURMD_NODENAME=fake1", "TMPDIR="+tmp, "SLURM_SUBMIT_DIR="+tmp)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 ||
		!strings.Contains(string(out), fmt.Sprintf("holds port %d: write the script with --control-port 0", port)) {
		t.Errorf("job with its control port taken: %v\n%s", err, out)
	}
	if fileExists(filepath.Join(tmp, "rlnode-4344.address")) {
		t.Error("an address file was written")
	}
}

// A recipe that launches vLLM servers: every node of the script is
// started with --vllm (vllm serve, or --vllm COMMAND), and the servers'
// GPUs count against the allocation.
func TestSbatchLaunchesVLLM(t *testing.T) {
	home := t.TempDir()
	model := t.TempDir()
	if _, err := learner.InitCheckpoint(train.Quickstart("").Model, "quickstart", model, 1); err != nil {
		t.Fatal(err)
	}
	base := []string{"sbatch", "quickstart", "--nodes", "2", "--gpus-per-node", "2",
		"--set", "deterministic=false", "--set", "engines.policy.kind=vllm", "--set", fmt.Sprintf("models.policy={path: %q}", model),
		"--set", "placement.learner.gpus=1"}
	launch := func(count int) []string {
		return []string{"--set", fmt.Sprintf("engines.policy.vllm={model: served, launch: {count: %d, gpus: 1}}", count)}
	}
	for _, c := range []struct {
		extra []string
		cmd   string
	}{
		{launch(2), "'vllm serve'"},
		{append(launch(3), "--vllm", "/opt/venv/bin/vllm serve"), "'/opt/venv/bin/vllm serve'"},
	} {
		script, errOut, code := runRlnode(t, home, append(base, c.extra...)...)
		if code != 0 {
			t.Fatalf("sbatch %v: exit %d\n%s", c.extra, code, errOut)
		}
		if !strings.Contains(script, "export RLNODE_VLLM_CMD="+c.cmd+" ") {
			t.Errorf("sbatch %v: the script does not export RLNODE_VLLM_CMD=%s", c.extra, c.cmd)
		}
		if n := strings.Count(script, `--vllm "$RLNODE_VLLM_CMD"`); n != 2 {
			t.Errorf("sbatch %v: --vllm on %d node command lines, want 2 (start and join)", c.extra, n)
		}
		path := filepath.Join(t.TempDir(), "job.sh")
		if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
			t.Errorf("sbatch %v: bash -n: %v\n%s", c.extra, err, out)
		}
	}
	_, errOut, code := runRlnode(t, home, append(base, launch(4)...)...)
	if code != 2 || !strings.Contains(errOut, "reserve 5 GPUs") || !strings.Contains(errOut, "+ 4 for launched vLLM servers") {
		t.Errorf("4 launched servers and a learner on 2 × 2 GPUs: exit %d, %s", code, errOut)
	}
	script, _, _ := runRlnode(t, home, "sbatch", "quickstart", "--nodes", "1", "--gpus-per-node", "0")
	if strings.Contains(script, "RLNODE_VLLM_CMD") {
		t.Error("a recipe that launches nothing got --vllm")
	}
}
