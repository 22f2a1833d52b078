package train

import (
	"testing"

	"github.com/rlnode/rlnode/internal/nodetest"
)

// Child cluster nodes (internal/nodetest) are this test binary run again.
func TestMain(m *testing.M) { nodetest.Main(m) }
