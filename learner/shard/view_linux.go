//go:build linux

package shard

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// view is a rank's read-only window on its group's results (view.go).
type view struct {
	mem   []byte
	data  []float32     // the first total elements
	fixes [][]ownedSpan // by bucket: spans of shared pages, copied
}

func (v *view) close() {
	if v != nil && v.mem != nil {
		_ = unix.Munmap(v.mem)
		v.mem, v.data = nil, nil
	}
}

// newView maps a view of the first total elements of the group's buffers:
// a private anonymous range whose single-owner pages are then replaced by
// the owners' pages (mremap of a shared mapping with no old length maps
// the same pages again), made read-only.
func (s *shmGroup) newView(total int) (*view, error) {
	pageBytes := os.Getpagesize()
	if total <= 0 || total > s.floats {
		return nil, fmt.Errorf("view of %d elements of buffers of %d", total, s.floats)
	}
	runs, fixes := viewLayout(total, s.bucket, s.size, pageBytes/4)
	// Each run is a mapping of its own, and so may be the private pages
	// between two: keep well inside the process's limit on mappings.
	if limit := maxMapCount(); 2*len(runs) > limit/4 {
		return nil, fmt.Errorf("a view of %d elements would take %d mappings, over a quarter of vm.max_map_count (%d)", total, 2*len(runs), limit)
	}
	size := (4*total + pageBytes - 1) &^ (pageBytes - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("reserve a view of %d bytes: %w", size, err)
	}
	v := &view{mem: mem, data: floatsOf(mem[:4*total]), fixes: fixes}
	for _, r := range runs {
		lo := 4 * r.lo
		n := (4*(r.hi-r.lo) + pageBytes - 1) &^ (pageBytes - 1)
		src := uintptr(unsafe.Pointer(&s.bufs[r.owner][r.lo]))
		dst := uintptr(unsafe.Pointer(&mem[lo]))
		got, _, e := unix.Syscall6(unix.SYS_MREMAP, src, 0, uintptr(n), unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED, dst, 0)
		if e != 0 || got != dst {
			v.close()
			return nil, fmt.Errorf("map %d bytes of %s's buffer into a view: %v", n, s.peer(r.owner), e)
		}
		if err := unix.Mprotect(mem[lo:lo+n], unix.PROT_READ); err != nil {
			v.close()
			return nil, fmt.Errorf("make a view read-only: %w", err)
		}
	}
	return v, nil
}

// maxMapCount is the kernel's limit on a process's mappings
// (vm.max_map_count; its default where it cannot be read).
func maxMapCount() int {
	b, err := os.ReadFile("/proc/sys/vm/max_map_count")
	if err != nil {
		return 65530
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 65530
	}
	return n
}
