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

// dw += Σ_r dy·x·rstd[r], fp32, in two passes as tensor.cu's column sums:
// rmsnorm_bwd_dw_part writes each chunk of per rows' sums to
// part[chunk][j] (grid ceil(cols/blockDim)·chunks), and
// sum_rows_finish_f32 adds them to dw in chunk order.
template <typename T>
__device__ void rmsnorm_bwd_dw_part(float *part, const T *dy, const T *x, const float *rstd, int rows, int cols, int per) {
	int colBlocks = (cols + blockDim.x - 1) / blockDim.x;
	int chunk = blockIdx.x / colBlocks;
	int j = (blockIdx.x % colBlocks) * blockDim.x + threadIdx.x;
	if (j >= cols) return;
	int lo = chunk * per, hi = lo + per < rows ? lo + per : rows;
	float acc = 0.f;
	for (int r = lo; r < hi; r++) acc += ld(dy, (long)r * cols + j) * ld(x, (long)r * cols + j) * rstd[r];
	part[(long)chunk * cols + j] = acc;
}

extern "C" __global__ void rmsnorm_bwd_dw_part_f32(float *part, const float *dy, const float *x, const float *rstd, int rows, int cols, int per) {
	rmsnorm_bwd_dw_part(part, dy, x, rstd, rows, cols, per);
}
extern "C" __global__ void rmsnorm_bwd_dw_part_bf16(float *part, const bf16 *dy, const bf16 *x, const float *rstd, int rows, int cols, int per) {
	rmsnorm_bwd_dw_part(part, dy, x, rstd, rows, cols, per);
}
