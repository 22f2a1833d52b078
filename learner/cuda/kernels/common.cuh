// Helpers shared by every kernel. The kernels are compiled by NVRTC for the
// GPU and by the host C++ compiler under emu/cuda_emu.h for the CPU
// emulation, so they use only what both provide: no CUDA headers, bf16 as
// raw bits with our own conversions, reductions through warp shuffles and
// a 32-float shared scratch.
#ifndef RLNODE_COMMON_CUH
#define RLNODE_COMMON_CUH

// NVRTC has no math.h, so no INFINITY.
#define NEG_INF __uint_as_float(0xff800000u)

// bf16 values travel as their 16 bits; arithmetic is in fp32.
typedef unsigned short bf16;

__device__ __forceinline__ float bf16_to_f32(bf16 h) { return __uint_as_float(((unsigned)h) << 16); }

// Round to nearest even; NaN stays a (quiet) NaN.
__device__ __forceinline__ bf16 f32_to_bf16(float f) {
	unsigned u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (bf16)(u >> 16);
}

__device__ __forceinline__ float ld(const float *p, long i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16 *p, long i) { return bf16_to_f32(p[i]); }
__device__ __forceinline__ void st(float *p, long i, float v) { p[i] = v; }
__device__ __forceinline__ void st(bf16 *p, long i, float v) { p[i] = f32_to_bf16(v); }

__device__ __forceinline__ float warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sum returns the sum of v over the block to every thread. blockDim.x
// is a multiple of 32; red holds 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float *red) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	v = warp_sum(v);
	if (lane == 0) red[warp] = v;
	__syncthreads();
	v = lane < warps ? red[lane] : 0.f;
	v = warp_sum(v);
	__syncthreads(); // red is free again
	return v;
}

__device__ __forceinline__ float block_max(float v, float *red) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	v = warp_max(v);
	if (lane == 0) red[warp] = v;
	__syncthreads();
	v = lane < warps ? red[lane] : NEG_INF;
	v = warp_max(v);
	__syncthreads();
	return v;
}

// pack_bf16 packs two floats as bf16 into one 32-bit register, lo in the
// low half (an mma fragment's element order).
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) { return (unsigned)f32_to_bf16(lo) | (unsigned)f32_to_bf16(hi) << 16; }

#ifndef RLNODE_CUDA_EMU_H
// mma_bf16_16816: D = A·B + C on the tensor cores, one warp, A 16×16
// (row-major fragments), B 16×8 (column), C and D 16×8 in fp32; the
// emulation's version in emu/cuda_emu.h spells out the fragment layout.
__device__ __forceinline__ void mma_bf16_16816(float *c, const unsigned *a, const unsigned *b) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// GRID_STRIDE runs its body for every i < n over any launch shape.
#define GRID_STRIDE(i, n) for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long)gridDim.x * blockDim.x)

#endif
