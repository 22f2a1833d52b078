package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// TestPoolSpreadsTies: calls that find every replica idle (light traffic,
// one call at a time) go round the replicas; they all went to replica 0.
func TestPoolSpreadsTies(t *testing.T) {
	n, err := Start(context.Background(), Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var hs []*Handle
	for range 3 {
		h, err := n.Spawn(ctx, "test.counter", SpawnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	pool, err := NewPool(hs...)
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		if _, err := pool.Call(ctx, Add{N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for i, h := range hs {
		v, err := h.Call(ctx, WhereAreYou{})
		if err != nil {
			t.Fatal(err)
		}
		if s := v.(Sum); s.N != 2 {
			t.Errorf("replica %d took %d of 6 calls made one at a time, want 2 each", i, s.N)
		}
	}
}
