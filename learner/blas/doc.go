// Package blas holds the CPU backend's dense kernels, starting with SGEMM.
//
// It owns single-precision matrix multiplication for the learner: Sgemm for
// one product and SgemmBatched for the many small products of attention.
// Both follow the GotoBLAS/BLIS layout: op(A) and op(B) are copied ("packed")
// into cache-sized contiguous panels, and a register-tiled micro-kernel
// written in assembly (AVX-512 or AVX2+FMA on amd64, chosen at start-up from
// CPUID) multiplies them. A pure-Go micro-kernel serves other architectures
// and CPUs without those features. Large products are split over a pool of
// goroutines (SetThreads); tiny ones run on the calling goroutine.
//
// The package does no allocation in steady state: packing buffers and call
// records are recycled through free lists that survive garbage collection.
// It must not import anything outside the standard library: it sits under
// every tensor backend and is tested against a plain reference loop.
package blas
