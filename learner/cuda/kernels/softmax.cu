#include "common.cuh"

// Row-wise kernels over rows×cols: one block per row (grid rows), any
// multiple of 32 threads.

template <typename T>
__device__ void softmax(T *out, const T *x, int cols) {
	__shared__ float red[32];
	long o = (long)blockIdx.x * cols;
	float m = NEG_INF;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, ld(x, o + j));
	m = block_max(m, red);
	float s = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) s += expf(ld(x, o + j) - m);
	s = block_sum(s, red);
	float inv = 1.f / s;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) st(out, o + j, expf(ld(x, o + j) - m) * inv);
}

extern "C" __global__ void softmax_f32(float *out, const float *x, int rows, int cols) { softmax(out, x, cols); }
extern "C" __global__ void softmax_bf16(bf16 *out, const bf16 *x, int rows, int cols) { softmax(out, x, cols); }

// Per row of logits: logp = z[target] - lse, entropy = lse - Σp·z, lse
// kept for the backward pass. Outputs are fp32.
template <typename T>
__device__ void logprobs_fwd(float *logp, float *entropy, float *lse, const T *z, const int *targets, int vocab) {
	__shared__ float red[32];
	long row = blockIdx.x, o = row * vocab;
	float m = NEG_INF;
	for (int j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, ld(z, o + j));
	m = block_max(m, red);
	float s = 0.f, sz = 0.f;
	for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
		float d = ld(z, o + j) - m, e = expf(d);
		s += e;
		sz += e * d;
	}
	s = block_sum(s, red);
	sz = block_sum(sz, red);
	if (threadIdx.x == 0) {
		float ls = logf(s);
		float l = m + ls;
		lse[row] = l;
		logp[row] = ld(z, o + targets[row]) - l;
		entropy[row] = ls - sz / s;
	}
}

extern "C" __global__ void logprobs_fwd_f32(float *logp, float *entropy, float *lse, const float *z, const int *targets, int rows, int vocab) {
	logprobs_fwd(logp, entropy, lse, z, targets, vocab);
}
extern "C" __global__ void logprobs_fwd_bf16(float *logp, float *entropy, float *lse, const bf16 *z, const int *targets, int rows, int vocab) {
	logprobs_fwd(logp, entropy, lse, z, targets, vocab);
}

// dz = g·(onehot - p) - ge·p·(log p + H), overwritten, with g = dLogp[row]
// and ge = dEntropy[row] (dEntropy may be null).
template <typename T>
__device__ void logprobs_bwd(T *dz, const T *z, const float *lse, const float *dlogp, const float *dentropy, const int *targets, int vocab) {
	__shared__ float red[32];
	long row = blockIdx.x, o = row * vocab;
	float l = lse[row], g = dlogp[row];
	float ge = dentropy ? dentropy[row] : 0.f;
	float h = 0.f;
	if (ge != 0.f) { // uniform over the block: every thread takes this branch or none
		for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
			float lp = ld(z, o + j) - l;
			h -= expf(lp) * lp;
		}
		h = block_sum(h, red);
	}
	int t = targets[row];
	for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
		float lp = ld(z, o + j) - l, p = expf(lp);
		float d = -g * p - ge * p * (lp + h);
		if (j == t) d += g;
		st(dz, o + j, d);
	}
}

extern "C" __global__ void logprobs_bwd_f32(float *dz, const float *z, const float *lse, const float *dlogp, const float *dentropy, const int *targets,
					    int rows, int vocab) {
	logprobs_bwd(dz, z, lse, dlogp, dentropy, targets, vocab);
}
extern "C" __global__ void logprobs_bwd_bf16(bf16 *dz, const bf16 *z, const float *lse, const float *dlogp, const float *dentropy, const int *targets,
					     int rows, int vocab) {
	logprobs_bwd(dz, z, lse, dlogp, dentropy, targets, vocab);
}
