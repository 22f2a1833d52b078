package train

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
)

// servedModels writes, under root, the model a recipe names and a KL
// reference, each with the built-in tokenizer.
func servedModels(t *testing.T, root string) (modelDir, refDir string) {
	t.Helper()
	base := tinyRun("")
	for i, dir := range []string{filepath.Join(root, "model"), filepath.Join(root, "reference")} {
		m, err := model.New(*base.Model, cpu.New())
		if err != nil {
			t.Fatal(err)
		}
		m.InitRandom(uint64(7 + i))
		if err := m.Save(dir, safetensors.F32); err != nil {
			t.Fatal(err)
		}
		tok, err := tokenizer.BuiltinSized(base.Model.VocabSize)
		if err != nil {
			t.Fatal(err)
		}
		if err := tok.Save(filepath.Join(dir, "tokenizer.json")); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(root, "model"), filepath.Join(root, "reference")
}

// unsharedCluster is this process's node (1 CPU) and children child
// nodes (2 CPUs each, each with an RLNODE_HOME of its own), every node
// with one "lh", each child in a mount namespace of its own; with hide,
// the children see an empty folder of their own at each of hidden (as
// hosts that share no filesystem with the driver's see its paths).
func unsharedCluster(ctx context.Context, t *testing.T, children int, hide bool, hidden ...string) (*cluster.Node, []*nodetest.Node) {
	t.Helper()
	node, err := cluster.Start(ctx, cluster.Config{Bind: "127.0.0.1:0", CPUs: 1, Resources: cluster.Resources{"lh": 1}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	var kids []*nodetest.Node
	for range children {
		c := nodetest.Start(t, node, nodetest.Options{CPUs: 2, Resources: cluster.Resources{"lh": 1}, OwnMounts: true}, "RLNODE_HOME="+t.TempDir())
		if hide {
			for _, d := range hidden {
				if err := c.MountPrivate(d); err != nil {
					t.Skip(err)
				}
			}
		}
		kids = append(kids, c)
	}
	return node, kids
}

// servedRun is tinyRun starting from modelDir with refDir as KL
// reference, on node's cluster: shards ranks of half a CPU and one "lh"
// (one per node), or one learner of 1.5 CPUs (on a child).
func servedRun(node *cluster.Node, out string, shards int, modelDir, refDir string) Config {
	cfg := shardRun(out, shards)
	cfg.Node = node
	cfg.Model, cfg.ModelDir = nil, modelDir
	cfg.Learner.Loss.KLCoef, cfg.Learner.Loss.KL, cfg.Learner.RefModelDir = 0.05, rl.K3, refDir
	cfg.LearnerResources = cluster.Resources{cluster.CPU: 0.5, "lh": 1}
	if shards == 1 {
		cfg.Learner.Shards = 0
		cfg.LearnerResources = cluster.Resources{cluster.CPU: 1.5}
	}
	return cfg
}

// checkpointHashes is the SHA-256 of every file under out/checkpoints,
// by path below it.
func checkpointHashes(t *testing.T, out string) map[string]string {
	t.Helper()
	root := filepath.Join(out, "checkpoints")
	sums := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		h := sha256.Sum256(b)
		sums[rel] = hex.EncodeToString(h[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

// sameCheckpoints reports the files of want that got lacks or holds
// other bytes of, and those got has beyond want.
func sameCheckpoints(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: no checkpoint files to compare", what)
	}
	for p, h := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%s: %s missing", what, p)
		} else if g != h {
			t.Errorf("%s: %s has other bytes (%s, want %s)", what, p, g[:12], h[:12])
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: %s is extra", what, p)
		}
	}
}

// noStaging fails on anything left in the staging folders of kids'
// homes (RLNODE_HOME, unsharedCluster) once their learners stopped.
func noStaging(t *testing.T, kids []*nodetest.Node) {
	t.Helper()
	for _, k := range kids {
		home := ""
		for _, e := range k.Cmd.Env {
			if v, ok := strings.CutPrefix(e, "RLNODE_HOME="); ok {
				home = v
			}
		}
		if home == "" {
			t.Fatalf("child %s has no RLNODE_HOME of its own", k.ID)
		}
		ents, _ := os.ReadDir(filepath.Join(home, "staging"))
		for _, e := range ents {
			t.Errorf("child %s's staging folder is left: %s", k.ID, filepath.Join(home, "staging", e.Name()))
		}
	}
}

// noPartFiles fails on a temporary file of a transfer left under out.
func noPartFiles(t *testing.T, out string) {
	t.Helper()
	_ = filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp-") {
			t.Errorf("a transfer's temporary file is left: %s", p)
		}
		return nil
	})
}

