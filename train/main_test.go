package train

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/rollout/vllm"
)

// testVLLMCommand, in a child node's environment, makes it launch vLLM
// servers with that command (as rlnode join --vllm does).
const testVLLMCommand = "RLNODE_TEST_VLLM_COMMAND"

// Child cluster nodes (internal/nodetest) are this test binary run again.
func TestMain(m *testing.M) {
	if c := os.Getenv(testVLLMCommand); c != "" {
		if err := vllm.OfferServers(strings.Fields(c)); err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
	}
	nodetest.Main(m)
}
