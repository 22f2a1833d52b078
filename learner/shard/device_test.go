package shard

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/learner/cuda/cudatest"
)

// TestDeviceRanksEqualOneLearner: two data-parallel ranks, each on its
// own (emulated) GPU, reduce their gradients over the ring through host
// copies, take the update on their devices and reach the weights of one
// learner on one such GPU: under ZeRO stage 0 the fused AdamW over every
// tensor; under ZeRO-1 each rank's slices only, then the all-gather (the
// host ZeRO-1 path on the CPU backend lands in the same place).
func TestDeviceRanksEqualOneLearner(t *testing.T) {
	for name, newBackend := range cudatest.Backends(t) {
		t.Run(name, func(t *testing.T) { deviceRanksEqualOneLearner(t, newBackend) })
	}
}

func deviceRanksEqualOneLearner(t *testing.T, newBackend func() (backend.Backend, error)) {
	single := tinyConfig(learner.GRPO, 0, 0)
	single.Backend = newBackend
	ref := newLearner(t, single)
	if _, ok := ref.Model().B.(*cuda.DeviceBackend); !ok {
		t.Fatalf("the learner runs on %T, not the device backend", ref.Model().B)
	}
	init := ref.Model().Weights()
	var want []learner.Stats
	for step := range 3 {
		st, err := ref.Train(groupBatch(step))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, st)
	}
	w := ref.Model().Weights()
	if moved, _ := maxDiff(w, init); moved < 100*equivTol {
		t.Fatalf("the weights moved by only %g: the test would not see a wrong update", moved)
	}
	for _, stage := range []int{0, 1} {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			c := tinyConfig(learner.GRPO, 2, stage)
			c.Backend = newBackend
			// Stage 1's ranks share their buffers (as ranks on one host
			// do), which the backend then page-locks.
			ranks := memGroupOf(t, c, Options{BucketElems: 333, Timeout: 60 * time.Second}, stage == 1)
			for r, rk := range ranks {
				if want := stage == 1 && runtime.GOOS == "linux"; rk.Shared() != want {
					t.Fatalf("rank %d: shared buffers %v, want %v", r, rk.Shared(), want)
				}
			}
			var host []*Rank // stage 1: the host ZeRO-1 path on the CPU backend
			if stage == 1 {
				host = memGroup(t, tinyConfig(learner.GRPO, 2, stage), Options{BucketElems: 333, Timeout: 60 * time.Second})
			}
			for step := range 3 {
				b := groupBatch(step)
				var before, pinnedBefore [2]int64
				for r, rk := range ranks {
					db := rk.Learner().Model().B.(*cuda.DeviceBackend)
					before[r] = db.Downloaded
					if emu, ok := db.D.(*cuda.EmuDevice); ok {
						pinnedBefore[r] = emu.PinnedBytes
					}
				}
				got, errs := trainAll(ranks, b)
				for r, err := range errs {
					if err != nil {
						t.Fatalf("step %d rank %d: %v", step, r, err)
					}
				}
				for r, rk := range ranks {
					// What a step copies to the host: every gradient once (the
					// overlapped reduction's copies), under ZeRO-1 the rank's
					// slice of the updated weights, and the scores (under a
					// tenth of the weights here). Copying the weights before the
					// update as well would double it.
					n := int64(4 * rk.total)
					own := int64(0)
					for _, p := range rk.pieces {
						own += int64(4 * (p.hi - p.lo))
					}
					d := rk.Learner().Model().B.(*cuda.DeviceBackend).Downloaded - before[r]
					t.Logf("step %d rank %d: %d bytes to the host for %d bytes of gradients", step, r, d, n)
					if d < n+own || d > n+own+n/10 {
						t.Errorf("step %d rank %d: %d bytes copied to the host, want %d (gradients) + %d (owned weights) + scores under %d", step, r, d, n, own, n/10)
					}
					// The gradients and weights cross through page-locked
					// buffers (the trainer's host copies, the ring's buffer
					// or the shared one): down and back up, whole or the
					// owned slice.
					db := rk.Learner().Model().B.(*cuda.DeviceBackend)
					if db.PinnedBuffers() == 0 {
						t.Errorf("step %d rank %d: no page-locked host buffers held", step, r)
					}
					if emu, ok := db.D.(*cuda.EmuDevice); ok {
						if pinned := emu.PinnedBytes - pinnedBefore[r]; pinned != 2*n+2*own {
							t.Errorf("step %d rank %d: %d bytes copied through page-locked buffers, want %d", step, r, pinned, 2*n+2*own)
						}
					}
				}
				for r := range ranks {
					if got[r].Step != want[step].Step || got[r].Tokens != want[step].Tokens || abs(got[r].GradNorm-want[step].GradNorm) > 1e-4*want[step].GradNorm {
						t.Fatalf("step %d rank %d stats %+v\nwant %+v", step, r, got[r], want[step])
					}
				}
				if host != nil {
					if _, errs := trainAll(host, b); errs[0] != nil || errs[1] != nil {
						t.Fatal(errs)
					}
				}
			}
			for r, rk := range ranks {
				if _, ok := rk.Learner().Model().B.(*cuda.DeviceBackend); !ok {
					t.Fatalf("rank %d runs on %T", r, rk.Learner().Model().B)
				}
				if n := len(rk.Learner().Optimizer().State().Tensors); n != 0 {
					t.Errorf("rank %d: the host optimizer holds %d moment tensors: the rank stepped on the host", r, n)
				}
				if stage == 1 {
					if n := len(rk.zopt.State().Tensors); n != 0 {
						t.Errorf("rank %d: the ZeRO-1 optimizer holds %d moment tensors on the host before a save: the rank stepped on the host", r, n)
					}
					if rk.zopt.StepCount() != 3 {
						t.Errorf("rank %d: the ZeRO-1 optimizer counts %d steps, want 3", r, rk.zopt.StepCount())
					}
				}
				d, at := maxDiff(rk.Learner().Model().Weights(), w)
				if d > equivTol {
					t.Errorf("rank %d: weights differ by %g at %s from one learner's (tolerance %g)", r, d, at, equivTol)
				}
				t.Logf("rank %d: max weight difference %g", r, d)
				if host != nil {
					d, at := maxDiff(rk.Learner().Model().Weights(), host[r].Learner().Model().Weights())
					if d > equivTol {
						t.Errorf("rank %d: weights differ by %g at %s from the host ZeRO-1 rank's (tolerance %g)", r, d, at, equivTol)
					}
					t.Logf("rank %d: max weight difference from the host ZeRO-1 path %g", r, d)
				}
			}
			if stage == 1 {
				zeroOneCheckpoints(t, c, ranks, host)
			}
		})
	}
}

