package cluster

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func detectHostMemory() (int64, string, error) {
	v, err := unix.SysctlUint64("hw.memsize")
	if err != nil || v == 0 || v > 1<<62 {
		return 0, "", fmt.Errorf("detect memory: sysctl hw.memsize: %d, %v", v, err)
	}
	return int64(v), "sysctl hw.memsize", nil
}
