#include "common.cuh"

// RMSNorm over rows: one block per row (grid rows), any multiple of 32
// threads. out = x * rstd * w with rstd = 1/sqrt(mean(x²) + eps).
template <typename T>
__device__ void rmsnorm_fwd(T *out, float *rstd, const T *x, const T *w, int cols, float eps) {
	__shared__ float red[32];
	long row = blockIdx.x;
	const T *xr = x + row * cols;
	float ss = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) {
		float v = ld(xr, j);
		ss += v * v;
	}
	ss = block_sum(ss, red);
	float s = 1.f / sqrtf(ss / (float)cols + eps);
	if (threadIdx.x == 0) rstd[row] = s;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) st(out, row * cols + j, ld(xr, j) * s * ld(w, j));
}

extern "C" __global__ void rmsnorm_fwd_f32(float *out, float *rstd, const float *x, const float *w, int rows, int cols, float eps) {
	rmsnorm_fwd(out, rstd, x, w, cols, eps);
}
extern "C" __global__ void rmsnorm_fwd_bf16(bf16 *out, float *rstd, const bf16 *x, const bf16 *w, int rows, int cols, float eps) {
	rmsnorm_fwd(out, rstd, x, w, cols, eps);
}

// dx += s*(dy*w - x*c), c = s²·mean(dy*w*x): one block per row.
template <typename T>
__device__ void rmsnorm_bwd_dx(T *dx, const T *dy, const T *x, const T *w, const float *rstd, int cols) {
	__shared__ float red[32];
	long row = blockIdx.x;
	long o = row * cols;
	float s = rstd[row];
	float d = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) d += ld(dy, o + j) * ld(w, j) * ld(x, o + j);
	d = block_sum(d, red);
	float c = d * s * s / (float)cols;
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		st(dx, o + j, ld(dx, o + j) + s * (ld(dy, o + j) * ld(w, j) - ld(x, o + j) * c));
}

extern "C" __global__ void rmsnorm_bwd_dx_f32(float *dx, const float *dy, const float *x, const float *w, const float *rstd, int rows, int cols) {
	rmsnorm_bwd_dx(dx, dy, x, w, rstd, cols);
}
extern "C" __global__ void rmsnorm_bwd_dx_bf16(bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *w, const float *rstd, int rows, int cols) {
	rmsnorm_bwd_dx(dx, dy, x, w, rstd, cols);
}

// dw += sum over rows of dy*x*s, fp32: one thread per column (grid
// ceil(cols/blockDim)), rows in order, so the sum is deterministic.
template <typename T>
__device__ void rmsnorm_bwd_dw(float *dw, const T *dy, const T *x, const float *rstd, int rows, int cols) {
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= cols) return;
	float acc = 0.f;
	for (int r = 0; r < rows; r++) acc += ld(dy, (long)r * cols + j) * ld(x, (long)r * cols + j) * rstd[r];
	dw[j] += acc;
}

extern "C" __global__ void rmsnorm_bwd_dw_f32(float *dw, const float *dy, const float *x, const float *rstd, int rows, int cols) {
	rmsnorm_bwd_dw(dw, dy, x, rstd, rows, cols);
}
extern "C" __global__ void rmsnorm_bwd_dw_bf16(float *dw, const bf16 *dy, const bf16 *x, const float *rstd, int rows, int cols) {
	rmsnorm_bwd_dw(dw, dy, x, rstd, rows, cols);
}
