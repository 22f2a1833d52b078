package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// GPUInfo describes one GPU of a node.
type GPUInfo struct {
	Index    int    `msgpack:"i" json:"index"`
	Name     string `msgpack:"n" json:"name"`
	MemoryMB int    `msgpack:"m" json:"memory_mb"`
}

// DetectGPUs asks nvidia-smi for the host's NVIDIA GPUs that this process
// may use: where CUDA_VISIBLE_DEVICES is set, those it lists, each with
// its CUDA ordinal (its place in that list) as Index, the number the
// process opens (cuda:N, TaskGPUs); else every GPU, by nvidia-smi's index.
// A host without nvidia-smi has none; a host whose nvidia-smi fails is an
// error, so a broken driver is not mistaken for a CPU-only host.
func DetectGPUs(ctx context.Context) ([]GPUInfo, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return nil, fmt.Errorf("detect GPUs: %s: %w", path, err)
	}
	all, err := parseNvidiaSMI(string(out))
	if err != nil {
		return nil, err
	}
	env, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	return visibleGPUs(all, env, set), nil
}

// smiGPU is one line of nvidia-smi's answer.
type smiGPU struct {
	GPUInfo
	uuid string
}

// parseNvidiaSMI parses `nvidia-smi --query-gpu=index,uuid,name,memory.total
// --format=csv,noheader,nounits` output: "0, GPU-8d1f..., NVIDIA H100 80GB HBM3, 81559".
func parseNvidiaSMI(out string) ([]smiGPU, error) {
	var gpus []smiGPU
	for n, line := range strings.Split(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 4 {
			return nil, fmt.Errorf("nvidia-smi line %d %q: want index, uuid, name, memory", n+1, line)
		}
		idx, err1 := strconv.Atoi(strings.TrimSpace(f[0]))
		mem, err2 := strconv.Atoi(strings.TrimSpace(f[len(f)-1]))
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("nvidia-smi line %d %q: index and memory must be integers", n+1, line)
		}
		name := strings.TrimSpace(strings.Join(f[2:len(f)-1], ","))
		gpus = append(gpus, smiGPU{GPUInfo: GPUInfo{Index: idx, Name: name, MemoryMB: mem}, uuid: strings.TrimSpace(f[1])})
	}
	return gpus, nil
}

// visibleGPUs is the GPUs of all that CUDA_VISIBLE_DEVICES (env, when
// set) leaves this process, in its order, each indexed by its CUDA
// ordinal. As CUDA reads it, an entry is a device index or a UUID (or a
// unique prefix of one, "GPU-8d1f"), and the list ends at the first entry
// that names no device (so "", "-1" and "NoDevFiles" leave none); MIG
// instances are not matched (the list ends there).
func visibleGPUs(all []smiGPU, env string, set bool) []GPUInfo {
	var out []GPUInfo
	if !set {
		for _, g := range all {
			out = append(out, g.GPUInfo)
		}
		return out
	}
	used := map[int]bool{}
	for _, e := range strings.Split(env, ",") {
		e = strings.TrimSpace(e)
		found := -1
		if i, err := strconv.Atoi(e); err == nil {
			for k, g := range all {
				if g.Index == i {
					found = k
				}
			}
		} else if strings.HasPrefix(e, "GPU-") {
			for k, g := range all {
				if strings.HasPrefix(g.uuid, e) {
					if found >= 0 {
						found = -1 // ambiguous
						break
					}
					found = k
				}
			}
		}
		if found < 0 || used[found] {
			break
		}
		used[found] = true
		g := all[found].GPUInfo
		g.Index = len(out)
		out = append(out, g)
	}
	return out
}
