package train

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/logbuf"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/rollout/vllm"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// vllmDriver is this process's node: 2 CPUs and the one "drv", where the
// learner goes. One per test, shared by its subtests: protoactor's start
// sets gRPC's global logger, which a node started earlier in the process
// may be reading (a race under -race, DESIGN.md).
func vllmDriver(t *testing.T) *cluster.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := cluster.Start(ctx, cluster.Config{Bind: "127.0.0.1:0", CPUs: 2, Resources: cluster.Resources{"drv": 1}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	return node
}

// vllmCluster joins to node children child nodes that launch vLLM servers with
// fakevllm (1 CPU and 1 GPU each, an RLNODE_HOME of their own, fakevllm recording
// into rec and reading what it loads), each in a mount namespace of its
// own; with hide, the children see an empty folder of their own at each
// of hidden (hosts that share no filesystem with the driver's).
func vllmCluster(t *testing.T, node *cluster.Node, fake, rec string, children int, hide bool, hidden ...string) []*nodetest.Node {
	t.Helper()
	var kids []*nodetest.Node
	for range children {
		c := nodetest.Start(t, node, nodetest.Options{CPUs: 1, GPUs: 1, Labels: map[string]string{vllm.LaunchLabel: "on"}, OwnMounts: true},
			"RLNODE_HOME="+t.TempDir(), testVLLMCommand+"="+fake+" serve", "FAKEVLLM_RECORD="+rec, "FAKEVLLM_READ_FILES=1")
		if hide {
			for _, d := range hidden {
				if err := c.MountPrivate(d); err != nil {
					t.Skip(err)
				}
			}
		}
		kids = append(kids, c)
	}
	return kids
}

// launchedRun is tinyRun from modelDir, its learner on node, generating
// on servers vLLM servers the run launches; every weights folder is kept.
func launchedRun(node *cluster.Node, out, modelDir string, servers int) Config {
	cfg := tinyRun(out)
	cfg.Node = node
	cfg.Model, cfg.ModelDir = nil, modelDir
	cfg.LearnerResources = cluster.Resources{cluster.CPU: 1, "drv": 1}
	cfg.VLLM = &VLLM{Model: "tiny", Keep: 100, ReloadTimeout: 2 * time.Minute,
		Launch: &vllm.Launch{Servers: servers, LaunchArgs: vllm.LaunchArgs{Model: modelDir, StartTimeoutMs: 60_000}}}
	return cfg
}

// homeOf is child k's RLNODE_HOME.
func homeOf(t *testing.T, k *nodetest.Node) string {
	t.Helper()
	for _, e := range k.Cmd.Env {
		if v, ok := strings.CutPrefix(e, "RLNODE_HOME="); ok {
			return v
		}
	}
	t.Fatalf("child %s has no RLNODE_HOME of its own", k.ID)
	return ""
}

// folderHashes is the SHA-256 of each file in dir, by name.
func folderHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	h, err := vllmtest.FolderHashes(dir)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// checkLoads checks a server's reloads (events): each of the version
// named and of Out/vllm-weights/step-N's bytes, read from that folder
// (within, "") or from a staged copy under within, beside at most the
// model's copy and one other version; versions go up by one from first.
func checkLoads(t *testing.T, who string, events []vllmtest.FakeEvent, out, within string, first int) (last int) {
	t.Helper()
	last = first - 1
	for _, e := range events {
		if e.Op != "reload" {
			continue
		}
		v, err := strconv.Atoi(e.Version)
		if err != nil || v != last+1 {
			t.Errorf("%s: reload of version %q after %d", who, e.Version, last)
		}
		last = v
		dir := filepath.Join(out, "vllm-weights", "step-"+e.Version)
		switch {
		case within == "" && e.Path != dir:
			t.Errorf("%s: version %s loaded from %s, want %s", who, e.Version, e.Path, dir)
		case within != "" && !strings.HasPrefix(e.Path, within+string(filepath.Separator)):
			t.Errorf("%s: version %s loaded from %s, want a copy under %s", who, e.Version, e.Path, within)
		case within != "" && e.Siblings > 1+2:
			t.Errorf("%s: version %s: %d folders staged beside it, want at most the model and 2 versions", who, e.Version, e.Siblings)
		}
		if want := folderHashes(t, dir); !maps.Equal(e.Files, want) {
			t.Errorf("%s: version %s loaded files %v, want %s's %v", who, e.Version, e.Files, dir, want)
		}
	}
	return last
}

// checkAdapterLoads checks a server's adapter loads (events): the n-th of
// Out/vllm-weights/step-(first+n)'s bytes, read from a staged copy under
// within, beside at most the model's copy and one other; it returns the
// last step loaded.
func checkAdapterLoads(t *testing.T, events []vllmtest.FakeEvent, out, within string, first int) (last int) {
	t.Helper()
	last = first - 1
	for _, e := range events {
		if e.Op != "lora" {
			continue
		}
		last++
		dir := filepath.Join(out, "vllm-weights", fmt.Sprintf("step-%d", last))
		if !strings.HasPrefix(e.Path, within+string(filepath.Separator)) || e.Siblings > 1+2 {
			t.Errorf("adapter of step %d loaded from %s beside %d folders, want a copy under %s beside at most 2 others", last, e.Path, e.Siblings-1, within)
		}
		if want := folderHashes(t, dir); !maps.Equal(e.Files, want) {
			t.Errorf("adapter of step %d: loaded files %v, want %s's %v", last, e.Files, dir, want)
		}
	}
	return last
}

// A run whose vLLM server's node does not see the run folder, nor the
// model's folder, completes: the server serves a copy of the model with
// its bytes, and loads every version from a copy on its node with the
// bytes the driver wrote, keeping two; its copies are gone once the run
// ends; a LoRA run's server loads each step's adapter from a copy too. On
// a node that sees both, the server reads the folders themselves, as
// before. Before, the unshared run's server could not start (it serves
// the model's path, which its node does not have).
func TestVLLMServersOnUnsharedNodes(t *testing.T) {
	fake := vllmtest.BuildFakeVLLM(t)
	node := vllmDriver(t)
	for _, tc := range []struct {
		name         string
		shared, lora bool
	}{{"shared", true, false}, {"unshared", false, false}, {"unshared_lora", false, true}} {
		shared := tc.shared
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			rec, out := t.TempDir(), t.TempDir()
			modelDir, _ := servedModels(t, t.TempDir())
			kids := vllmCluster(t, node, fake, rec, 1, !shared, out, filepath.Dir(modelDir))
			cfg := launchedRun(node, out, modelDir, 1)
			if tc.lora {
				lc := loraRun(out)
				cfg.Learner.Algorithm, cfg.Learner.LoRA, cfg.Learner.LR = lc.Learner.Algorithm, lc.Learner.LoRA, lc.Learner.LR
			}
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			recs := vllmtest.FakeRecords(t, rec)
			if len(recs) != 1 {
				t.Fatalf("%d servers started, want 1", len(recs))
			}
			r := recs[0]
			staging := ""
			if !shared {
				staging = filepath.Join(homeOf(t, kids[0]), "staging")
			}
			if shared && r.Model != modelDir || !shared && !strings.HasPrefix(r.Model, staging+string(filepath.Separator)) {
				t.Errorf("the server served %s (shared %v)", r.Model, shared)
			}
			if want := folderHashes(t, modelDir); !maps.Equal(r.ModelFiles, want) {
				t.Errorf("the server's model files %v, want %v", r.ModelFiles, want)
			}
			events := vllmtest.FakeEvents(t, rec, r.Port)
			last := checkLoads(t, "server", events, out, staging, 0)
			if tc.lora {
				// Full weights through the warm-up, then each step's adapter.
				if last != cfg.WarmupSteps {
					t.Errorf("last full version loaded %d, want the warm-up's %d", last, cfg.WarmupSteps)
				}
				last = checkAdapterLoads(t, events, out, staging, cfg.WarmupSteps+1)
			}
			if total := cfg.WarmupSteps + cfg.Steps; last != total || res.WeightVersion != int64(total) {
				t.Errorf("last version loaded %d, run's %d, want %d", last, res.WeightVersion, total)
			}
			generated := 0
			for _, e := range events {
				if e.Op == "generate" {
					generated++
				}
			}
			if generated == 0 {
				t.Error("the server answered no generation")
			}
			if err := syscall.Kill(r.PID, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("server process %d still there after the run (%v)", r.PID, err)
			}
			noStaging(t, kids)
		})
	}
}

