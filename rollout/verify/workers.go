package verify

import (
	"fmt"
	"runtime"

	"github.com/rlnode/rlnode/cluster"
)

// RunsPerCore bounds a sandbox's runs at once by the cores: the runs are
// CPU-bound, and past two per core more only pushes honest programs
// towards their wall-clock limit.
const RunsPerCore = 2

// MaxConcurrency is the most runs with lim a Sandbox lets go at once on
// this host, and why: RunsPerCore per core, and no more than the memory
// of this host (or of this process's memory cgroup, when that is less)
// holds at lim.RunMemoryBytes each (where runs get no cgroup that bound
// is the one a run is meant to keep, not one it is held to; RunBound).
func MaxConcurrency(lim Limits) (int, string) {
	cores := runtime.NumCPU()
	byCores := RunsPerCore * cores
	run := lim.RunMemoryBytes
	if run <= 0 {
		run = 2 * lim.MemoryBytes
	}
	mem, from := hostMemory()
	if mem <= 0 || run <= 0 {
		return byCores, fmt.Sprintf("%d per core × %d cores; this host's memory is unknown", RunsPerCore, cores)
	}
	byMemory := int(min(mem/run, 1<<20))
	why := fmt.Sprintf("%d per core × %d cores, and %d MiB (%s) / %d MiB per run", RunsPerCore, cores, mem>>20, from, run>>20)
	return max(1, min(byCores, byMemory)), why
}

// hostMemory is this host's memory, or its memory cgroup's limit where
// that is less (cluster.DetectMemory, as a node offers it), and where it
// was read; 0 when it cannot be read.
func hostMemory() (int64, string) {
	mem, from, err := cluster.DetectMemory()
	if err != nil {
		return 0, ""
	}
	return mem, from
}
