//go:build !amd64

package blas

func testKernels() []*microKernel { return []*microKernel{&genericKernel} }
