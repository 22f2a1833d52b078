package ctxopt

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/rlnode/rlnode/ctxopt/simlm"
	"github.com/rlnode/rlnode/internal/fsizetest"
	"github.com/rlnode/rlnode/rollout/task"
)

func testMethods(t *testing.T, sp Space) map[string]Method {
	t.Helper()
	cfg := PPOConfig{LR: 1e-3, EntropyCoef: 0.01, Clip: 0.2, Epochs: 4, MaxGradNorm: 0.5, ValueCoef: 0.5, Gamma: 0.95, Lambda: 1, Hidden: []int{32, 32}}
	rng := rand.New(rand.NewPCG(1, 2))
	emb := NewEmbedder(32)
	b, err := NewBandit(sp, emb, cfg, rng)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMultiStep(sp, emb, cfg, 0.02, rng)
	if err != nil {
		t.Fatal(err)
	}
	pc := cfg
	pc.EntropyCoef = 0.05
	h, err := NewHierarchical(sp, emb, cfg, pc, rng)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]Method{"bandit": b, "multistep": m, "hierarchical": h}
}

func TestMethodsChooseValidConfigurations(t *testing.T) {
	sp := testSpace()
	qs, err := Questions(1, task.Train, []string{task.Word, task.Arithmetic}, []int{1, 5}, 16)
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range testMethods(t, sp) {
		rng := rand.New(rand.NewPCG(3, 4))
		cs, recs, err := m.Choose(qs, rng, false)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[Structure]bool{}
		for i, c := range cs {
			if err := sp.CheckConfig(c); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			seen[c.Structure] = true
			roles := 0
			for r := Role(0); r < NumRoles; r++ {
				if c.Structure.Uses(r) {
					roles++
					if len(slices.Compact(slices.Sorted(slices.Values(c.Agents[r].Atoms)))) != len(c.Agents[r].Atoms) {
						t.Fatalf("%s: %s got an atom twice: %v", name, r, c.Agents[r].Atoms)
					}
				}
			}
			switch name {
			case "bandit":
				st := recs[i]["bandit"][0]
				lp, _, _, err := m.Learners()["bandit"].Policy.Evaluate(st.Obs, Act{}, st.Actions)
				if err != nil {
					t.Fatal(err)
				}
				if c.Structure != ReasonVerifyAnswer && !(st.LogProb > lp) {
					t.Fatalf("bandit: logprob %v with inactive heads left out is not above %v with them", st.LogProb, lp)
				}
			case "multistep":
				if got := len(recs[i]["multistep"]); got != 1+2*roles {
					t.Fatalf("multistep: %d steps for %d agents, want %d", got, roles, 1+2*roles)
				}
			case "hierarchical":
				if len(recs[i]["structure"]) != 1 || len(recs[i]["prompt"]) < roles {
					t.Fatalf("hierarchical: %d structure and %d prompt steps for %d agents", len(recs[i]["structure"]), len(recs[i]["prompt"]), roles)
				}
			}
		}
		if len(seen) != int(NumStructures) {
			t.Errorf("%s: an untrained policy sampled only structures %v", name, seen)
		}
		rewards := make([]float64, len(recs))
		for i := range rewards {
			rewards[i] = float64(i%3) - 1
		}
		before := slices.Clone(m.Learners()[slices.Sorted(maps.Keys(m.Learners()))[0]].Params()[0].Data)
		if _, err := m.Learn(recs, rewards); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if after := m.Learners()[slices.Sorted(maps.Keys(m.Learners()))[0]].Params()[0].Data; slices.Equal(before, after) {
			t.Errorf("%s: an update left the weights as they were", name)
		}
	}
}