// A learner whose host does not see the run folder, nor the folders of
// the model and reference the recipe names (hosts that share no
// filesystem), is served over the bulk path: it starts from the model,
// every checkpoint it saves lands in the driver's run folder, and the
// checkpoints are byte for byte those of the same run with every folder
// shared; --resume from one of them, with the learner again on a host
// that sees none of it, ends at the same bytes. Before, the run was
// refused at placement. 1 and 2 shards (one rank on the driver's node,
// one on the child).
func TestRunFolderNotSharedIsServed(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			modelDir, refDir := servedModels(t, t.TempDir())
			run := func(name string, hide bool, resume string) (string, int64) {
				out := t.TempDir()
				hidden := []string{out, filepath.Dir(modelDir)}
				if resume != "" {
					hidden = append(hidden, filepath.Dir(filepath.Dir(resume)))
				}
				node, kids := unsharedCluster(ctx, t, 1, hide, hidden...)
				cfg := servedRun(node, out, shards, modelDir, refDir)
				cfg.Resume = resume
				var mu sync.Mutex
				var pulled int64
				cfg.pulled = func(_ string, _ int, _ string, f learner.FolderFile, got int64) {
					if got == f.Size {
						mu.Lock()
						pulled += f.Size
						mu.Unlock()
					}
				}
				start := time.Now()
				if _, err := Run(ctx, cfg); err != nil {
					t.Fatalf("%s run: %v", name, err)
				}
				t.Logf("%s run: %.1f s, %d checkpoint bytes pulled from the learner's node", name, time.Since(start).Seconds(), pulled)
				noPartFiles(t, out)
				noStaging(t, kids)
				return out, pulled
			}
			shared, sharedPulled := run("shared", false, "")
			if sharedPulled != 0 {
				t.Errorf("a run whose folders every node sees pulled %d bytes", sharedPulled)
			}
			want := checkpointHashes(t, shared)
			private, pulled := run("unshared", true, "")
			if pulled == 0 {
				t.Fatalf("the learner's node does not see the run folder, yet nothing was pulled from it")
			}
			sameCheckpoints(t, "unshared run", want, checkpointHashes(t, private))
			for _, step := range []string{"step-2", "step-4", "step-5"} {
				if err := VerifyCheckpoint(filepath.Join(private, "checkpoints", step)); err != nil {
					t.Errorf("unshared run: %v", err)
				}
			}

			resumed, _ := run("resumed", true, filepath.Join(private, "checkpoints", "step-2"))
			got := checkpointHashes(t, resumed)
			for p := range want {
				if strings.HasPrefix(p, "step-2"+string(filepath.Separator)) {
					delete(want, p) // written by the run it resumed
				}
			}
			sameCheckpoints(t, "run resumed from step 2 with the learner on an unshared host", want, got)
		})
	}
}

// A learner node killed while the driver pulls a checkpoint from it
// (mid-file) costs that checkpoint only: nothing of it is kept, the
// learner restarts from the last complete checkpoint on the other node,
// which sees no run folder either (it fetches that checkpoint from the
// driver), and the run finishes with every step once and every
// checkpoint whole.
func TestUnsharedLearnerKilledMidTransfer(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			modelDir, refDir := servedModels(t, t.TempDir())
			out := t.TempDir()
			node, kids := unsharedCluster(ctx, t, 2, true, out, filepath.Dir(modelDir))
			cfg := servedRun(node, out, shards, modelDir, refDir)
			cfg.LearnerTimeout = 2 * time.Second
			cfg.pullChunk = 512
			var armed, killed bool
			var killedNode string
			cfg.Progress = func(m Metrics) {
				if m.Step == 3 && !killed {
					armed = true // the next checkpoint is step 4's
				}
			}
			var after int64 // bytes pulled from a node after the kill
			cfg.pulled = func(_ string, _ int, nodeID string, f learner.FolderFile, got int64) {
				if killed && got == f.Size && nodeID != killedNode {
					after += f.Size
				}
				if !armed || killed || got >= f.Size {
					return
				}
				for _, k := range kids {
					if k.ID == nodeID {
						k.Kill()
						killed, killedNode = true, nodeID
					}
				}
			}
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatalf("run whose learner node was killed mid-transfer: %v", err)
			}
			if !killed {
				t.Fatalf("no learner node was killed (armed %v)", armed)
			}
			t.Logf("killed node %s mid-transfer of step 4's checkpoint; %d bytes pulled from the replacement's node after", killedNode, after)
			if after == 0 {
				t.Errorf("nothing was pulled after the kill: the replacement learner is not on the other node without the run folder")
			}
			if res.Steps != 5 {
				t.Errorf("%d steps, want 5", res.Steps)
			}
			checkStepsOnce(t, filepath.Join(out, "metrics.jsonl"), 5)
			noPartFiles(t, out)
			var alive []*nodetest.Node
			for _, k := range kids {
				if k.ID != killedNode {
					alive = append(alive, k)
				}
			}
			noStaging(t, alive)
			for _, step := range []string{"step-2", "step-4", "step-5"} {
				if err := VerifyCheckpoint(filepath.Join(out, "checkpoints", step)); err != nil {
					t.Errorf("%v", err)
				}
			}
		})
	}
}
