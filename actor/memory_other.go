//go:build !linux

package actor

func readHostMemory() int64 { return 0 }
