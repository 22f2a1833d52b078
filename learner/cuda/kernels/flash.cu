#include "common.cuh"
#include "flash.cuh"

// Tiled causal grouped-query attention over packed sequences: the same
// contract as attention.cu's attn_fwd, attn_bwd_dq and attn_bwd_dkdv (same
// arguments, layouts and results up to rounding), computed a tile at a
// time through shared memory instead of a warp per query.
//
// A block of FLASH_THREADS threads owns R rows (queries, or keys for
// dK/dV) of one (batch row, head) and streams tiles of C columns (keys, or
// queries) through shared memory. Thread t is in row group t/8 and column
// group t%8: it owns rows t/8 + 16i, columns t%8 + 8j of each tile, and
// dimensions t%8 + 8j of its rows' outputs. A row's eight threads are eight
// neighbouring lanes of one warp, so its max and sum over a tile are three
// shuffles. Every product reads both operands from shared memory, rows
// padded by one float so that neighbouring rows fall in different banks.
// D is the head dimension rounded up (32, 64 or 128); dimensions from
// headDim to D are zeros.
//
// Key tiles start at the smallest start of the block's queries and end at
// its last query; masking inside a tile is per (query, key). For dK/dV the
// query tiles stop at the first query whose sequence starts after the
// block's last key, so starts must not decrease along a row (packed
// sequences lie one after another; the Go side checks this).
//
// Scores are never stored in global memory: the forward pass keeps an
// online softmax per query (running max m, partial sums l per thread); the
// backward pass recomputes probabilities from the log-sum-exp.

#define FLASH_THREADS 128

// flash_load copies rows [row0, row0+n) of a head's slice (stride elements
// apart, headDim wide) into S[rows][D+1] as floats times mul, and zeros the
// rest of S's rows and dimensions.
template <int D, int ROWS, typename T>
__device__ __forceinline__ void flash_load(float (*S)[D + 1], const T *src, int row0, int n, long stride, int headDim, float mul) {
	for (int e = threadIdx.x; e < ROWS * D; e += FLASH_THREADS) {
		int r = e / D, d = e % D;
		S[r][d] = r < n && d < headDim ? ld(src, (long)(row0 + r) * stride + d) * mul : 0.f;
	}
}


