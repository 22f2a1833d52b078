package cuda

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestPickGPU(t *testing.T) {
	for _, c := range []struct {
		name  string
		index int
		env   map[string]string
		count int
		want  int
		from  string
		err   string // a part of the error
	}{
		{name: "default", index: -1, count: 4, want: 0, from: "default"},
		{name: "recipe index", index: 2, count: 4, want: 2, from: "cuda:2"},
		{name: "recipe index past the devices", index: 2, count: 2, env: map[string]string{"CUDA_VISIBLE_DEVICES": "4,5"},
			err: "cuda:2: device index 2 out of range: 2 device(s) visible (CUDA_VISIBLE_DEVICES=4,5)"},
		{name: "recipe index beats Slurm", index: 1, count: 4, env: map[string]string{"SLURM_LOCALID": "3"}, want: 1, from: "cuda:1"},
		{name: "no device", index: -1, count: 0, env: map[string]string{"CUDA_VISIBLE_DEVICES": ""}, err: "no CUDA device visible"},
		{name: "slurm local id", index: -1, count: 4, env: map[string]string{"SLURM_LOCALID": "3", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, want: 3, from: "SLURM_LOCALID"},
		{name: "slurm bound one device per task", index: -1, count: 1, env: map[string]string{"SLURM_LOCALID": "3", "CUDA_VISIBLE_DEVICES": "3"}, want: 0, from: "default"},
		{name: "slurm local id past the devices", index: -1, count: 2, env: map[string]string{"SLURM_LOCALID": "2", "CUDA_VISIBLE_DEVICES": "0,1"},
			err: "SLURM_LOCALID=2: device index out of range: 2 device(s) visible (CUDA_VISIBLE_DEVICES=0,1)"},
		{name: "slurm local id not a number", index: -1, count: 2, env: map[string]string{"SLURM_LOCALID": "x"}, err: `SLURM_LOCALID="x": not a task index`},
		{name: "step gpus without visible devices", index: -1, count: 8, env: map[string]string{"SLURM_LOCALID": "1", "SLURM_STEP_GPUS": "4,6"}, want: 6, from: "SLURM_STEP_GPUS"},
		{name: "step gpus ignored under visible devices", index: -1, count: 2, env: map[string]string{"SLURM_LOCALID": "1", "SLURM_STEP_GPUS": "4,6", "CUDA_VISIBLE_DEVICES": "4,6"}, want: 1, from: "SLURM_LOCALID"},
		{name: "step gpus too few", index: -1, count: 8, env: map[string]string{"SLURM_LOCALID": "2", "SLURM_STEP_GPUS": "4,6"}, err: "SLURM_LOCALID=2: past the 2 GPU(s) of SLURM_STEP_GPUS=4,6"},
		{name: "step gpus bad entry", index: -1, count: 8, env: map[string]string{"SLURM_LOCALID": "0", "SLURM_STEP_GPUS": "a,6"}, err: `SLURM_STEP_GPUS=a,6: entry 0 ("a") is not a device index`},
		{name: "step gpus past the devices", index: -1, count: 4, env: map[string]string{"SLURM_LOCALID": "1", "SLURM_STEP_GPUS": "4,6"}, err: "SLURM_STEP_GPUS=4,6: device index 6 out of range: 4 device(s) visible"},
	} {
		t.Run(c.name, func(t *testing.T) {
			field := "cuda"
			if c.index >= 0 {
				field = "cuda:" + string(rune('0'+c.index))
			}
			got, from, err := PickGPU(GPUChoice{Field: field, Index: c.index, Count: c.count, Env: func(k string) string { return c.env[k] }})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("PickGPU: %d, %v; want an error with %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want || from != c.from {
				t.Fatalf("PickGPU: %d from %q, %v; want %d from %q", got, from, err, c.want, c.from)
			}
		})
	}
}

func TestParseDevice(t *testing.T) {
	for _, c := range []struct {
		in, kind string
		index    int
		bad      bool
	}{
		{in: "cuda", kind: "cuda", index: -1},
		{in: "cuda-bf16:3", kind: "cuda-bf16", index: 3},
		{in: "cpu", kind: "cpu", index: -1},
		{in: "cuda:-1", bad: true},
		{in: "cuda:1024", bad: true},
		{in: "cuda:x", bad: true},
		{in: "cpu:0", bad: true},
		{in: ":0", bad: true},
	} {
		kind, idx, err := ParseDevice(c.in)
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), c.in) {
				t.Errorf("ParseDevice(%q): %q, %d, %v; want an error naming it", c.in, kind, idx, err)
			}
			continue
		}
		if err != nil || kind != c.kind || idx != c.index {
			t.Errorf("ParseDevice(%q): %q, %d, %v; want %q, %d", c.in, kind, idx, err, c.kind, c.index)
		}
	}
}

// TestOnGPU: OpenGPU's errors name the GPU once, first, and keep what
// they wrap.
func TestOnGPU(t *testing.T) {
	for _, c := range []struct {
		index     int
		err, want string
	}{
		{0, "cuBLASLt workspace: out of memory", "GPU 0: cuBLASLt workspace: out of memory"},
		{0, "GPU 0: load norm.cu for sm_90: bad image", "GPU 0: load norm.cu for sm_90: bad image"},
		{0, "GPU 0 (H100): version too old", "GPU 0 (H100): version too old"},
		{1, "GPU 10: not loaded", "GPU 1: GPU 10: not loaded"},
	} {
		err := onGPU(c.index, fmt.Errorf("%s: %w", c.err, ErrOutOfMemory))
		if got := strings.TrimSuffix(err.Error(), ": "+ErrOutOfMemory.Error()); got != c.want || !errors.Is(err, ErrOutOfMemory) {
			t.Errorf("onGPU(%d, %q) = %q, want %q wrapping ErrOutOfMemory", c.index, c.err, err, c.want)
		}
	}
}
