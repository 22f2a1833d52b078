package recipes

import (
	"strings"
	"testing"
)

// TestLearnerDeviceIndex: cuda and cuda-bf16 may name a device index;
// anything else after a colon is refused at the field.
func TestLearnerDeviceIndex(t *testing.T) {
	for _, c := range []struct {
		v   string
		err string
	}{
		{v: "cuda:1"},
		{v: "cuda-bf16:0"},
		{v: "cuda:x", err: `placement.learner_device: "cuda:x": the device index after cuda: is not 0..1023`},
		{v: "cuda:2048", err: `the device index after cuda: is not 0..1023`},
		{v: "cpu:0", err: `placement.learner_device: "cpu": want one of cuda, cuda-bf16`},
		{v: "tpu:0", err: `placement.learner_device: "tpu": want one of cuda, cuda-bf16`},
	} {
		_, err := Load("quickstart", []string{"placement.learner_device=" + c.v})
		if c.err == "" {
			if err != nil {
				t.Errorf("%s: %v", c.v, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v; want an error with %q", c.v, err, c.err)
		}
	}
}

func TestActivationCheckpointingField(t *testing.T) {
	l, err := Load("quickstart", []string{"algorithm.activation_checkpointing=true"})
	if err != nil {
		t.Fatal(err)
	}
	if !l.Recipe.Algorithm.ActivationCheckpointing {
		t.Error("algorithm.activation_checkpointing=true did not set the field")
	}
	if _, err := Load("quickstart", []string{"algorithm.activation_checkpointing=maybe"}); err == nil || !strings.Contains(err.Error(), "activation_checkpointing") {
		t.Errorf("activation_checkpointing=maybe: %v", err)
	}
}