// flash_rowmax and flash_rowsum reduce over a row's eight threads.
__device__ __forceinline__ float flash_rowmax(float v) {
	for (int o = 1; o < 8; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}
__device__ __forceinline__ float flash_rowsum(float v) {
	for (int o = 1; o < 8; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}


// flash_fwd: grid batch·heads·ceil(seqLen/R) blocks of FLASH_THREADS.
template <typename T, int D, int R, int C>
__device__ void flash_fwd(T *out, float *lse, const T *q, const T *k, const T *v, const int *starts, int batch, int seqLen, int heads,
			  int kvHeads, int headDim) {
	__shared__ float Qs[R][D + 1];
	__shared__ float KVs[C][D + 1];
	__shared__ float Ps[R][C + 1];
	constexpr int RI = R / 16, CJ = C / 8, DJ = D / 8;
	int rg = threadIdx.x >> 3, cg = threadIdx.x & 7;
	int tiles = (seqLen + R - 1) / R;
	if (tiles == 0) return;
	long rh = blockIdx.x / tiles;
	if (rh >= (long)batch * heads) return; // the whole block
	int q0 = (int)(blockIdx.x % tiles) * R;
	int h = (int)(rh % heads), r = (int)(rh / heads);
	int kh = h / (heads / kvHeads);
	int qd = heads * headDim, kd = kvHeads * headDim;
	int nq = flash_imin(R, seqLen - q0);
	const int *sq = starts + (long)r * seqLen;
	const T *kb = k + (long)r * seqLen * kd + kh * headDim;
	const T *vb = v + (long)r * seqLen * kd + kh * headDim;
	flash_load<D, R>(Qs, q + (long)r * seqLen * qd + h * headDim, q0, nq, qd, headDim, 1.f / sqrtf((float)headDim));

	int qi[RI], lo[RI];
	float m[RI], l[RI], acc[RI][DJ];
#pragma unroll
	for (int i = 0; i < RI; i++) {
		qi[i] = q0 + rg + 16 * i;
		lo[i] = qi[i] < seqLen ? sq[qi[i]] : seqLen; // a padding row sees nothing
		m[i] = NEG_INF;
		l[i] = 0.f;
#pragma unroll
		for (int j = 0; j < DJ; j++) acc[i][j] = 0.f;
	}
	int kend = q0 + nq; // keys [kmin, kend)
	for (int c0 = flash_kmin(sq, q0, nq); c0 < kend; c0 += C) {
		int nc = flash_imin(C, kend - c0);
		__syncthreads(); // the last tile's readers of KVs and Ps are done
		flash_load<D, C>(KVs, kb, c0, nc, kd, headDim, 1.f);
		__syncthreads();
		float s[RI][CJ];
#pragma unroll
		for (int i = 0; i < RI; i++)
#pragma unroll
			for (int j = 0; j < CJ; j++) s[i][j] = 0.f;
		for (int d = 0; d < D; d++) {
			float a[RI], b[CJ];
#pragma unroll
			for (int i = 0; i < RI; i++) a[i] = Qs[rg + 16 * i][d];
#pragma unroll
			for (int j = 0; j < CJ; j++) b[j] = KVs[cg + 8 * j][d];
#pragma unroll
			for (int i = 0; i < RI; i++)
#pragma unroll
				for (int j = 0; j < CJ; j++) s[i][j] += a[i] * b[j];
		}
#pragma unroll
		for (int i = 0; i < RI; i++) {
			float mx = NEG_INF;
#pragma unroll
			for (int j = 0; j < CJ; j++) {
				int key = c0 + cg + 8 * j;
				if (key < lo[i] || key > qi[i]) s[i][j] = NEG_INF;
				mx = fmaxf(mx, s[i][j]);
			}
			float mn = fmaxf(m[i], flash_rowmax(mx));
			// A row that has seen no key yet keeps corr 1 and p 0.
			float corr = mn == NEG_INF ? 1.f : expf(m[i] - mn);
			float sum = 0.f;
#pragma unroll
			for (int j = 0; j < CJ; j++) {
				float p = s[i][j] == NEG_INF ? 0.f : expf(s[i][j] - mn);
				Ps[rg + 16 * i][cg + 8 * j] = p;
				sum += p;
			}
			l[i] = l[i] * corr + sum;
			m[i] = mn;
#pragma unroll
			for (int j = 0; j < DJ; j++) acc[i][j] *= corr;
		}
		__syncthreads(); // K is read
		flash_load<D, C>(KVs, vb, c0, nc, kd, headDim, 1.f);
		__syncthreads();
		for (int c = 0; c < nc; c++) {
			float b[DJ];
#pragma unroll
			for (int j = 0; j < DJ; j++) b[j] = KVs[c][cg + 8 * j];
#pragma unroll
			for (int i = 0; i < RI; i++) {
				float p = Ps[rg + 16 * i][c];
#pragma unroll
				for (int j = 0; j < DJ; j++) acc[i][j] += p * b[j];
			}
		}
	}
#pragma unroll
	for (int i = 0; i < RI; i++) {
		float lt = flash_rowsum(l[i]);
		if (qi[i] >= seqLen) continue;
		T *op = out + ((long)r * seqLen + qi[i]) * qd + h * headDim;
		float inv = 1.f / lt;
#pragma unroll
		for (int j = 0; j < DJ; j++) {
			int d = cg + 8 * j;
			if (d < headDim) st(op, d, acc[i][j] * inv);
		}
		if (cg == 0) lse[((long)r * heads + h) * seqLen + qi[i]] = m[i] + logf(lt);
	}
}

// flash_bwd_dq: dq = scale·Σ_s p·(dO·v_s − delta)·k_s, overwritten; grid
// as flash_fwd with this kernel's R.
template <typename T, int D, int R, int C>
__device__ void flash_bwd_dq(T *dq, const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *delta,
			     const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	__shared__ float Qs[R][D + 1];
	__shared__ float dOs[R][D + 1];
	__shared__ float Ks[C][D + 1];
	__shared__ float Vs[C][D + 1];
	__shared__ float dSs[R][C + 1];
	constexpr int RI = R / 16, CJ = C / 8, DJ = D / 8;
	int rg = threadIdx.x >> 3, cg = threadIdx.x & 7;
	int tiles = (seqLen + R - 1) / R;
	if (tiles == 0) return;
	long rh = blockIdx.x / tiles;
	if (rh >= (long)batch * heads) return;
	int q0 = (int)(blockIdx.x % tiles) * R;
	int h = (int)(rh % heads), r = (int)(rh / heads);
	int kh = h / (heads / kvHeads);
	int qd = heads * headDim, kd = kvHeads * headDim;
	int nq = flash_imin(R, seqLen - q0);
	float scale = 1.f / sqrtf((float)headDim);
	const int *sq = starts + (long)r * seqLen;
	const T *kb = k + (long)r * seqLen * kd + kh * headDim;
	const T *vb = v + (long)r * seqLen * kd + kh * headDim;
	flash_load<D, R>(Qs, q + (long)r * seqLen * qd + h * headDim, q0, nq, qd, headDim, scale);
	flash_load<D, R>(dOs, dout + (long)r * seqLen * qd + h * headDim, q0, nq, qd, headDim, 1.f);

	int qi[RI], lo[RI];
	float li[RI], de[RI], acc[RI][DJ];
#pragma unroll
	for (int i = 0; i < RI; i++) {
		qi[i] = q0 + rg + 16 * i;
		bool in = qi[i] < seqLen;
		lo[i] = in ? sq[qi[i]] : seqLen;
		long x = ((long)r * heads + h) * seqLen + qi[i];
		li[i] = in ? lse[x] : 0.f;
		de[i] = in ? delta[x] : 0.f;
#pragma unroll
		for (int j = 0; j < DJ; j++) acc[i][j] = 0.f;
	}
	int kend = q0 + nq;
	for (int c0 = flash_kmin(sq, q0, nq); c0 < kend; c0 += C) {
		int nc = flash_imin(C, kend - c0);
		__syncthreads();
		flash_load<D, C>(Ks, kb, c0, nc, kd, headDim, 1.f);
		flash_load<D, C>(Vs, vb, c0, nc, kd, headDim, 1.f);
		__syncthreads();
		float s[RI][CJ], dp[RI][CJ];
#pragma unroll
		for (int i = 0; i < RI; i++)
#pragma unroll
			for (int j = 0; j < CJ; j++) s[i][j] = dp[i][j] = 0.f;
		for (int d = 0; d < D; d++) {
			float a[RI], g[RI], b[CJ], w[CJ];
#pragma unroll
			for (int i = 0; i < RI; i++) {
				a[i] = Qs[rg + 16 * i][d];
				g[i] = dOs[rg + 16 * i][d];
			}
#pragma unroll
			for (int j = 0; j < CJ; j++) {
				b[j] = Ks[cg + 8 * j][d];
				w[j] = Vs[cg + 8 * j][d];
			}
#pragma unroll
			for (int i = 0; i < RI; i++)
#pragma unroll
				for (int j = 0; j < CJ; j++) {
					s[i][j] += a[i] * b[j];
					dp[i][j] += g[i] * w[j];
				}
		}
#pragma unroll
		for (int i = 0; i < RI; i++)
#pragma unroll
			for (int j = 0; j < CJ; j++) {
				int key = c0 + cg + 8 * j;
				bool in = key >= lo[i] && key <= qi[i];
				dSs[rg + 16 * i][cg + 8 * j] = in ? expf(s[i][j] - li[i]) * (dp[i][j] - de[i]) * scale : 0.f;
			}
		__syncthreads();
		for (int c = 0; c < nc; c++) {
			float b[DJ];
#pragma unroll
			for (int j = 0; j < DJ; j++) b[j] = Ks[c][cg + 8 * j];
#pragma unroll
			for (int i = 0; i < RI; i++) {
				float ds = dSs[rg + 16 * i][c];
#pragma unroll
				for (int j = 0; j < DJ; j++) acc[i][j] += ds * b[j];
			}
		}
	}
#pragma unroll
	for (int i = 0; i < RI; i++) {
		if (qi[i] >= seqLen) continue;
		long o = ((long)r * seqLen + qi[i]) * qd + h * headDim;
#pragma unroll
		for (int j = 0; j < DJ; j++) {
			int d = cg + 8 * j;
			if (d < headDim) st(dq, o + d, acc[i][j]);
		}
	}
}

// flash_bwd_dkdv: for each key of kv head kh, over the group's query heads
// and the queries t ≥ s that see it, dv = Σ p·dO_t and dk = scale·Σ
// p·(dO_t·v − delta)·q_t, both overwritten; grid batch·kvHeads·ceil(seqLen/R)
// blocks, R keys each.
template <typename T, int D, int R, int C>
__device__ void flash_bwd_dkdv(T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *delta,
			       const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	__shared__ float Ks[R][D + 1];
	__shared__ float Vs[R][D + 1];
	__shared__ float Qs[C][D + 1];
	__shared__ float dOs[C][D + 1];
	__shared__ float Pt[R][C + 1];
	__shared__ float dSt[R][C + 1];
	constexpr int RI = R / 16, CJ = C / 8, DJ = D / 8;
	int rg = threadIdx.x >> 3, cg = threadIdx.x & 7;
	int tiles = (seqLen + R - 1) / R;
	if (tiles == 0) return;
	long rk = blockIdx.x / tiles;
	if (rk >= (long)batch * kvHeads) return;
	int k0 = (int)(blockIdx.x % tiles) * R;
	int kh = (int)(rk % kvHeads), r = (int)(rk / kvHeads);
	int group = heads / kvHeads;
	int qd = heads * headDim, kd = kvHeads * headDim;
	int nk = flash_imin(R, seqLen - k0);
	float scale = 1.f / sqrtf((float)headDim);
	const int *sq = starts + (long)r * seqLen;
	flash_load<D, R>(Ks, k + (long)r * seqLen * kd + kh * headDim, k0, nk, kd, headDim, scale);
	flash_load<D, R>(Vs, v + (long)r * seqLen * kd + kh * headDim, k0, nk, kd, headDim, 1.f);

	float dka[RI][DJ], dva[RI][DJ];
#pragma unroll
	for (int i = 0; i < RI; i++)
#pragma unroll
		for (int j = 0; j < DJ; j++) dka[i][j] = dva[i][j] = 0.f;
	int klast = k0 + nk - 1;
	for (int g = 0; g < group; g++) {
		int h = kh * group + g;
		const T *qb = q + (long)r * seqLen * qd + h * headDim;
		const T *ob = dout + (long)r * seqLen * qd + h * headDim;
		const float *lb = lse + ((long)r * heads + h) * seqLen;
		const float *db = delta + ((long)r * heads + h) * seqLen;
		// Queries before k0 see none of these keys; from the first query
		// whose sequence starts after klast on, none do.
		for (int c0 = k0; c0 < seqLen && sq[c0] <= klast; c0 += C) {
			int nc = flash_imin(C, seqLen - c0);
			__syncthreads();
			flash_load<D, C>(Qs, qb, c0, nc, qd, headDim, 1.f);
			flash_load<D, C>(dOs, ob, c0, nc, qd, headDim, 1.f);
			__syncthreads();
			float s[RI][CJ], dp[RI][CJ];
#pragma unroll
			for (int i = 0; i < RI; i++)
#pragma unroll
				for (int j = 0; j < CJ; j++) s[i][j] = dp[i][j] = 0.f;
			for (int d = 0; d < D; d++) {
				float a[RI], w[RI], b[CJ], o[CJ];
#pragma unroll
				for (int i = 0; i < RI; i++) {
					a[i] = Ks[rg + 16 * i][d];
					w[i] = Vs[rg + 16 * i][d];
				}
#pragma unroll
				for (int j = 0; j < CJ; j++) {
					b[j] = Qs[cg + 8 * j][d];
					o[j] = dOs[cg + 8 * j][d];
				}
#pragma unroll
				for (int i = 0; i < RI; i++)
#pragma unroll
					for (int j = 0; j < CJ; j++) {
						s[i][j] += a[i] * b[j];
						dp[i][j] += w[i] * o[j];
					}
			}
#pragma unroll
			for (int j = 0; j < CJ; j++) {
				int t = c0 + cg + 8 * j;
				bool tin = t < seqLen;
				int tlo = tin ? sq[t] : seqLen;
				float lt = tin ? lb[t] : 0.f, dt = tin ? db[t] : 0.f;
#pragma unroll
				for (int i = 0; i < RI; i++) {
					int key = k0 + rg + 16 * i;
					bool in = key <= klast && key >= tlo && key <= t;
					float p = in ? expf(s[i][j] - lt) : 0.f;
					Pt[rg + 16 * i][cg + 8 * j] = p;
					dSt[rg + 16 * i][cg + 8 * j] = p * (dp[i][j] - dt) * scale;
				}
			}
			__syncthreads();
			for (int c = 0; c < nc; c++) {
				float b[DJ], o[DJ];
#pragma unroll
				for (int j = 0; j < DJ; j++) {
					b[j] = Qs[c][cg + 8 * j];
					o[j] = dOs[c][cg + 8 * j];
				}
#pragma unroll
				for (int i = 0; i < RI; i++) {
					float p = Pt[rg + 16 * i][c], ds = dSt[rg + 16 * i][c];
#pragma unroll
					for (int j = 0; j < DJ; j++) {
						dva[i][j] += p * o[j];
						dka[i][j] += ds * b[j];
					}
				}
			}
		}
	}
#pragma unroll
	for (int i = 0; i < RI; i++) {
		int key = k0 + rg + 16 * i;
		if (key > klast) continue;
		long o = ((long)r * seqLen + key) * kd + kh * headDim;
#pragma unroll
		for (int j = 0; j < DJ; j++) {
			int d = cg + 8 * j;
			if (d < headDim) {
				st(dk, o + d, dka[i][j]);
				st(dv, o + d, dva[i][j]);
			}
		}
	}
}

// The kernels, per dtype and head dimension bound D. Tiles (R, C): forward
// (64, 32) for D ≤ 64 and (32, 32) for D = 128; dq and dK/dV (64, 32),
// (32, 32) and (16, 16) for D = 32, 64, 128: each under 48 KiB of shared
// memory. The Go side's flashBounds keeps R.

extern "C" __global__ void flash_fwd_f32_d32(float *out, float *lse, const float *q, const float *k, const float *v, const int *starts, int batch,
					int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd<float, 32, 64, 32>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_fwd_f32_d64(float *out, float *lse, const float *q, const float *k, const float *v, const int *starts, int batch,
					int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd<float, 64, 64, 32>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_fwd_f32_d128(float *out, float *lse, const float *q, const float *k, const float *v, const int *starts, int batch,
					int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd<float, 128, 32, 32>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dq_f32_d32(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse,
					const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq<float, 32, 64, 32>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dq_f32_d64(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse,
					const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq<float, 64, 32, 32>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dq_f32_d128(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse,
					const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq<float, 128, 16, 16>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dkdv_f32_d32(float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
					const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					int headDim) {
	flash_bwd_dkdv<float, 32, 64, 32>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dkdv_f32_d64(float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
					const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					int headDim) {
	flash_bwd_dkdv<float, 64, 32, 32>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dkdv_f32_d128(float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
					const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					int headDim) {
	flash_bwd_dkdv<float, 128, 16, 16>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_fwd_bf16_d32(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *starts, int batch,
					int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd<bf16, 32, 64, 32>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_fwd_bf16_d64(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *starts, int batch,
					int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd<bf16, 64, 64, 32>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_fwd_bf16_d128(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *starts, int batch,
					int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd<bf16, 128, 32, 32>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dq_bf16_d32(bf16 *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
					const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq<bf16, 32, 64, 32>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dq_bf16_d64(bf16 *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
					const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq<bf16, 64, 32, 32>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dq_bf16_d128(bf16 *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
					const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq<bf16, 128, 16, 16>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dkdv_bf16_d32(bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
					const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					int headDim) {
	flash_bwd_dkdv<bf16, 32, 64, 32>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dkdv_bf16_d64(bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
					const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					int headDim) {
	flash_bwd_dkdv<bf16, 64, 32, 32>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}

extern "C" __global__ void flash_bwd_dkdv_bf16_d128(bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
					const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					int headDim) {
	flash_bwd_dkdv<bf16, 128, 16, 16>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
