package cuda

import (
	"fmt"
	"strconv"
	"strings"
)

// GPUChoice is what decides which GPU a learner shard opens.
type GPUChoice struct {
	// Field names the setting Index came from in messages
	// ("placement.learner_device").
	Field string
	// Index is the device the recipe names (cuda:N), or -1.
	Index int
	// Env reads the environment: SLURM_LOCALID, SLURM_STEP_GPUS and
	// CUDA_VISIBLE_DEVICES.
	Env func(string) string
	// Count is how many devices the driver shows this process (after
	// CUDA_VISIBLE_DEVICES).
	Count int
}

// PickGPU returns the device ordinal to open and where it came from:
// the recipe's index; else, under Slurm with several devices visible,
// the task's SLURM_LOCALID-th device (of SLURM_STEP_GPUS, by its physical
// index, when Slurm did not set CUDA_VISIBLE_DEVICES); else device 0. An
// index at or past Count, or a variable that does not parse, is an error
// naming the field or variable and what the process sees.
func PickGPU(c GPUChoice) (int, string, error) {
	seen := func() string {
		s := fmt.Sprintf("%d device(s) visible", c.Count)
		if v := c.Env("CUDA_VISIBLE_DEVICES"); v != "" {
			s += " (CUDA_VISIBLE_DEVICES=" + v + ")"
		}
		return s
	}
	if c.Count < 1 {
		return 0, "", fmt.Errorf("no CUDA device visible (CUDA_VISIBLE_DEVICES=%q)", c.Env("CUDA_VISIBLE_DEVICES"))
	}
	if c.Index >= 0 {
		if c.Index >= c.Count {
			return 0, "", fmt.Errorf("%s: device index %d out of range: %s", c.Field, c.Index, seen())
		}
		return c.Index, c.Field, nil
	}
	local := c.Env("SLURM_LOCALID")
	if local == "" || c.Count == 1 {
		return 0, "default", nil
	}
	l, err := strconv.Atoi(local)
	if err != nil || l < 0 {
		return 0, "", fmt.Errorf("SLURM_LOCALID=%q: not a task index", local)
	}
	if step := c.Env("SLURM_STEP_GPUS"); step != "" && c.Env("CUDA_VISIBLE_DEVICES") == "" {
		ids := strings.Split(step, ",")
		if l >= len(ids) {
			return 0, "", fmt.Errorf("SLURM_LOCALID=%d: past the %d GPU(s) of SLURM_STEP_GPUS=%s", l, len(ids), step)
		}
		id, err := strconv.Atoi(strings.TrimSpace(ids[l]))
		if err != nil || id < 0 {
			return 0, "", fmt.Errorf("SLURM_STEP_GPUS=%s: entry %d (%q) is not a device index", step, l, ids[l])
		}
		if id >= c.Count {
			return 0, "", fmt.Errorf("SLURM_STEP_GPUS=%s: device index %d out of range: %s", step, id, seen())
		}
		return id, "SLURM_STEP_GPUS", nil
	}
	if l >= c.Count {
		return 0, "", fmt.Errorf("SLURM_LOCALID=%d: device index out of range: %s", l, seen())
	}
	return l, "SLURM_LOCALID", nil
}

// ParseDevice splits a learner device value ("cuda", "cuda-bf16:1") into
// its kind and device index (-1 when none is given).
func ParseDevice(v string) (kind string, index int, err error) {
	kind, idx, ok := strings.Cut(v, ":")
	if !ok {
		return kind, -1, nil
	}
	n, err := strconv.Atoi(idx)
	if err != nil || n < 0 || n > 1023 || kind == "cpu" || kind == "" {
		return kind, -1, fmt.Errorf("device %q: want cuda:N or cuda-bf16:N with N a device index 0..1023", v)
	}
	return kind, n, nil
}
