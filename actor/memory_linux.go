package actor

import "syscall"

func readHostMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	total := int64(si.Totalram) * int64(si.Unit)
	if lim := cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup"); lim > 0 && lim < total {
		return lim
	}
	return total
}
