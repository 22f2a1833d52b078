// Package blas holds the CPU backend's dense kernels, starting with SGEMM.
//
// It owns single-precision matrix multiplication for the learner: Sgemm for
// one product, SgemmBatched for many small ones, and SgemmSerial for
// callers that already run independent products on every core (the CPU
// backend's attention). AVX512 reports the CPU feature for the backend's
// own vector loops.
// Both follow the GotoBLAS/BLIS layout: op(B) is copied ("packed") into
// panels of nr-column slivers shared by all threads, and a register-tiled
// micro-kernel in assembly (AVX-512 12×32 or AVX2+FMA 6×16 on amd64, chosen
// at start-up from CPUID) multiplies mr-row slivers of op(A) with them.
// Slivers of op(A) are packed too, except that the AVX-512 kernel reads
// them where they lie when op(A) = A. Products with at most sixteen rows of C
// (decoding, GEMV) skip packing and stream op(B) through AVX-512 dot or
// strip kernels. A pure-Go micro-kernel serves other architectures and
// CPUs without those features; tests force it to check it on amd64.
//
// Large products are split into tasks claimed by the caller and a pool of
// helper goroutines, up to Threads() of them (SetThreads); tiny ones run on
// the calling goroutine. Packing buffers and call records are recycled
// through free lists that survive garbage collection, so steady-state calls
// do not allocate.
//
// The package imports only the standard library and knows nothing of
// tensors or models: it sits under every tensor backend and is tested
// against a plain reference loop.
package blas
