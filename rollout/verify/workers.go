package verify

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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
	why := fmt.Sprintf("%d per core × %d cores, and %d MiB of %s / %d MiB per run", RunsPerCore, cores, mem>>20, from, run>>20)
	return max(1, min(byCores, byMemory)), why
}

// hostMemory is this host's memory (MemTotal), or its memory cgroup's
// limit where that is less, and which of them it is.
func hostMemory() (int64, string) {
	var total int64
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				total = kb << 10
			}
		}
		f.Close()
	}
	mem, from := total, "memory"
	if limit := cgroupMemoryLimit(); limit > 0 && (mem <= 0 || limit < mem) {
		mem, from = limit, "this process's memory cgroup limit"
	}
	return mem, from
}

// cgroupMemoryLimit is the memory limit of this process's cgroup (v1
// memory.limit_in_bytes, v2 memory.max), 0 when it has none or none can
// be read.
func cgroupMemoryLimit() int64 {
	paths, err := selfCgroups()
	if err != nil {
		return 0
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return 0
	}
	file, m, path := "memory.limit_in_bytes", mounts["memory"], paths["memory"]
	if _, v1 := mounts["memory"]; !v1 {
		file, m, path = "memory.max", mounts[""], paths[""]
	}
	dir, err := m.dir(path)
	if err != nil || m.point == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 || v >= 1<<62 {
		return 0 // "max", or v1's "no limit" (near 2^63)
	}
	return v
}
