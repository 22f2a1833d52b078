//go:build !amd64

package shard

const addBlock = 32

const haveAddKernel = false

func addKernel(dst, src *float32, n int) { panic("shard: no vector add kernel on this platform") }
