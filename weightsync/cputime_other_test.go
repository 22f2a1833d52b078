//go:build !unix

package weightsync

import "time"

// cpuTime is 0 where the system does not say.
func cpuTime() time.Duration { return 0 }
