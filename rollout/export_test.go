package rollout

import "github.com/rlnode/rlnode/rollout/engine"

// Chunks and ResultBytes expose the pool's chunking to its external tests.
var (
	Chunks      = func(reqs []engine.Request, size, budget int) []chunk { return chunks(reqs, size, budget) }
	ResultBytes = resultBytes
)
