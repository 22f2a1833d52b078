package cluster

func detectHostMemory() (int64, string, error) { return detectMemoryAt("/proc", "/sys/fs/cgroup") }
