package actor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// HostMemory is the memory this process may use, in bytes: on Linux the
// host's total (sysinfo), or the memory.max of the process's cgroup v2
// group or an ancestor where one is set and lower (Slurm jobs and
// containers set one); 0 where it cannot be read. It bounds sizes that
// other nodes announce before anything is allocated for them.
func HostMemory() int64 {
	hostMemOnce.Do(func() { hostMem = readHostMemory() })
	return hostMem
}

var (
	hostMemOnce sync.Once
	hostMem     int64
)

// cgroupMemoryLimit is the lowest cgroup v2 memory.max on the process's
// group and its ancestors under root, or 0 where none is set or readable.
func cgroupMemoryLimit(selfCgroup, root string) int64 {
	data, err := os.ReadFile(selfCgroup)
	if err != nil {
		return 0
	}
	var best int64
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		for dir := filepath.Clean("/" + rest); ; dir = filepath.Dir(dir) {
			b, err := os.ReadFile(filepath.Join(root, dir, "memory.max"))
			if err == nil {
				v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				if err == nil && v > 0 && (best == 0 || v < best) { // "max": no limit
					best = v
				}
			}
			if dir == "/" {
				break
			}
		}
	}
	return best
}
