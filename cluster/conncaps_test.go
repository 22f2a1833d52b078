package cluster

import (
	"context"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/actor"
)

// A cap per address below zero or above MaxConnsPerAddr is refused before
// anything listens, naming the port.
func TestConnCapsBounded(t *testing.T) {
	for _, c := range []struct {
		caps ConnCaps
		says string
	}{
		{ConnCaps{Gossip: -1}, "on the gossip port: -1: want 1 to 65536"},
		{ConnCaps{Actor: MaxConnsPerAddr + 1}, "on the actor port: 65537: want 1 to 65536"},
		{ConnCaps{Control: -5}, "on the control port: -5"},
	} {
		_, err := Start(context.Background(), Config{Bind: "127.0.0.1:0", ConnsPerAddr: c.caps, Logger: actor.DiscardLogger()})
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want %q", c.caps, err, c.says)
		}
	}
}
