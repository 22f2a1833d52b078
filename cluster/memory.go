package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rlnode/rlnode/internal/bytesize"
)

// Memory is the well-known resource of a node's memory, in bytes (as
// Ray's "memory"): every node offers its host's memory (DetectMemory)
// unless told otherwise (Config.Memory, rlnode start/join --memory), and
// what an actor reserves of it is a lower bound of what it holds (the
// model weights a rollout actor keeps, a learner rank's weights,
// gradients and optimizer moments).
const Memory = "memory"

// NoMemory as Config.Memory makes a node offer no memory: only actors
// that reserve none are placed on it.
const NoMemory int64 = -1

// DetectMemory is the memory this process may use, in bytes: on Linux the
// host's (MemTotal of /proc/meminfo), or the memory limit of the
// process's control group where one is set and lower (cgroup v2
// memory.max along the group's path, cgroup v1 memory.limit_in_bytes):
// Slurm jobs and containers set one; on macOS hw.memsize. The string says
// where the figure comes from. It fails where none can be read (other
// systems).
func DetectMemory() (int64, string, error) { return detectHostMemory() }

// detectMemoryAt is DetectMemory over a proc and a cgroup file system
// mounted at the given roots (tests give fake ones).
func detectMemoryAt(proc, cgroupRoot string) (int64, string, error) {
	total, err := memTotal(filepath.Join(proc, "meminfo"))
	if err != nil {
		return 0, "", err
	}
	limit, where := cgroupLimit(filepath.Join(proc, "self", "cgroup"), cgroupRoot)
	if limit > 0 && limit < total {
		return limit, where, nil
	}
	return total, "MemTotal of " + filepath.Join(proc, "meminfo"), nil
}

func memTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("detect memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 2 && fields[1] == "kB" {
			if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil && kb > 0 && kb < math.MaxInt64/1024 {
				return kb * 1024, nil
			}
		}
		return 0, fmt.Errorf("detect memory: %s: MemTotal line %q: want a number of kB", path, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("detect memory: %s: %w", path, err)
	}
	return 0, fmt.Errorf("detect memory: %s: no MemTotal line", path)
}

// cgroupLimit is the lowest memory limit on the process's control group
// and its ancestors (0 where none is set or none can be read) and the
// file that sets it. A limit that cannot be read is no limit: the host's
// memory stands.
func cgroupLimit(selfCgroup, root string) (int64, string) {
	data, err := os.ReadFile(selfCgroup)
	if err != nil {
		return 0, ""
	}
	var best int64
	var where string
	consider := func(file string) {
		b, err := os.ReadFile(file)
		if err != nil {
			return
		}
		s := strings.TrimSpace(string(b))
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 { // "max": no limit
			return
		}
		if best == 0 || v < best {
			best, where = v, file
		}
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "": // cgroup v2
			dir, file = root, "memory.max"
		case hasController(parts[1], "memory"): // cgroup v1
			dir, file = filepath.Join(root, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		// The group and each ancestor up to the root of the mount: in a
		// container the path may be the host's and not exist here, so the
		// mount's root (the container's own group) is read as well.
		p := filepath.Clean("/" + parts[2])
		for {
			consider(filepath.Join(dir, p, file))
			if p == "/" {
				break
			}
			p = filepath.Dir(p)
		}
	}
	return best, where
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// ParseSize reads an amount of memory (bytesize.Parse): plain bytes, or
// a number with a unit: 64GiB, 500MB, 1.5G.
func ParseSize(s string) (int64, error) { return bytesize.Parse(s) }

// FormatBytes writes an amount of memory in binary units, as "23.4 GiB".
func FormatBytes(v float64) string { return bytesize.Format(v) }

// nodeMemory is what a node configured with cfgMemory offers.
func nodeMemory(cfgMemory int64) (bytes float64, from string, err error) {
	switch {
	case cfgMemory == NoMemory:
		return 0, "the configuration (none)", nil
	case cfgMemory > 0:
		return float64(cfgMemory), "the configuration", nil
	case cfgMemory < 0:
		return 0, "", fmt.Errorf("memory %d: want bytes > 0, 0 to detect, or NoMemory", cfgMemory)
	}
	v, where, err := DetectMemory()
	if err != nil {
		return 0, "", fmt.Errorf("%w; give the node's memory with --memory SIZE (Config.Memory)", err)
	}
	return float64(v), where, nil
}

var errMemoryResource = errors.New(`"memory" is the node's memory, not a custom resource: give it with --memory SIZE (Config.Memory)`)
