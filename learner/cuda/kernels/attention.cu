#include "common.cuh"

// Causal grouped-query attention, flash-style: scores are never stored;
// each query keeps a running max, sum and output (online softmax) and the
// backward pass recomputes probabilities from the log-sum-exp. One warp per
// query (or key, for dK/dV), lane j holding dimensions j, j+32, ... of a
// head, so headDim ≤ 32·ATTN_DPL. The layout is the CPU backend's: q and
// out are (batch·seqLen) × (heads·headDim), k and v (batch·seqLen) ×
// (kvHeads·headDim), query t of a row sees keys starts[t] ≤ s ≤ t, and lse
// is indexed ((row·heads)+head)·seqLen + t.
//
// This is the reference kernel for correctness on GPU and in emulation;
// tiling keys through shared memory and tensor-core products are the next
// step for speed.

#define ATTN_DPL 4

// attn_fwd: grid ceil(batch·heads·seqLen / warps per block).
template <typename T>
__device__ void attn_fwd(T *out, float *lse, const T *q, const T *k, const T *v, const int *starts, int batch, int seqLen, int heads,
			 int kvHeads, int headDim) {
	int lane = threadIdx.x & 31;
	long w = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	long nq = (long)batch * heads * seqLen;
	if (w >= nq) return; // a whole warp leaves together
	int i = (int)(w % seqLen);
	long rh = w / seqLen;
	int h = (int)(rh % heads), r = (int)(rh / heads);
	int kh = h / (heads / kvHeads);
	int qd = heads * headDim, kd = kvHeads * headDim;
	float scale = 1.f / sqrtf((float)headDim);
	const T *qp = q + ((long)r * seqLen + i) * qd + h * headDim;
	float qv[ATTN_DPL], acc[ATTN_DPL];
	for (int u = 0; u < ATTN_DPL; u++) {
		int d = lane + 32 * u;
		qv[u] = d < headDim ? ld(qp, d) * scale : 0.f;
		acc[u] = 0.f;
	}
	float m = NEG_INF, l = 0.f;
	for (int s = starts[(long)r * seqLen + i]; s <= i; s++) {
		const T *kp = k + ((long)r * seqLen + s) * kd + kh * headDim;
		const T *vp = v + ((long)r * seqLen + s) * kd + kh * headDim;
		float dot = 0.f;
		for (int u = 0; u < ATTN_DPL; u++) {
			int d = lane + 32 * u;
			if (d < headDim) dot += qv[u] * ld(kp, d);
		}
		float sc = warp_sum(dot);
		float mn = fmaxf(m, sc);
		float corr = expf(m - mn), p = expf(sc - mn);
		l = l * corr + p;
		for (int u = 0; u < ATTN_DPL; u++) {
			int d = lane + 32 * u;
			acc[u] = acc[u] * corr + (d < headDim ? p * ld(vp, d) : 0.f);
		}
		m = mn;
	}
	T *op = out + ((long)r * seqLen + i) * qd + h * headDim;
	float inv = 1.f / l;
	for (int u = 0; u < ATTN_DPL; u++) {
		int d = lane + 32 * u;
		if (d < headDim) st(op, d, acc[u] * inv);
	}
	if (lane == 0) lse[((long)r * heads + h) * seqLen + i] = m + logf(l);
}

