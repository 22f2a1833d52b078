package weightsync

import (
	"strings"
	"testing"

	"github.com/rlnode/rlnode/rollout/engine"
)

// StaleResult refuses a result older than the staleness bound and names it.
func TestStaleResult(t *testing.T) {
	res := []engine.Result{{RequestID: "a", WeightVersion: 5}, {RequestID: "b", WeightVersion: 3}}
	if err := StaleResult(res, 3); err != nil {
		t.Errorf("bound 3: %v", err)
	}
	if err := StaleResult(res, 4); err == nil || !strings.Contains(err.Error(), "request b: weight version 3") {
		t.Errorf("bound 4: %v", err)
	}
}