// zeroOneCheckpoints: the ZeRO-1 device ranks' checkpoint holds the
// moments the host ZeRO-1 ranks' does (copied back from the devices), and
// device ranks restarted from the host ranks' checkpoint (moments uploaded
// to the devices) take the step the host ranks take.
func zeroOneCheckpoints(t *testing.T, c learner.Config, dev, host []*Rank) {
	devDir, hostDir := t.TempDir(), t.TempDir()
	saveAll(t, dev, devDir)
	saveAll(t, host, hostDir)
	plain := tinyConfig(learner.GRPO, 0, 0)
	fromDev, fromHost := newLearner(t, plain), newLearner(t, plain)
	if err := fromDev.Load(devDir); err != nil {
		t.Fatal(err)
	}
	if err := fromHost.Load(hostDir); err != nil {
		t.Fatal(err)
	}
	got, want := fromDev.Optimizer().State(), fromHost.Optimizer().State()
	if got.Step != want.Step || len(got.Tensors) != len(want.Tensors) || len(got.Tensors) == 0 {
		t.Fatalf("optimizer state from the device ranks: step %d, %d tensors; from the host ranks: step %d, %d tensors", got.Step, len(got.Tensors), want.Step, len(want.Tensors))
	}
	for i, x := range got.Tensors {
		y := want.Tensors[i]
		var peak, d float64
		for j := range y.Data {
			peak = max(peak, abs(float64(y.Data[j])))
			d = max(d, abs(float64(x.Data[j]-y.Data[j])))
		}
		// The moments follow the gradients, which the two backends compute
		// within 1e-3 relative of each other.
		if x.Name != y.Name || d > 2e-3*peak || d != d {
			t.Errorf("%s: differs by %g (peak %g) from %s of the host ranks", x.Name, d, peak, y.Name)
		}
	}
	resumed := restartGroup(t, c, 2, hostDir)
	t.Cleanup(func() {
		for _, r := range resumed {
			r.Close()
		}
	})
	for r, rk := range resumed {
		if _, ok := rk.Learner().Model().B.(*cuda.DeviceBackend); !ok {
			t.Fatalf("resumed rank %d runs on %T", r, rk.Learner().Model().B)
		}
	}
	before := host[0].Learner().Model().Weights()
	b := groupBatch(3)
	if _, errs := trainAll(resumed, b); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if _, errs := trainAll(host, b); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if moved, _ := maxDiff(host[0].Learner().Model().Weights(), before); moved < 10*equivTol {
		t.Fatalf("the resumed step moved the weights by only %g", moved)
	}
	for r, rk := range resumed {
		d, at := maxDiff(rk.Learner().Model().Weights(), host[r].Learner().Model().Weights())
		if d > equivTol {
			t.Errorf("resumed device rank %d: weights differ by %g at %s from the host rank's (tolerance %g)", r, d, at, equivTol)
		}
		t.Logf("resumed device rank %d: max weight difference %g", r, d)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestDeviceOnNode(t *testing.T) {
	nodes := []string{"a", "b", "a", "a", "c"}
	for _, c := range []struct {
		device string
		b      int
		want   string
	}{
		{"cuda", 0, "cuda:0"},
		{"cuda", 2, "cuda:1"},
		{"cuda-bf16", 3, "cuda-bf16:2"},
		{"cuda", 1, "cuda"}, // alone on its node: Slurm's or device 0
		{"cuda", 4, "cuda"},
		{"cuda:1", 3, "cuda:1"}, // the recipe's index stands
		{"cpu", 0, "cpu"},
		{"", 0, ""},
		{"cuda", 9, "cuda"}, // no such bundle
	} {
		if got := deviceOnNode(c.device, nodes, c.b); got != c.want {
			t.Errorf("deviceOnNode(%q, bundle %d) = %q, want %q", c.device, c.b, got, c.want)
		}
	}
}

// TestDeviceRanksOnTwoGPUs is TestDeviceRanksEqualOneLearner with the
// learners spread over GPUs 0 and 1 (the reference on 0, each group's
// ranks on 1 and 0), as shards on a host with several GPUs run. It needs
// two GPUs; TestOnEmulatedGPU runs it on two emulated ones.
func TestDeviceRanksOnTwoGPUs(t *testing.T) {
	t.Run("gpu", func(t *testing.T) {
		if cudatest.GPUBackend(t) == nil {
			t.Skip("no GPU")
		}
		if n := len(cuda.Available().Devices); n < 2 {
			t.Skipf("%d GPU here: the test needs two", n)
		}
		var opened int
		deviceRanksEqualOneLearner(t, func() (backend.Backend, error) {
			g, err := cuda.OpenGPU(opened % 2)
			opened++
			if err != nil {
				return nil, err
			}
			b := cuda.NewDeviceBackend(g, cuda.F32)
			t.Cleanup(func() { b.Close() })
			return b, nil
		})
		if opened < 5 {
			t.Fatalf("%d learners opened a GPU, want 5", opened)
		}
	})
}

// TestOnEmulatedGPU runs the ranks' gpu subtests on two emulated GPUs:
// two ranks and one learner on GPU 0, then spread over GPUs 0 and 1,
// through the CUDA driver's and cuBLASLt's calls, on the CPU.
func TestOnEmulatedGPU(t *testing.T) {
	cudatest.OnEmulatedGPU(t, "TestDeviceRanksEqualOneLearner", "TestDeviceRanksOnTwoGPUs")
}