extern "C" __global__ void attn_fwd_f32(float *out, float *lse, const float *q, const float *k, const float *v, const int *starts, int batch,
					int seqLen, int heads, int kvHeads, int headDim) {
	attn_fwd(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void attn_fwd_bf16(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *starts, int batch,
					 int seqLen, int heads, int kvHeads, int headDim) {
	attn_fwd(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}

// attn_bwd_delta: delta = rowsum(dO·O) per query and head, laid out as
// lse; one warp per query, grid as attn_fwd.
template <typename T>
__device__ void attn_bwd_delta(float *delta, const T *dout, const T *out, int batch, int seqLen, int heads, int headDim) {
	int lane = threadIdx.x & 31;
	long w = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (w >= (long)batch * heads * seqLen) return;
	int i = (int)(w % seqLen);
	long rh = w / seqLen;
	int h = (int)(rh % heads), r = (int)(rh / heads);
	long o = ((long)r * seqLen + i) * heads * headDim + h * headDim;
	float d = 0.f;
	for (int j = lane; j < headDim; j += 32) d += ld(dout, o + j) * ld(out, o + j);
	d = warp_sum(d);
	if (lane == 0) delta[w] = d;
}

extern "C" __global__ void attn_bwd_delta_f32(float *delta, const float *dout, const float *out, int batch, int seqLen, int heads, int headDim) {
	attn_bwd_delta(delta, dout, out, batch, seqLen, heads, headDim);
}
extern "C" __global__ void attn_bwd_delta_bf16(float *delta, const bf16 *dout, const bf16 *out, int batch, int seqLen, int heads, int headDim) {
	attn_bwd_delta(delta, dout, out, batch, seqLen, heads, headDim);
}

// attn_bwd_dq: dq = scale·Σ_s p·(dO·v_s − delta)·k_s, overwritten; one warp
// per query, grid as attn_fwd.
template <typename T>
__device__ void attn_bwd_dq(T *dq, const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *delta, const int *starts,
			    int batch, int seqLen, int heads, int kvHeads, int headDim) {
	int lane = threadIdx.x & 31;
	long w = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (w >= (long)batch * heads * seqLen) return;
	int i = (int)(w % seqLen);
	long rh = w / seqLen;
	int h = (int)(rh % heads), r = (int)(rh / heads);
	int kh = h / (heads / kvHeads);
	int qd = heads * headDim, kd = kvHeads * headDim;
	float scale = 1.f / sqrtf((float)headDim);
	long qo = ((long)r * seqLen + i) * qd + h * headDim;
	float qv[ATTN_DPL], dov[ATTN_DPL], acc[ATTN_DPL];
	for (int u = 0; u < ATTN_DPL; u++) {
		int d = lane + 32 * u;
		qv[u] = d < headDim ? ld(q, qo + d) * scale : 0.f;
		dov[u] = d < headDim ? ld(dout, qo + d) : 0.f;
		acc[u] = 0.f;
	}
	float l = lse[w], dl = delta[w];
	for (int s = starts[(long)r * seqLen + i]; s <= i; s++) {
		long ko = ((long)r * seqLen + s) * kd + kh * headDim;
		float sc = 0.f, dp = 0.f;
		for (int u = 0; u < ATTN_DPL; u++) {
			int d = lane + 32 * u;
			if (d < headDim) {
				sc += qv[u] * ld(k, ko + d);
				dp += dov[u] * ld(v, ko + d);
			}
		}
		sc = warp_sum(sc);
		dp = warp_sum(dp);
		float ds = expf(sc - l) * (dp - dl) * scale;
		for (int u = 0; u < ATTN_DPL; u++) {
			int d = lane + 32 * u;
			if (d < headDim) acc[u] += ds * ld(k, ko + d);
		}
	}
	for (int u = 0; u < ATTN_DPL; u++) {
		int d = lane + 32 * u;
		if (d < headDim) st(dq, qo + d, acc[u]);
	}
}

extern "C" __global__ void attn_bwd_dq_f32(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse,
					   const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	attn_bwd_dq(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void attn_bwd_dq_bf16(bf16 *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
					    const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	attn_bwd_dq(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

// attn_bwd_dkdv: for key s of kv head kh, over the group's query heads and
// the queries t ≥ s that see it, dv = Σ p·dO_t and dk = scale·Σ
// p·(dO_t·v − delta)·q_t, both overwritten; one warp per key, grid
// ceil(batch·kvHeads·seqLen / warps per block).
template <typename T>
__device__ void attn_bwd_dkdv(T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *delta,
			      const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	int lane = threadIdx.x & 31;
	long w = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (w >= (long)batch * kvHeads * seqLen) return;
	int s = (int)(w % seqLen);
	long rk = w / seqLen;
	int kh = (int)(rk % kvHeads), r = (int)(rk / kvHeads);
	int group = heads / kvHeads;
	int qd = heads * headDim, kd = kvHeads * headDim;
	float scale = 1.f / sqrtf((float)headDim);
	long ko = ((long)r * seqLen + s) * kd + kh * headDim;
	float kv[ATTN_DPL], vv[ATTN_DPL], dka[ATTN_DPL], dva[ATTN_DPL];
	for (int u = 0; u < ATTN_DPL; u++) {
		int d = lane + 32 * u;
		kv[u] = d < headDim ? ld(k, ko + d) * scale : 0.f;
		vv[u] = d < headDim ? ld(v, ko + d) : 0.f;
		dka[u] = dva[u] = 0.f;
	}
	for (int t = s; t < seqLen; t++) {
		if (starts[(long)r * seqLen + t] > s) continue; // t is in a later packed sequence
		for (int g = 0; g < group; g++) {
			int h = kh * group + g;
			long qo = ((long)r * seqLen + t) * qd + h * headDim;
			long li = ((long)r * heads + h) * seqLen + t;
			float sc = 0.f, dp = 0.f;
			for (int u = 0; u < ATTN_DPL; u++) {
				int d = lane + 32 * u;
				if (d < headDim) {
					sc += kv[u] * ld(q, qo + d);
					dp += vv[u] * ld(dout, qo + d);
				}
			}
			sc = warp_sum(sc);
			dp = warp_sum(dp);
			float p = expf(sc - lse[li]);
			float ds = p * (dp - delta[li]) * scale;
			for (int u = 0; u < ATTN_DPL; u++) {
				int d = lane + 32 * u;
				if (d < headDim) {
					dva[u] += p * ld(dout, qo + d);
					dka[u] += ds * ld(q, qo + d);
				}
			}
		}
	}
	for (int u = 0; u < ATTN_DPL; u++) {
		int d = lane + 32 * u;
		if (d < headDim) {
			st(dk, ko + d, dka[u]);
			st(dv, ko + d, dva[u]);
		}
	}
}

extern "C" __global__ void attn_bwd_dkdv_f32(float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
					     const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					     int headDim) {
	attn_bwd_dkdv(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void attn_bwd_dkdv_bf16(bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
					      const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					      int headDim) {
	attn_bwd_dkdv(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

// attn_decode: the newest tokens of each sequence against its KV cache
// (the CPU backend's CachedAttention). C gives sequence i's caches,
// kvHeads·headDim wide: C.k(i) and C.v(i) point at its first row. Query
// row r of sequence i (rows[i] ≤ r < rows[i+1]) sees keys
// 0 ≤ s ≤ lens[i] − (rows[i+1] − r). One warp per (row, head), grid
// ceil(rows[nseq]·heads / warps per block).
template <typename T, typename C>
__device__ void attn_decode(T *out, const T *q, C caches, const int *rows, const int *lens, int nseq, int heads, int kvHeads,
			    int headDim) {
	int lane = threadIdx.x & 31;
	long w = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (w >= (long)rows[nseq] * heads) return;
	int h = (int)(w % heads), r = (int)(w / heads);
	int lo = 0, hi = nseq - 1; // sequence i with rows[i] ≤ r < rows[i+1]
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (rows[mid] <= r) lo = mid;
		else hi = mid - 1;
	}
	int i = lo;
	int kh = h / (heads / kvHeads);
	int qd = heads * headDim, kd = kvHeads * headDim;
	int last = lens[i] - (rows[i + 1] - r); // newest key this query sees
	float scale = 1.f / sqrtf((float)headDim);
	const T *qp = q + (long)r * qd + h * headDim;
	const T *kp = caches.k(i) + kh * headDim;
	const T *vp = caches.v(i) + kh * headDim;
	float qv[ATTN_DPL], acc[ATTN_DPL];
	for (int u = 0; u < ATTN_DPL; u++) {
		int d = lane + 32 * u;
		qv[u] = d < headDim ? ld(qp, d) * scale : 0.f;
		acc[u] = 0.f;
	}
	float m = NEG_INF, l = 0.f;
	for (int s = 0; s <= last; s++) {
		float dot = 0.f;
		for (int u = 0; u < ATTN_DPL; u++) {
			int d = lane + 32 * u;
			if (d < headDim) dot += qv[u] * ld(kp, (long)s * kd + d);
		}
		float sc = warp_sum(dot);
		float mn = fmaxf(m, sc);
		float corr = expf(m - mn), p = expf(sc - mn);
		l = l * corr + p;
		for (int u = 0; u < ATTN_DPL; u++) {
			int d = lane + 32 * u;
			acc[u] = acc[u] * corr + (d < headDim ? p * ld(vp, (long)s * kd + d) : 0.f);
		}
		m = mn;
	}
	T *op = out + (long)r * qd + h * headDim;
	for (int u = 0; u < ATTN_DPL; u++) {
		int d = lane + 32 * u;
		if (d < headDim) st(op, d, acc[u] / l);
	}
}

// Caches in one pool per k and v: sequence i's rows start at element
// off[i].
template <typename T> struct PoolCaches {
	const T *kpool, *vpool;
	const long *off;
	__device__ const T *k(int i) const { return kpool + off[i]; }
	__device__ const T *v(int i) const { return vpool + off[i]; }
};

// Caches where they live: kc[i] and vc[i] are the device addresses of
// sequence i's key and value caches.
template <typename T> struct TableCaches {
	const long *kc, *vc;
	__device__ const T *k(int i) const { return (const T *)kc[i]; }
	__device__ const T *v(int i) const { return (const T *)vc[i]; }
};

extern "C" __global__ void attn_decode_f32(float *out, const float *q, const float *kpool, const float *vpool, const long *cacheOff,
					   const int *rows, const int *lens, int nseq, int heads, int kvHeads, int headDim) {
	attn_decode(out, q, PoolCaches<float>{kpool, vpool, cacheOff}, rows, lens, nseq, heads, kvHeads, headDim);
}
extern "C" __global__ void attn_decode_bf16(bf16 *out, const bf16 *q, const bf16 *kpool, const bf16 *vpool, const long *cacheOff,
					    const int *rows, const int *lens, int nseq, int heads, int kvHeads, int headDim) {
	attn_decode(out, q, PoolCaches<bf16>{kpool, vpool, cacheOff}, rows, lens, nseq, heads, kvHeads, headDim);
}

// attn_decode_tab_f32 is attn_decode_f32 over each sequence's own caches
// (kc, vc: tables of their device addresses), so no pool is gathered.
extern "C" __global__ void attn_decode_tab_f32(float *out, const float *q, const long *kc, const long *vc, const int *rows, const int *lens,
					       int nseq, int heads, int kvHeads, int headDim) {
	attn_decode(out, q, TableCaches<float>{kc, vc}, rows, lens, nseq, heads, kvHeads, headDim);
}

// kv_write_f32 is the CPU backend's WriteKV in one launch: rows
// rows[i] ≤ r < rows[i+1] of src (cols wide) go to the cache at device
// address dst[i], from its row at[i] on. Elements of src over a grid
// stride.
extern "C" __global__ void kv_write_f32(const long *dst, const int *at, const float *src, const int *rows, int nseq, int cols) {
	GRID_STRIDE(e, (long)rows[nseq] * cols) {
		int r = (int)(e / cols), c = (int)(e % cols);
		int lo = 0, hi = nseq - 1; // sequence i with rows[i] ≤ r < rows[i+1]
		while (lo < hi) {
			int mid = (lo + hi + 1) / 2;
			if (rows[mid] <= r) lo = mid;
			else hi = mid - 1;
		}
		float *d = (float *)dst[lo];
		d[(long)(at[lo] + r - rows[lo]) * cols + c] = src[e];
	}
}
