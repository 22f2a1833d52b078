//go:build !amd64

package blas

func bestKernel() *microKernel { return &genericKernel }

// AVX512 is false off amd64.
func AVX512() bool { return false }

// AVX2 is false off amd64.
func AVX2() bool { return false }
