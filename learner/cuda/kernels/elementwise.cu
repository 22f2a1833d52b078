#include "common.cuh"

// Element-wise kernels: one thread per element, grid-stride loops, any
// launch shape.

__device__ __forceinline__ float sigmoidf(float x) { return 1.f / (1.f + expf(-x)); }

// out = silu(gate) * up.
template <typename T>
__device__ void swiglu_fwd(T *out, const T *gate, const T *up, long n) {
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		float g = ld(gate, i);
		st(out, i, g * sigmoidf(g) * ld(up, i));
	}
}

extern "C" __global__ void swiglu_fwd_f32(float *out, const float *gate, const float *up, long n) { swiglu_fwd(out, gate, up, n); }
extern "C" __global__ void swiglu_fwd_bf16(bf16 *out, const bf16 *gate, const bf16 *up, long n) { swiglu_fwd(out, gate, up, n); }

// dGate = dOut*up*sig(g)*(1 + g*(1 - sig(g))), dUp = dOut*silu(g); both
// overwritten.
template <typename T>
__device__ void swiglu_bwd(T *dgate, T *dup, const T *dout, const T *gate, const T *up, long n) {
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		float g = ld(gate, i), d = ld(dout, i), s = sigmoidf(g);
		st(dgate, i, d * ld(up, i) * s * (1.f + g * (1.f - s)));
		st(dup, i, d * g * s);
	}
}

extern "C" __global__ void swiglu_bwd_f32(float *dgate, float *dup, const float *dout, const float *gate, const float *up, long n) {
	swiglu_bwd(dgate, dup, dout, gate, up, n);
}
extern "C" __global__ void swiglu_bwd_bf16(bf16 *dgate, bf16 *dup, const bf16 *dout, const bf16 *gate, const bf16 *up, long n) {
	swiglu_bwd(dgate, dup, dout, gate, up, n);
}

extern "C" __global__ void cast_f32_bf16(bf16 *dst, const float *src, long n) {
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) dst[i] = f32_to_bf16(src[i]);
}
extern "C" __global__ void cast_bf16_f32(float *dst, const bf16 *src, long n) {
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) dst[i] = bf16_to_f32(src[i]);
}

// RoPE in place, "rotate half" layout: pairs (i, i+half) of each head
// rotate by pos*theta^(-2i/headDim); sign -1 is the inverse (the backward
// pass). One thread per (row, head, i). The angle is computed as the CPU
// backend and Hugging Face do: the inverse frequency and its product with
// the position in fp32, cos and sin in fp64.
template <typename T>
__device__ void rope(T *x, const int *pos, int rows, int heads, int headDim, double theta, float sign) {
	int half = headDim / 2;
	long n = (long)rows * heads * half;
	for (long u = (long)blockIdx.x * blockDim.x + threadIdx.x; u < n; u += (long)gridDim.x * blockDim.x) {
		int i = (int)(u % half);
		long rh = u / half; // row*heads + head
		long row = rh / heads;
		float inv = (float)(1.0 / pow(theta, (double)(2 * i) / (double)headDim));
		double a = (double)((float)pos[row] * inv);
		float c = (float)cos(a), s = sign * (float)sin(a);
		long o = rh * headDim + i;
		float x1 = ld(x, o), x2 = ld(x, o + half);
		st(x, o, x1 * c - x2 * s);
		st(x, o + half, x2 * c + x1 * s);
	}
}

extern "C" __global__ void rope_f32(float *x, const int *pos, int rows, int heads, int headDim, double theta, float sign) {
	rope(x, pos, rows, heads, headDim, theta, sign);
}
extern "C" __global__ void rope_bf16(bf16 *x, const int *pos, int rows, int heads, int headDim, double theta, float sign) {
	rope(x, pos, rows, heads, headDim, theta, sign);
}
