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

// Column sums, dst[c] += Σ_r x[r][c], in two passes so that thousands of
// rows spread over the GPU and still add up in one fixed order:
// sum_rows_part_f32 writes each chunk of per rows' sums to part[chunk][c]
// (grid ceil(cols/blockDim)·chunks: chunk blockIdx.x / column blocks),
// sum_rows_finish_f32 adds the chunks' partials to dst in chunk order.
extern "C" __global__ void sum_rows_part_f32(float *part, const float *x, int rows, int cols, int per) {
	int colBlocks = (cols + blockDim.x - 1) / blockDim.x;
	int chunk = blockIdx.x / colBlocks;
	int c = (blockIdx.x % colBlocks) * blockDim.x + threadIdx.x;
	if (c >= cols) return;
	int lo = chunk * per, hi = lo + per < rows ? lo + per : rows;
	float acc = 0.f;
	for (int r = lo; r < hi; r++) acc += x[(long)r * cols + c];
	part[(long)chunk * cols + c] = acc;
}

extern "C" __global__ void sum_rows_finish_f32(float *dst, const float *part, int chunks, int cols) {
	GRID_STRIDE(c, cols) {
		float acc = 0.f;
		for (int k = 0; k < chunks; k++) acc += part[(long)k * cols + c];
		dst[c] += acc;
	}
}

// dst row i = src row idx[i], n rows of cols.
extern "C" __global__ void gather_rows_f32(float *dst, const float *src, const int *idx, int n, int cols) {
	GRID_STRIDE(u, (long)n * cols) {
		long i = u / cols, c = u % cols;
		dst[u] = src[(long)idx[i] * cols + c];
	}
}

// dst row idx[i] += src row i, with the rows grouped by destination on the
// host: destination row dests[u] takes src rows order[offs[u]],
// ..., order[offs[u+1]−1], in increasing i. One thread per (destination,
// column) adds them in that order: no atomics, the same sums as adding
// the rows one after another.
extern "C" __global__ void scatter_add_rows_f32(float *dst, const float *src, const int *dests, const int *offs, const int *order, int ndest,
						int cols) {
	GRID_STRIDE(e, (long)ndest * cols) {
		int u = (int)(e / cols), c = (int)(e % cols);
		float *d = dst + (long)dests[u] * cols + c;
		float acc = *d;
		for (int j = offs[u]; j < offs[u + 1]; j++) acc += src[(long)order[j] * cols + c];
		*d = acc;
	}
}
