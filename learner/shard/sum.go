package shard

// addTo adds src to dst element by element (dst[i] += src[i] for i below
// len(dst); src must be at least as long): the reduce-scatter's sum. Each
// element is one IEEE addition, as in the scalar loop, so the vector
// kernels give the same bits.
func addTo(dst, src []float32) {
	src = src[:len(dst)]
	n := 0
	if len(dst) >= addBlock && haveAddKernel {
		n = len(dst) &^ (addBlock - 1)
		addKernel(&dst[0], &src[0], n)
	}
	addScalar(dst[n:], src[n:])
}

func addScalar(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}
