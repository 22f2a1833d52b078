package cuda

import (
	"errors"
	"slices"
	"testing"
)

func TestPlanCache(t *testing.T) {
	var destroyed []int
	c := newPlanCache[string, int](2, func(v int) { destroyed = append(destroyed, v) })
	builds := 0
	build := func(v int) func() (int, error) {
		return func() (int, error) { builds++; return v, nil }
	}
	for range 3 {
		if v, err := c.get("a", build(1)); err != nil || v != 1 {
			t.Fatalf("a: %d, %v", v, err)
		}
	}
	if builds != 1 || c.Hits != 2 || c.Misses != 1 {
		t.Fatalf("after three lookups of one key: %d builds, %d hits, %d misses", builds, c.Hits, c.Misses)
	}
	// A failed build is reported and not kept: the next lookup builds again.
	boom := errors.New("no algorithm")
	if _, err := c.get("b", func() (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("failed build: %v", err)
	}
	if v, err := c.get("b", build(2)); err != nil || v != 2 {
		t.Fatalf("b after a failure: %d, %v", v, err)
	}
	if len(destroyed) != 0 {
		t.Fatalf("destroyed %v before the cache was full", destroyed)
	}
	// A third key over a cache of two destroys both and keeps the new one.
	if _, err := c.get("c", build(3)); err != nil {
		t.Fatal(err)
	}
	slices.Sort(destroyed)
	if !slices.Equal(destroyed, []int{1, 2}) || len(c.m) != 1 {
		t.Fatalf("full cache: destroyed %v, %d kept", destroyed, len(c.m))
	}
	c.clear()
	if !slices.Equal(destroyed, []int{1, 2, 3}) || len(c.m) != 0 {
		t.Fatalf("clear: destroyed %v, %d kept", destroyed, len(c.m))
	}
}
