package learner

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/learner/cuda/cudatest"
	"github.com/rlnode/rlnode/learner/optim"
	"github.com/rlnode/rlnode/learner/rl"
)

// TestDeviceCheckpointResumes: a learner on an (emulated) GPU,
// whose AdamW moments live on the device, writes them into its checkpoint;
// a learner restored from it on another device takes the next step as
// the original does (to float32 rounding), and one restored without them
// does not.
func TestDeviceCheckpointResumes(t *testing.T) {
	c := tinyConfig(GRPO)
	c.Loss.KLCoef, c.Loss.KL = 0.05, rl.K3
	c.Backend = cudatest.EmuBackend(t)
	a := newLearner(t, c)
	b := groupBatch()
	for range 2 {
		if _, err := a.Train(b); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(a.Optimizer().State().Tensors); n != 0 {
		t.Fatalf("the host optimizer holds %d moment tensors: the steps did not run on the device", n)
	}
	dir := savedTo(t, a)
	st := a.Optimizer().State()
	if st.Step != 2 || len(st.Tensors) != 2*len(a.Model().TrainableParams()) {
		t.Fatalf("saved optimizer state: step %d, %d tensors for %d parameters", st.Step, len(st.Tensors), len(a.Model().TrainableParams()))
	}
	for _, x := range st.Tensors {
		if x.Name[:len(optim.ExpAvgSqPrefix)] == optim.ExpAvgSqPrefix && maxAbs(x.Data) == 0 {
			t.Fatalf("%s is all zeros after two steps", x.Name)
		}
	}
	r := loaded(t, c, dir)
	if r.Model().B != r.ref.B || r.Model().B.Name() != "cuda" {
		t.Fatalf("the restored learner runs on %s, its reference on %s: the learner left its device", r.Model().B.Name(), r.ref.B.Name())
	}
	if d := maxDiff(a.PolicyWeights(), r.PolicyWeights()); d != 0 {
		t.Errorf("restored weights differ by %v", d)
	}
	// A learner resumed with its optimizer started afresh, to show what
	// losing the moments costs.
	fresh := loaded(t, c, dir)
	if err := fresh.restartOptimizer(); err != nil {
		t.Fatal(err)
	}
	sa, err := a.Train(b)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := r.Train(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Train(b); err != nil {
		t.Fatal(err)
	}
	// On the emulated device the two agree to the bit; the tolerance is for
	// a GPU, where cuBLASLt may pick another algorithm for other pointer
	// alignments. Moments lost move weights by about 1e-2.
	const tolerance = 1e-5
	if d := maxDiff(a.PolicyWeights(), r.PolicyWeights()); d > tolerance {
		t.Errorf("after one more step the weights differ by %v (tolerance %v)", d, tolerance)
	}
	if d := maxDiff(a.PolicyWeights(), fresh.PolicyWeights()); d < 100*tolerance {
		t.Errorf("a learner resumed without the moments is within %v of the original: the comparison cannot tell", d)
	} else {
		t.Logf("resumed with the moments: within %v; without: %v", maxDiff(a.PolicyWeights(), r.PolicyWeights()), d)
	}
	if math.Abs(sa.Loss-sr.Loss) > 1e-6 || math.Abs(sa.GradNorm-sr.GradNorm) > 1e-6*sa.GradNorm {
		t.Errorf("step stats differ: loss %v/%v, gradient norm %v/%v", sa.Loss, sr.Loss, sa.GradNorm, sr.GradNorm)
	}
}

func maxAbs(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, v, -v)
	}
	return m
}

// TestCheckpointActivationsTrainsTheSame: a GRPO learner with activation
// checkpointing takes its steps to the same weights, bit for bit, as one
// without.
func TestCheckpointActivationsTrainsTheSame(t *testing.T) {
	var w [2]map[string][]float32
	for k, on := range []bool{false, true} {
		c := tinyConfig(GRPO)
		c.Model.NumLayers = 2
		c.CheckpointActivations = on
		l := newLearner(t, c)
		if l.Model().CheckpointActivations != on {
			t.Fatalf("model's CheckpointActivations %v, want %v", l.Model().CheckpointActivations, on)
		}
		for range 2 {
			if _, err := l.Train(groupBatch()); err != nil {
				t.Fatal(err)
			}
		}
		w[k] = l.PolicyWeights()
	}
	if d := maxDiff(w[0], w[1]); d != 0 {
		t.Errorf("weights differ by %v with activation checkpointing", d)
	}
}