// The node of a vLLM server is killed (SIGKILL) mid-run: the cluster
// starts the server on the node left with a free GPU, at another URL,
// where the run folder is not seen either; the run's client finds it there, gives it the
// current weights (staged on its node) before any request, and the run
// completes with it serving, its last version the run's. With one server,
// requests wait for it; with two, the run goes on with the other while it
// is not found. The killed node's server process goes with its node.
// Before, the client kept the old URL: the next request (one server) or
// weight reload (two) failed there and the run stopped.
func TestVLLMServerMovesAfterNodeLoss(t *testing.T) {
	fake := vllmtest.BuildFakeVLLM(t)
	node := vllmDriver(t)
	for _, servers := range []int{1, 2} {
		t.Run(fmt.Sprint("servers=", servers), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			rec, out := t.TempDir(), t.TempDir()
			modelDir, _ := servedModels(t, t.TempDir())
			// A GPU each: each server on a node of its own, and one node
			// left for the one restarted.
			kids := vllmCluster(t, node, fake, rec, servers+1, true, out, filepath.Dir(modelDir))
			cfg := launchedRun(node, out, modelDir, servers)
			cfg.VLLM.Launch.GPUs = 1
			cfg.Steps = 4 + 3*(servers-1)
			var logged logbuf.Buffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
			killAt := cfg.WarmupSteps + 1
			// With two servers the run goes on without the lost one; a few
			// steps on, it waits for its replacement to start, so that the
			// steps left reach it.
			waitAt := killAt + 3*(servers-1)
			var killed *nodetest.Node
			var before []vllmtest.FakeRecord // the servers when the node was killed
			lost := map[int]bool{}           // the killed node's servers' processes
			cfg.Progress = func(m Metrics) {
				if m.Step == waitAt && killed != nil {
					for !restartedAlive(node, len(lost)) && ctx.Err() == nil {
						time.Sleep(50 * time.Millisecond)
					}
				}
				if m.Step != killAt || killed != nil {
					return
				}
				before = vllmtest.FakeRecords(t, rec)
				if len(before) != servers {
					t.Errorf("%d servers before the kill, want %d", len(before), servers)
					return
				}
				parent := parentOf(t, before[0].PID)
				for _, k := range kids {
					if k.Cmd.Process.Pid == parent {
						killed = k
					}
				}
				if killed == nil {
					t.Errorf("the server's process %d is no child node's (its parent is %d)", before[0].PID, parent)
					return
				}
				for _, r := range before {
					if parentOf(t, r.PID) == parent {
						lost[r.PID] = true
					}
				}
				killed.Kill()
			}
			start := time.Now()
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatalf("run whose vLLM server's node was killed: %v", err)
			}
			if killed == nil {
				t.Fatal("no server node was killed")
			}
			total := cfg.WarmupSteps + cfg.Steps
			if res.Steps != total {
				t.Errorf("%d steps, want %d", res.Steps, total)
			}
			checkStepsOnce(t, filepath.Join(out, "metrics.jsonl"), total)
			recs := vllmtest.FakeRecords(t, rec)
			if len(recs) != servers+len(lost) {
				t.Fatalf("%d servers started, want %d and the %d of the killed node restarted", len(recs), servers, len(lost))
			}
			old := map[string]bool{}
			for _, r := range before {
				old[r.Host+":"+r.Port] = true
			}
			for _, moved := range recs {
				if slices.ContainsFunc(before, func(r vllmtest.FakeRecord) bool { return r.PID == moved.PID }) {
					continue
				}
				who := fmt.Sprintf("server restarted at %s:%s", moved.Host, moved.Port)
				var on *nodetest.Node
				staging := ""
				for _, k := range kids {
					if st := filepath.Join(homeOf(t, k), "staging"); strings.HasPrefix(moved.Model, st+string(filepath.Separator)) {
						on, staging = k, st
					}
				}
				if on == nil || on == killed || old[moved.Host+":"+moved.Port] {
					t.Fatalf("%s serves %s, want a copy in the staging of a node not killed, at another URL than the killed servers'", who, moved.Model)
				}
				events := vllmtest.FakeEvents(t, rec, moved.Port)
				if len(events) == 0 || events[0].Op != "reload" {
					t.Fatalf("%s: first event %+v, want a reload before any request", who, events)
				}
				firstVersion, _ := strconv.Atoi(events[0].Version)
				if firstVersion < killAt {
					t.Errorf("%s first loaded version %d, older than the %d the run had when its node was killed", who, firstVersion, killAt)
				}
				if last := checkLoads(t, who, events, out, staging, firstVersion); last != total {
					t.Errorf("%s: last version %d, want the run's %d", who, last, total)
				}
				generated := 0
				for _, e := range events {
					if e.Op == "generate" {
						generated++
					}
				}
				if generated == 0 {
					t.Errorf("no request reached the %s", who)
				}
				t.Logf("node %s (%d of the %d servers) killed after step %d; %s on %s loaded versions %d..%d and answered %d generations; run %.1f s",
					killed.ID, len(lost), servers, killAt, who, on.ID, firstVersion, total, generated, time.Since(start).Seconds())
			}
			for pid := range lost {
				if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("the killed node's server process %d is still there (%v)", pid, err)
				}
			}
			if servers > 1 {
				// The run said which server sat the updates out, and when
				// it found it again.
				for _, want := range []string{"vllm server not found", "vllm server found"} {
					if !strings.Contains(logged.String(), `msg="`+want) {
						t.Errorf("the run's log has no %q", want)
					}
				}
				for _, line := range strings.Split(logged.String(), "\n") {
					if strings.Contains(line, `msg="vllm server `) {
						t.Log(line)
					}
				}
			}
			var alive []*nodetest.Node
			for _, k := range kids {
				if k != killed {
					alive = append(alive, k)
				}
			}
			noStaging(t, alive)
		})
	}
}

// parentOf is the parent process of process pid (Linux: /proc).
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The parent is the second field after "(comm) ".
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// restartedAlive says whether node's directory holds n vLLM server
// actors that restarted and serve again (ALIVE).
func restartedAlive(node *cluster.Node, n int) bool {
	alive := 0
	for _, a := range node.Status().Actors {
		if a.Kind == vllm.ServerKind && a.State == cluster.Alive && a.Restarts > 0 {
			alive++
		}
	}
	return alive >= n
}
