//go:build !linux && !darwin

package cluster

import (
	"fmt"
	"runtime"
)

func detectHostMemory() (int64, string, error) {
	return 0, "", fmt.Errorf("detecting memory is not supported on %s", runtime.GOOS)
}
