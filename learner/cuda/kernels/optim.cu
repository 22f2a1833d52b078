#include "common.cuh"

// The optimizer on the device: AdamW on fp32 master weights and moments,
// and the gradients' sums of squares for global-norm clipping.

// AdamW as torch computes it, one element; the coefficients are the
// step's, from the host: decay = 1 - lr*wd, stepSize = lr/(1-β1ᵗ),
// bc2Sqrt = sqrt(1-β2ᵗ); the gradient is scaled by gscale first (the
// clipping coefficient, 1 without clipping).
__device__ __forceinline__ float adamw_elem(float *w, const float *g, float *m, float *v, long i, float gscale, float decay, float beta1,
					    float beta2, float oneMinusB1, float oneMinusB2, float bc2Sqrt, float eps, float stepSize) {
	float gi = g[i] * gscale;
	float wi = w[i] * decay;
	float mi = m[i] * beta1 + gi * oneMinusB1;
	float vi = v[i] * beta2 + gi * gi * oneMinusB2;
	float denom = sqrtf(vi) / bc2Sqrt + eps;
	wi = wi - stepSize * (mi / denom);
	w[i] = wi;
	m[i] = mi;
	v[i] = vi;
	return wi;
}

// One tensor, one thread per element (grid-stride).
extern "C" __global__ void adamw_f32(float *w, const float *g, float *m, float *v, long n, float gscale, float decay, float beta1, float beta2,
				     float oneMinusB1, float oneMinusB2, float bc2Sqrt, float eps, float stepSize) {
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
		adamw_elem(w, g, m, v, i, gscale, decay, beta1, beta2, oneMinusB1, oneMinusB2, bc2Sqrt, eps, stepSize);
}

// adamw_bf16 also writes the updated weights' bf16 copy, the one the
// forward pass reads.
extern "C" __global__ void adamw_bf16(float *w, bf16 *wb, const float *g, float *m, float *v, long n, float gscale, float decay, float beta1,
				      float beta2, float oneMinusB1, float oneMinusB2, float bc2Sqrt, float eps, float stepSize) {
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
		wb[i] = f32_to_bf16(adamw_elem(w, g, m, v, i, gscale, decay, beta1, beta2, oneMinusB1, oneMinusB2, bc2Sqrt, eps, stepSize));
}

// Every tensor of a step in one launch: tensor t (blockIdx.y) has len[t]
// elements at the device addresses w[t], g[t], m[t], v[t], and a bf16 copy
// of its weights at wb[t] unless that is 0; the blockIdx.x blocks stride
// over its elements.
extern "C" __global__ void adamw_multi(const long *w, const long *g, const long *m, const long *v, const long *wb, const long *len, float gscale,
				       float decay, float beta1, float beta2, float oneMinusB1, float oneMinusB2, float bc2Sqrt, float eps,
				       float stepSize) {
	int t = blockIdx.y;
	long n = len[t];
	float *W = (float *)w[t], *M = (float *)m[t], *V = (float *)v[t];
	const float *G = (const float *)g[t];
	bf16 *WB = (bf16 *)wb[t];
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		float wi = adamw_elem(W, G, M, V, i, gscale, decay, beta1, beta2, oneMinusB1, oneMinusB2, bc2Sqrt, eps, stepSize);
		if (WB) WB[i] = f32_to_bf16(wi);
	}
}

__device__ __forceinline__ double warp_sum_d(double v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// Sums of squares in fp64, stage one: block (x, t) writes the sum over
// the elements of tensor t (len[t] at x[t]) it strides over to
// partial[t*gridDim.x + x]. Fixed launch shape, fixed order: the result
// does not vary from run to run.
extern "C" __global__ void sumsq_multi(double *partial, const long *x, const long *len) {
	__shared__ double red[32];
	int t = blockIdx.y;
	long n = len[t];
	const float *X = (const float *)x[t];
	double s = 0;
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		double e = X[i];
		s += e * e;
	}
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	s = warp_sum_d(s);
	if (lane == 0) red[warp] = s;
	__syncthreads();
	if (warp == 0) {
		s = lane < warps ? red[lane] : 0.0;
		s = warp_sum_d(s);
		if (lane == 0) partial[(long)t * gridDim.x + blockIdx.x] = s;
	}
}

// Stage two: out[t] = Σ_j partial[t*parts + j] in order, one thread per
// tensor.
extern "C" __global__ void sumsq_finish(double *out, const double *partial, int parts, int n) {
	for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t += gridDim.x * blockDim.x) {
		double s = 0;
		for (int j = 0; j < parts; j++) s += partial[(long)t * parts + j];
		out[t] = s;
	}
}
