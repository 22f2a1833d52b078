package cuda

// planCache keeps up to max values by key, built on first use: GPU.Gemm's
// cuBLASLt descriptors and chosen algorithm per product shape, so a
// training step, which repeats the same few dozen shapes, asks cuBLASLt's
// heuristic once per shape instead of once per product. When full it
// destroys every value and starts over: the shapes of a run are few, and a
// run that keeps making new ones (rows of every length) stays bounded.
type planCache[K comparable, V any] struct {
	max     int
	m       map[K]V
	destroy func(V)
	// Hits and Misses count lookups served and values built.
	Hits, Misses int64
}

func newPlanCache[K comparable, V any](max int, destroy func(V)) *planCache[K, V] {
	return &planCache[K, V]{max: max, m: map[K]V{}, destroy: destroy}
}

// get returns k's value, building it with build on a miss. A failed build
// is not kept.
func (c *planCache[K, V]) get(k K, build func() (V, error)) (V, error) {
	if v, ok := c.m[k]; ok {
		c.Hits++
		return v, nil
	}
	v, err := build()
	if err != nil {
		return v, err
	}
	c.Misses++
	if len(c.m) >= c.max {
		c.clear()
	}
	c.m[k] = v
	return v, nil
}

// clear destroys every value.
func (c *planCache[K, V]) clear() {
	for k, v := range c.m {
		c.destroy(v)
		delete(c.m, k)
	}
}
