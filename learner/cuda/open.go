package cuda

import (
	"fmt"
	"os"
	"strings"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
)

// CheckBackend reports why a backend on device ("", "cpu", "cuda",
// "cuda-bf16", either cuda value with a device index: "cuda:1") cannot
// run on this host, naming the reason Available gives (no driver, no
// GPU, libraries missing or too old, an index past the devices this
// process sees); nil when it can.
func CheckBackend(device string) error {
	_, err := pickBackendGPU(device)
	return err
}

// OpenBackend opens the backend device names: the cpu backend for "" and
// "cpu", else a DeviceBackend on the GPU PickGPU chooses (the index the
// value gives, Slurm's allocation, or 0), with bf16 products for
// "cuda-bf16". The caller closes a DeviceBackend when done with it.
func OpenBackend(device string) (backend.Backend, error) {
	ord, err := pickBackendGPU(device)
	if err != nil {
		return nil, err
	}
	if ord < 0 {
		return cpu.New(), nil
	}
	gemm := F32
	if strings.HasPrefix(device, "cuda-bf16") {
		gemm = BF16
	}
	g, err := OpenGPU(ord)
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", device, err)
	}
	return NewDeviceBackend(g, gemm), nil
}

// pickBackendGPU is the GPU a backend on device opens, -1 for the CPU.
func pickBackendGPU(device string) (int, error) {
	kind, idx, err := ParseDevice(device)
	if err != nil {
		return -1, err
	}
	switch kind {
	case "", "cpu":
		return -1, nil
	case "cuda", "cuda-bf16":
		r := Available()
		if r.Err() != nil {
			msgs := make([]string, len(r.Problems))
			for i, p := range r.Problems {
				msgs[i] = p.Error()
			}
			return -1, fmt.Errorf("%s: the CUDA backend cannot run here: %s", device, strings.Join(msgs, "; "))
		}
		ord, _, err := PickGPU(GPUChoice{Field: device, Index: idx, Env: os.Getenv, Count: len(r.Devices)})
		if err != nil && idx < 0 {
			err = fmt.Errorf("%s: %w", device, err)
		}
		if err != nil {
			return -1, err
		}
		return ord, nil
	}
	return -1, fmt.Errorf("device %q: want cpu, cuda or cuda-bf16", device)
}
