#include "common.cuh"

// The device backend's plain tensor ops on fp32 storage: element-wise sums
// and products, row vectors, column sums, row gathers and scatters. Grid-
// stride loops (any launch shape) except where noted.

// dst = a + b (dst may alias a or b).
extern "C" __global__ void add_f32(float *dst, const float *a, const float *b, long n) {
	GRID_STRIDE(i, n) dst[i] = a[i] + b[i];
}

// dst += alpha·x.
extern "C" __global__ void add_scaled_f32(float *dst, const float *x, float alpha, long n) {
	GRID_STRIDE(i, n) dst[i] += alpha * x[i];
}

// t *= alpha.
extern "C" __global__ void scale_f32(float *t, float alpha, long n) {
	GRID_STRIDE(i, n) t[i] *= alpha;
}

// dst = a·b (dst may alias a or b).
extern "C" __global__ void mul_f32(float *dst, const float *a, const float *b, long n) {
	GRID_STRIDE(i, n) dst[i] = a[i] * b[i];
}

// x[r][c] += v[c] over rows×cols.
extern "C" __global__ void add_row_vector_f32(float *x, const float *v, int rows, int cols) {
	GRID_STRIDE(i, (long)rows * cols) x[i] += v[i % cols];
}

// dst[c] += Σ_r x[r][c]: one thread per column (grid ceil(cols/blockDim)),
// rows in order, so the sum is deterministic.
extern "C" __global__ void sum_rows_f32(float *dst, const float *x, int rows, int cols) {
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= cols) return;
	float acc = 0.f;
	for (int r = 0; r < rows; r++) acc += x[(long)r * cols + c];
	dst[c] += acc;
}

// dst row i = src row idx[i], n rows of cols.
extern "C" __global__ void gather_rows_f32(float *dst, const float *src, const int *idx, int n, int cols) {
	GRID_STRIDE(u, (long)n * cols) {
		long i = u / cols, c = u % cols;
		dst[u] = src[(long)idx[i] * cols + c];
	}
}

// dst row idx[i] += src row i: one thread per column (grid
// ceil(cols/blockDim)) walking i in order, so rows that share a
// destination add up without atomics, deterministically.
extern "C" __global__ void scatter_add_rows_f32(float *dst, const float *src, const int *idx, int n, int cols) {
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= cols) return;
	for (int i = 0; i < n; i++) dst[(long)idx[i] * cols + c] += src[(long)i * cols + c];
}
