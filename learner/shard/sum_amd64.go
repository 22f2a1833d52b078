package shard

import "golang.org/x/sys/cpu"

// addBlock is how many floats one pass of the vector kernel adds.
const addBlock = 32

var haveAddKernel = cpu.X86.HasAVX2

// addKernel adds n floats (a multiple of addBlock) of src to dst with
// AVX2.
//
//go:noescape
func addKernel(dst, src *float32, n int)