func TestPolicySaveLoad(t *testing.T) {
	sp := testSpace()
	qs, err := Questions(2, task.HeldOut, []string{task.Word}, []int{2}, 8)
	if err != nil {
		t.Fatal(err)
	}
	a, b := testMethods(t, sp), testMethods(t, sp)
	path := filepath.Join(t.TempDir(), "policy.json")
	// Perturb the saved one so that loading visibly changes b.
	for _, l := range a["hierarchical"].Learners() {
		for _, p := range l.Params() {
			for i := range p.Data {
				p.Data[i] += float32(i%7) * 0.1
			}
		}
	}
	if err := SavePolicy(path, a["hierarchical"]); err != nil {
		t.Fatal(err)
	}
	if err := LoadPolicy(path, b["hierarchical"]); err != nil {
		t.Fatal(err)
	}
	ca, _, _ := a["hierarchical"].Choose(qs, rand.New(rand.NewPCG(1, 1)), true)
	cb, _, _ := b["hierarchical"].Choose(qs, rand.New(rand.NewPCG(1, 1)), true)
	for i := range ca {
		if sp.Describe(ca[i]) != sp.Describe(cb[i]) {
			t.Fatalf("question %d: saved policy chose %s, loaded %s", i, sp.Describe(ca[i]), sp.Describe(cb[i]))
		}
	}
	if err := LoadPolicy(path, b["bandit"]); err == nil {
		t.Error("a hierarchical policy loaded into a bandit")
	}
}

// A save that fails midway (the disk full: a file size limit in a child
// process) leaves the policy.json of the previous save whole, so that
// rlnode ctxopt eval and benchmark still load it; it wrote a cut file.
func TestSavePolicyFullDisk(t *testing.T) {
	m := testMethods(t, testSpace())["hierarchical"]
	if dir, ok := fsizetest.Child(t); ok {
		path := filepath.Join(dir, "policy.json")
		err := SavePolicy(path, m)
		if !errors.Is(err, syscall.EFBIG) {
			t.Fatalf("save past the file size limit: %v, want EFBIG", err)
		}
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	if err := SavePolicy(path, m); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fsizetest.Run(t, dir, uint64(len(old)/2))
	if err := LoadPolicy(path, testMethods(t, testSpace())["hierarchical"]); err != nil {
		t.Fatalf("the previous policy no longer loads: %v", err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, old) {
		t.Fatalf("policy.json holds %d bytes after the failed save, want the previous %d", len(b), len(old))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%s holds %d files after the failed save, want policy.json alone", dir, len(ents))
	}
}

// Every formulation learns: after a short training its greedy policy's
// reward on held-out questions is above a random policy's.
func TestTrainingBeatsRandom(t *testing.T) {
	if testing.Short() {
		t.Skip("trains three policies")
	}
	sp := testSpace()
	sp.Tools = []string{ToolCalculator} // no sandbox needed
	x := testExecutor(simlm.Engine{})
	x.Space = sp
	trainQs, err := Questions(1, task.Train, []string{task.Word, task.Arithmetic}, []int{1, 3, 5}, 60)
	if err != nil {
		t.Fatal(err)
	}
	test, err := Questions(1, task.HeldOut, []string{task.Word, task.Arithmetic}, []int{1, 3, 5}, 30)
	if err != nil {
		t.Fatal(err)
	}
	rc := RandomConfigs(sp, len(test), rand.New(rand.NewPCG(9, 9)))
	outs, err := Execute(context.Background(), x, test, rc, 7)
	if err != nil {
		t.Fatal(err)
	}
	random := Summarize("random", outs, rc)
	for name, m := range testMethods(t, sp) {
		if _, err := Train(context.Background(), m, x, trainQs, TrainOptions{Iterations: 60, Batch: 32, Seed: 1}); err != nil {
			t.Fatal(err)
		}
		cs, _, err := m.Choose(test, rand.New(rand.NewPCG(1, 1)), true)
		if err != nil {
			t.Fatal(err)
		}
		outs, err := Execute(context.Background(), x, test, cs, 7)
		if err != nil {
			t.Fatal(err)
		}
		s := Summarize(name, outs, cs)
		t.Logf("%s: reward %.3f ± %.3f, random %.3f ± %.3f", name, s.Reward, s.RewardCI, random.Reward, random.RewardCI)
		if !(s.Reward > random.Reward) {
			t.Errorf("%s: reward %.3f after training, random policy %.3f", name, s.Reward, random.Reward)
		}
	}
}
