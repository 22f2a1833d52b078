//go:build !amd64

package blas

func bestKernel() *microKernel { return &genericKernel }