// TestDeviceReferenceModel: a KL reference from its own directory
// (models.reference) is loaded onto the policy's device, and the step's
// KL to it is the CPU learner's.
func TestDeviceReferenceModel(t *testing.T) {
	policy, ref, _ := refModels(t)
	c := tinyConfig(GRPO)
	c.Model, c.ModelDir, c.RefModelDir = nil, policy, ref
	c.Loss.KLCoef, c.Loss.KL = 0.1, rl.K3
	host := newLearner(t, c)
	c.Backend = cudatest.EmuBackend(t)
	dev := newLearner(t, c)
	if dev.ref.B != dev.Model().B || dev.ref.B.Name() != "cuda" {
		t.Fatalf("the reference runs on %s, the policy on %s", dev.ref.B.Name(), dev.Model().B.Name())
	}
	b := groupBatch()
	for step := range 2 {
		want, err := host.Train(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dev.Train(b)
		if err != nil {
			t.Fatal(err)
		}
		if step == 1 && want.RefKL == 0 {
			t.Fatal("the policy is still its reference after a step: the comparison cannot tell")
		}
		// The device's log probabilities agree with the CPU's to 1e-5
		// relative; the KL estimate is a mean of their differences.
		if math.Abs(got.RefKL-want.RefKL) > 1e-4*math.Abs(want.RefKL)+1e-6 || math.Abs(got.Loss-want.Loss) > 1e-4*math.Abs(want.Loss)+1e-6 {
			t.Errorf("step %d: KL %v, loss %v on the device; %v, %v on the CPU", step+1, got.RefKL, got.Loss, want.RefKL, want.Loss)
		}
	}
}

// TestActivationOptionsSurviveLoad: a learner resumed from a checkpoint
// keeps its activation options (checkpointing, bf16 storage) and steps as
// the one it was saved from, bit for bit; bf16 storage trains within its
// rounding of float32.
func TestActivationOptionsSurviveLoad(t *testing.T) {
	for _, opt := range []string{"checkpointing", "bf16"} {
		c := tinyConfig(GRPO)
		c.Model.NumLayers = 3
		c.CheckpointActivations, c.ActivationsBF16 = opt == "checkpointing", opt == "bf16"
		a := newLearner(t, c)
		if _, err := a.Train(groupBatch()); err != nil {
			t.Fatal(err)
		}
		dir := savedTo(t, a)
		r := loaded(t, c, dir)
		if m := r.Model(); m.CheckpointActivations != c.CheckpointActivations || m.ActivationsBF16 != c.ActivationsBF16 {
			t.Fatalf("%s: the loaded model has checkpointing %v, bf16 activations %v", opt, m.CheckpointActivations, m.ActivationsBF16)
		}
		for _, l := range []*Learner{a, r} {
			if _, err := l.Train(groupBatch()); err != nil {
				t.Fatal(err)
			}
		}
		if d := maxDiff(a.PolicyWeights(), r.PolicyWeights()); d != 0 {
			t.Errorf("%s: the resumed learner's weights differ by %v", opt, d)
		}
		if opt == "bf16" {
			plain := c
			plain.ActivationsBF16 = false
			p := newLearner(t, plain)
			for range 2 {
				if _, err := p.Train(groupBatch()); err != nil {
					t.Fatal(err)
				}
			}
			d := maxDiff(a.PolicyWeights(), p.PolicyWeights())
			// Two AdamW steps of lr 1e-2 (the test config): a gradient's sign
			// flip moves a weight by up to 2·lr a step.
			if d == 0 || d > 4*c.LR {
				t.Errorf("bf16 activations: weights differ from float32's by %v after two steps (want above 0, at most %v)", d, 4*c.LR)
			}
			t.Logf("bf16 activations: weights within %v of float32's after two steps", d)
		}
	}
}

// TestCloseReleasesTheDevice: Close gives back the device memory a
// learner on an (emulated) GPU holds, as its actor does when it stops.
func TestCloseReleasesTheDevice(t *testing.T) {
	c := tinyConfig(GRPO)
	c.Backend = cudatest.EmuBackend(t)
	a := newLearner(t, c)
	if _, err := a.Train(groupBatch()); err != nil {
		t.Fatal(err)
	}
	db, ok := a.Model().B.(*cuda.DeviceBackend)
	if !ok {
		t.Fatalf("the learner runs on %T, not the device backend", a.Model().B)
	}
	d := db.D.(*cuda.EmuDevice)
	if d.Used() == 0 {
		t.Fatal("a learner on the device holds no device memory")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := d.Used(); n != 0 {
		t.Errorf("after Close the device holds %d bytes", n)
	}
	cpuLearner := newLearner(t, tinyConfig(GRPO))
	if err := cpuLearner.Close(); err != nil {
		t.Errorf("Close on the CPU backend: %v", err)
	}
}

// TestOutOfMemoryNamesTheSettings: a step that runs the device out of
// memory fails with that error and the recipe settings that need less.
func TestOutOfMemoryNamesTheSettings(t *testing.T) {
	c := tinyConfig(GRPO)
	c.Backend = cudatest.EmuBackend(t)
	a := newLearner(t, c)
	d := a.Model().B.(*cuda.DeviceBackend).D.(*cuda.EmuDevice)
	d.Capacity = d.Used() + 4096
	_, err := a.Train(groupBatch())
	if !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Fatalf("a step on a full device: %v, want ErrOutOfMemory", err)
	}
	for _, s := range []string{"does not fit in the GPU's memory", fmt.Sprintf("algorithm.micro_batch, now %d", c.MicroBatchSeqs), "algorithm.activation_checkpointing: true", "placement.learner_shards"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not say %q: %v", s, err)
		}
	}
	if h := a.memoryHint(errors.New("loss is NaN")); h != "" {
		t.Errorf("another error gets the memory hint %q", h)
	}
}
