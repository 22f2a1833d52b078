package recipes

import (
	"strings"
	"testing"
)

// TestDeviceIndex: placement.learner_device and an engine's device take
// cpu, cuda and cuda-bf16, the last two with a device index; anything
// else is refused at the field.
func TestDeviceIndex(t *testing.T) {
	for _, field := range []string{"placement.learner_device", "engines.policy.device"} {
		for _, c := range []struct {
			v   string
			err string
		}{
			{v: "cpu"},
			{v: "cuda:1"},
			{v: "cuda-bf16:0"},
			{v: "gpu", err: field + `: "gpu": want one of cpu, cuda, cuda-bf16`},
			{v: "cuda:x", err: field + `: "cuda:x": the device index after cuda: is not 0..1023`},
			{v: "cuda:2048", err: `the device index after cuda: is not 0..1023`},
			{v: "cpu:0", err: field + `: "cpu": want one of cuda, cuda-bf16`},
			{v: "tpu:0", err: field + `: "tpu": want one of cuda, cuda-bf16`},
		} {
			_, err := Load("quickstart", []string{field + "=" + c.v})
			if c.err == "" {
				if err != nil {
					t.Errorf("%s=%s: %v", field, c.v, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s=%s: %v; want an error with %q", field, c.v, err, c.err)
			}
		}
	}
}

// TestEngineDeviceNeedsNative: vLLM servers run on their own devices.
func TestEngineDeviceNeedsNative(t *testing.T) {
	_, err := Load("quickstart", []string{"engines.policy.device=cuda", "engines.policy.kind=vllm",
		"engines.policy.vllm={servers: [http://127.0.0.1:8000], model: m}"})
	if err == nil || !strings.Contains(err.Error(), `engines.policy.device: "cuda" is for the native engine`) {
		t.Errorf("device on a vllm engine: %v", err)
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
