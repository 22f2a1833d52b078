package cluster

import (
	"context"
	"fmt"
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

// DetectGPUs asks nvidia-smi for the host's NVIDIA GPUs. A host without
// nvidia-smi has none; a host whose nvidia-smi fails is an error, so a
// broken driver is not mistaken for a CPU-only host.
func DetectGPUs(ctx context.Context) ([]GPUInfo, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return nil, fmt.Errorf("detect GPUs: %s: %w", path, err)
	}
	return parseNvidiaSMI(string(out))
}

// parseNvidiaSMI parses `nvidia-smi --query-gpu=index,name,memory.total
// --format=csv,noheader,nounits` output: "0, NVIDIA H100 80GB HBM3, 81559".
func parseNvidiaSMI(out string) ([]GPUInfo, error) {
	var gpus []GPUInfo
	for n, line := range strings.Split(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 3 {
			return nil, fmt.Errorf("nvidia-smi line %d %q: want index, name, memory", n+1, line)
		}
		idx, err1 := strconv.Atoi(strings.TrimSpace(f[0]))
		mem, err2 := strconv.Atoi(strings.TrimSpace(f[len(f)-1]))
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("nvidia-smi line %d %q: index and memory must be integers", n+1, line)
		}
		name := strings.TrimSpace(strings.Join(f[1:len(f)-1], ","))
		gpus = append(gpus, GPUInfo{Index: idx, Name: name, MemoryMB: mem})
	}
	return gpus, nil
}
