#include "common.cuh"
#include "flash.cuh"

// Tiled causal GQA attention on the tensor cores: flash.cu's contracts
// (flash_fwd, flash_bwd_dq, flash_bwd_dkdv: arguments, layouts, lse), with
// each tile's products as bf16 mma.sync with fp32 accumulation and the
// softmax in fp32, for a device backend whose matrix products are bf16.
// Inputs of either type are rounded to bf16 for the products (q or k after
// the 1/√headDim scale), as are the probabilities and dS before they enter
// a product; the softmax's sums use them unrounded.
//
// Forward: a block of FTC_THREADS (4 warps) owns 64 queries of one (batch
// row, head), 16 per warp, and streams tiles of C keys and values through
// shared memory as bf16. A warp keeps its queries' A fragments (Q) in
// registers; in each tile it computes its 16×C scores as C/8 fragments of
// 16×8 (lane group g = lane/4 holds rows g and g+8, t = lane%4 columns
// 2t, 2t+1), masks and exponentiates them in place, reuses them as the A
// fragments of P·V (a score fragment pair is exactly an A fragment), and
// accumulates its 16×D output in D/8 fragments. A row's max and sum are
// over the four lanes of its group: two shuffles. Key and value rows in
// shared memory are padded by 8 bf16 so that the 8 rows a fragment load
// touches fall in different banks.

#define FTC_THREADS 128

// ftc_load stores rows [row0, row0+n) of a head's slice as bf16 in
// S[C][D+8], zeros past n and past headDim.
template <int D, int C, typename T>
__device__ __forceinline__ void ftc_load(bf16 (*S)[D + 8], const T *src, int row0, int n, long stride, int headDim) {
	for (int e = threadIdx.x; e < C * D; e += FTC_THREADS) {
		int r = e / D, d = e % D;
		S[r][d] = f32_to_bf16(r < n && d < headDim ? ld(src, (long)(row0 + r) * stride + d) : 0.f);
	}
}

// ftc_pair reads two neighbouring bf16 of shared memory as one register,
// the first in the low half: one 32-bit load on the GPU (p is 4-byte
// aligned: the tiles are 16-byte aligned, rows and offsets even), two
// 16-bit reads in the emulation (no type punning for the host compiler),
// which checks the alignment the GPU needs.
__device__ __forceinline__ unsigned ftc_pair(const bf16 *p) {
#ifdef RLNODE_CUDA_EMU_H
	emu::aligned(p, 4);
	return (unsigned)p[0] | (unsigned)p[1] << 16;
#else
	return *(const unsigned *)p;
#endif
}

// ftc_bnk is the B fragment of n-tile j, k-slice kk, from S stored with a
// row per n (as keys [key][dim] for Q·Kᵀ): b[0] holds k 2t, 2t+1 of n g,
// b[1] k 2t+8, 2t+9.
template <int W> __device__ __forceinline__ void ftc_bnk(unsigned *b, const bf16 (*S)[W], int j, int kk, int g, int t) {
	b[0] = ftc_pair(&S[8 * j + g][kk * 16 + 2 * t]);
	b[1] = ftc_pair(&S[8 * j + g][kk * 16 + 2 * t + 8]);
}

// ftc_bkn is the same fragment from S stored with a row per k (as values
// [key][dim] for P·V, where k is the key).
template <int W> __device__ __forceinline__ void ftc_bkn(unsigned *b, const bf16 (*S)[W], int j, int kk, int g, int t) {
	int k0 = kk * 16 + 2 * t, n = 8 * j + g;
	b[0] = (unsigned)S[k0][n] | (unsigned)S[k0 + 1][n] << 16;
	b[1] = (unsigned)S[k0 + 8][n] | (unsigned)S[k0 + 9][n] << 16;
}

// ftc_afrag is the A fragment of a 16×16 slice held as two neighbouring
// accumulator fragments (columns 0-7 in c0, 8-15 in c1), rounded to bf16.
__device__ __forceinline__ void ftc_afrag(unsigned *a, const float *c0, const float *c1) {
	a[0] = pack_bf16(c0[0], c0[1]);
	a[1] = pack_bf16(c0[2], c0[3]);
	a[2] = pack_bf16(c1[0], c1[1]);
	a[3] = pack_bf16(c1[2], c1[3]);
}

// ftc_rows loads the A fragments of a warp's 16 rows (row0 + g and
// row0 + g + 8; rows from limit on are zeros) of a head's slice, times
// mul: slice kk's a[0] holds dims 16kk + 2t, +1 of row g, a[1] of row g+8,
// a[2] and a[3] the same at dims +8.
template <int KS, typename T>
__device__ __forceinline__ void ftc_rows(unsigned (*fr)[4], const T *base, int row0, int limit, long stride, int headDim, float mul, int g,
					 int t) {
#pragma unroll
	for (int kk = 0; kk < KS; kk++)
#pragma unroll
		for (int x = 0; x < 4; x++) {
			int row = row0 + g + 8 * (x & 1), d = kk * 16 + 2 * t + 8 * (x >> 1);
			float v0 = 0.f, v1 = 0.f;
			if (row < limit) {
				const T *p = base + (long)row * stride;
				if (d < headDim) v0 = ld(p, d) * mul;
				if (d + 1 < headDim) v1 = ld(p, d + 1) * mul;
			}
			fr[kk][x] = pack_bf16(v0, v1);
		}
}

// flash_fwd_tc: grid batch·heads·ceil(seqLen/64) blocks of FTC_THREADS.
template <typename T, int D, int C>
__device__ void flash_fwd_tc(T *out, float *lse, const T *q, const T *k, const T *v, const int *starts, int batch, int seqLen, int heads,
			     int kvHeads, int headDim) {
	alignas(16) __shared__ bf16 Ks[C][D + 8];
	alignas(16) __shared__ bf16 Vs[C][D + 8];
	constexpr int R = 64, KS = D / 16, NS = C / 8, DS = D / 8;
	int tiles = (seqLen + R - 1) / R;
	if (tiles == 0) return;
	long rh = blockIdx.x / tiles;
	if (rh >= (long)batch * heads) return; // the whole block
	int q0 = (int)(blockIdx.x % tiles) * R;
	int h = (int)(rh % heads), r = (int)(rh / heads);
	int kh = h / (heads / kvHeads);
	int qd = heads * headDim, kd = kvHeads * headDim;
	int nq = flash_imin(R, seqLen - q0);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const int *sq = starts + (long)r * seqLen;
	const T *qb = q + (long)r * seqLen * qd + h * headDim;
	const T *kb = k + (long)r * seqLen * kd + kh * headDim;
	const T *vb = v + (long)r * seqLen * kd + kh * headDim;
	float scale = 1.f / sqrtf((float)headDim);

	// This lane's rows (g and g+8 of the warp's 16) and the keys they see.
	int row[2], lo[2];
#pragma unroll
	for (int u = 0; u < 2; u++) {
		row[u] = q0 + warp * 16 + g + 8 * u;
		lo[u] = row[u] < seqLen ? sq[row[u]] : seqLen; // a padding row sees nothing
	}
	unsigned qa[KS][4];
	ftc_rows<KS>(qa, qb, q0 + warp * 16, seqLen, qd, headDim, scale, g, t);
	float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
	float o[DS][4];
#pragma unroll
	for (int j = 0; j < DS; j++)
#pragma unroll
		for (int x = 0; x < 4; x++) o[j][x] = 0.f;

	int kmin = flash_kmin(sq, q0, nq);
	int kend = q0 + nq; // keys [kmin, kend)
	for (int c0 = kmin; c0 < kend; c0 += C) {
		int nc = flash_imin(C, kend - c0);
		__syncthreads(); // the last tile's readers are done
		ftc_load<D, C>(Ks, kb, c0, nc, kd, headDim);
		ftc_load<D, C>(Vs, vb, c0, nc, kd, headDim);
		__syncthreads();
		// Scores: fragment j covers keys c0 + 8j .. c0 + 8j + 7.
		float s[NS][4];
#pragma unroll
		for (int j = 0; j < NS; j++) {
#pragma unroll
			for (int x = 0; x < 4; x++) s[j][x] = 0.f;
#pragma unroll
			for (int kk = 0; kk < KS; kk++) {
				unsigned b[2];
				ftc_bnk(b, Ks, j, kk, g, t);
				mma_bf16_16816(s[j], qa[kk], b);
			}
		}
		// Mask, then the online softmax per row (u: rows g, g+8).
		float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
		for (int j = 0; j < NS; j++)
#pragma unroll
			for (int x = 0; x < 4; x++) {
				int u = x >> 1, key = c0 + 8 * j + 2 * t + (x & 1);
				if (key < lo[u] || key > row[u]) s[j][x] = NEG_INF;
				mx[u] = fmaxf(mx[u], s[j][x]);
			}
		float corr[2];
#pragma unroll
		for (int u = 0; u < 2; u++) {
			mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 1));
			mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 2));
			float mn = fmaxf(m[u], mx[u]);
			// A row that has seen no key yet keeps corr 1 and p 0.
			corr[u] = mn == NEG_INF ? 1.f : expf(m[u] - mn);
			m[u] = mn;
			l[u] *= corr[u];
		}
#pragma unroll
		for (int j = 0; j < NS; j++)
#pragma unroll
			for (int x = 0; x < 4; x++) {
				int u = x >> 1;
				float p = s[j][x] == NEG_INF ? 0.f : expf(s[j][x] - m[u]);
				s[j][x] = p;
				l[u] += p;
			}
#pragma unroll
		for (int j = 0; j < DS; j++)
#pragma unroll
			for (int x = 0; x < 4; x++) o[j][x] *= corr[x >> 1];
		// O += P·V: keys in slices of 16 (score fragments 2kk, 2kk+1);
		// V's B fragment for dims 8j..8j+7: b[0] keys 2t, 2t+1 of dim g,
		// b[1] keys 2t+8, 2t+9.
#pragma unroll
		for (int kk = 0; kk < C / 16; kk++) {
			unsigned pa[4];
			ftc_afrag(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
			for (int j = 0; j < DS; j++) {
				unsigned b[2];
				ftc_bkn(b, Vs, j, kk, g, t);
				mma_bf16_16816(o[j], pa, b);
			}
		}
	}
#pragma unroll
	for (int u = 0; u < 2; u++) {
		float lt = l[u];
		lt += __shfl_xor_sync(0xffffffffu, lt, 1);
		lt += __shfl_xor_sync(0xffffffffu, lt, 2);
		if (row[u] >= seqLen) continue;
		T *op = out + ((long)r * seqLen + row[u]) * qd + h * headDim;
		float inv = 1.f / lt;
#pragma unroll
		for (int j = 0; j < DS; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				int d = 8 * j + 2 * t + e;
				if (d < headDim) st(op, d, o[j][2 * u + e] * inv);
			}
		if (t == 0) lse[((long)r * heads + h) * seqLen + row[u]] = m[u] + logf(lt);
	}
}

// flash_bwd_dq_tc: flash_bwd_dq on the tensor cores, 64 queries a block
// (16 a warp) as flash_fwd_tc: per key tile the scores Q·Kᵀ and dP = dO·Vᵀ
// (Q and dO fragments kept in registers), dS = P·(dP − delta)·scale in
// the accumulators, then dq += dS·K. Grid batch·heads·ceil(seqLen/64).
template <typename T, int D, int C>
__device__ void flash_bwd_dq_tc(T *dq, const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *delta,
				const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	alignas(16) __shared__ bf16 Ks[C][D + 8];
	alignas(16) __shared__ bf16 Vs[C][D + 8];
	constexpr int R = 64, KS = D / 16, NS = C / 8, DS = D / 8;
	int tiles = (seqLen + R - 1) / R;
	if (tiles == 0) return;
	long rh = blockIdx.x / tiles;
	if (rh >= (long)batch * heads) return;
	int q0 = (int)(blockIdx.x % tiles) * R;
	int h = (int)(rh % heads), r = (int)(rh / heads);
	int kh = h / (heads / kvHeads);
	int qd = heads * headDim, kd = kvHeads * headDim;
	int nq = flash_imin(R, seqLen - q0);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const int *sq = starts + (long)r * seqLen;
	const T *kb = k + (long)r * seqLen * kd + kh * headDim;
	const T *vb = v + (long)r * seqLen * kd + kh * headDim;
	float scale = 1.f / sqrtf((float)headDim);

	int row[2], lo[2];
	float li[2], de[2];
#pragma unroll
	for (int u = 0; u < 2; u++) {
		row[u] = q0 + warp * 16 + g + 8 * u;
		bool in = row[u] < seqLen;
		lo[u] = in ? sq[row[u]] : seqLen;
		long x = ((long)r * heads + h) * seqLen + row[u];
		li[u] = in ? lse[x] : 0.f;
		de[u] = in ? delta[x] : 0.f;
	}
	unsigned qa[KS][4], oa[KS][4];
	ftc_rows<KS>(qa, q + (long)r * seqLen * qd + h * headDim, q0 + warp * 16, seqLen, qd, headDim, scale, g, t);
	ftc_rows<KS>(oa, dout + (long)r * seqLen * qd + h * headDim, q0 + warp * 16, seqLen, qd, headDim, 1.f, g, t);
	float acc[DS][4];
#pragma unroll
	for (int j = 0; j < DS; j++)
#pragma unroll
		for (int x = 0; x < 4; x++) acc[j][x] = 0.f;

	int kmin = flash_kmin(sq, q0, nq);
	int kend = q0 + nq;
	for (int c0 = kmin; c0 < kend; c0 += C) {
		int nc = flash_imin(C, kend - c0);
		__syncthreads();
		ftc_load<D, C>(Ks, kb, c0, nc, kd, headDim);
		ftc_load<D, C>(Vs, vb, c0, nc, kd, headDim);
		__syncthreads();
		float s[NS][4], dp[NS][4];
#pragma unroll
		for (int j = 0; j < NS; j++) {
#pragma unroll
			for (int x = 0; x < 4; x++) s[j][x] = dp[j][x] = 0.f;
#pragma unroll
			for (int kk = 0; kk < KS; kk++) {
				unsigned b[2];
				ftc_bnk(b, Ks, j, kk, g, t);
				mma_bf16_16816(s[j], qa[kk], b);
				ftc_bnk(b, Vs, j, kk, g, t);
				mma_bf16_16816(dp[j], oa[kk], b);
			}
		}
#pragma unroll
		for (int j = 0; j < NS; j++)
#pragma unroll
			for (int x = 0; x < 4; x++) {
				int u = x >> 1, key = c0 + 8 * j + 2 * t + (x & 1);
				bool in = key >= lo[u] && key <= row[u];
				s[j][x] = in ? expf(s[j][x] - li[u]) * (dp[j][x] - de[u]) * scale : 0.f;
			}
#pragma unroll
		for (int kk = 0; kk < C / 16; kk++) {
			unsigned a[4];
			ftc_afrag(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
			for (int j = 0; j < DS; j++) {
				unsigned b[2];
				ftc_bkn(b, Ks, j, kk, g, t);
				mma_bf16_16816(acc[j], a, b);
			}
		}
	}
#pragma unroll
	for (int u = 0; u < 2; u++) {
		if (row[u] >= seqLen) continue;
		long o = ((long)r * seqLen + row[u]) * qd + h * headDim;
#pragma unroll
		for (int j = 0; j < DS; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				int d = 8 * j + 2 * t + e;
				if (d < headDim) st(dq, o + d, acc[j][2 * u + e]);
			}
	}
}

// flash_bwd_dkdv_tc: flash_bwd_dkdv on the tensor cores, 64 keys a block
// (16 a warp, their K·scale and V fragments kept in registers): per query
// tile of each head in the group, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, Pᵀ and
// dSᵀ = Pᵀ·(dPᵀ − delta)·scale in the accumulators, then dv += Pᵀ·dO and
// dk += dSᵀ·Q. Grid batch·kvHeads·ceil(seqLen/64).
template <typename T, int D, int C>
__device__ void flash_bwd_dkdv_tc(T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *delta,
				  const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	alignas(16) __shared__ bf16 Qs[C][D + 8];
	alignas(16) __shared__ bf16 Os[C][D + 8];
	__shared__ float Ls[C], Dl[C];
	__shared__ int Sq[C];
	constexpr int R = 64, KS = D / 16, NS = C / 8, DS = D / 8;
	int tiles = (seqLen + R - 1) / R;
	if (tiles == 0) return;
	long rk = blockIdx.x / tiles;
	if (rk >= (long)batch * kvHeads) return;
	int k0 = (int)(blockIdx.x % tiles) * R;
	int kh = (int)(rk % kvHeads), r = (int)(rk / kvHeads);
	int group = heads / kvHeads;
	int qd = heads * headDim, kd = kvHeads * headDim;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	float scale = 1.f / sqrtf((float)headDim);
	const int *sq = starts + (long)r * seqLen;
	int klast = flash_imin(k0 + R, seqLen) - 1;

	int key[2];
#pragma unroll
	for (int u = 0; u < 2; u++) key[u] = k0 + warp * 16 + g + 8 * u;
	unsigned ka[KS][4], va[KS][4];
	ftc_rows<KS>(ka, k + (long)r * seqLen * kd + kh * headDim, k0 + warp * 16, seqLen, kd, headDim, scale, g, t);
	ftc_rows<KS>(va, v + (long)r * seqLen * kd + kh * headDim, k0 + warp * 16, seqLen, kd, headDim, 1.f, g, t);
	float dka[DS][4], dva[DS][4];
#pragma unroll
	for (int j = 0; j < DS; j++)
#pragma unroll
		for (int x = 0; x < 4; x++) dka[j][x] = dva[j][x] = 0.f;

	for (int gi = 0; gi < group; gi++) {
		int h = kh * group + gi;
		const T *qb = q + (long)r * seqLen * qd + h * headDim;
		const T *ob = dout + (long)r * seqLen * qd + h * headDim;
		const float *lb = lse + ((long)r * heads + h) * seqLen;
		const float *db = delta + ((long)r * heads + h) * seqLen;
		// Queries before k0 see none of these keys; from the first query
		// whose sequence starts after klast on, none do.
		for (int c0 = k0; c0 < seqLen && sq[c0] <= klast; c0 += C) {
			int nc = flash_imin(C, seqLen - c0);
			__syncthreads();
			ftc_load<D, C>(Qs, qb, c0, nc, qd, headDim);
			ftc_load<D, C>(Os, ob, c0, nc, qd, headDim);
			for (int i = threadIdx.x; i < C; i += FTC_THREADS) {
				bool in = i < nc;
				Ls[i] = in ? lb[c0 + i] : 0.f;
				Dl[i] = in ? db[c0 + i] : 0.f;
				Sq[i] = in ? sq[c0 + i] : seqLen; // a padding query sees nothing
			}
			__syncthreads();
			float s[NS][4], dp[NS][4];
#pragma unroll
			for (int j = 0; j < NS; j++) {
#pragma unroll
				for (int x = 0; x < 4; x++) s[j][x] = dp[j][x] = 0.f;
#pragma unroll
				for (int kk = 0; kk < KS; kk++) {
					unsigned b[2];
					ftc_bnk(b, Qs, j, kk, g, t);
					mma_bf16_16816(s[j], ka[kk], b);
					ftc_bnk(b, Os, j, kk, g, t);
					mma_bf16_16816(dp[j], va[kk], b);
				}
			}
#pragma unroll
			for (int j = 0; j < NS; j++)
#pragma unroll
				for (int x = 0; x < 4; x++) {
					int u = x >> 1, col = 8 * j + 2 * t + (x & 1);
					bool in = key[u] <= klast && key[u] >= Sq[col] && key[u] <= c0 + col;
					float p = in ? expf(s[j][x] - Ls[col]) : 0.f;
					s[j][x] = p;
					dp[j][x] = p * (dp[j][x] - Dl[col]) * scale;
				}
#pragma unroll
			for (int kk = 0; kk < C / 16; kk++) {
				unsigned pa[4], da[4];
				ftc_afrag(pa, s[2 * kk], s[2 * kk + 1]);
				ftc_afrag(da, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
				for (int j = 0; j < DS; j++) {
					unsigned b[2];
					ftc_bkn(b, Os, j, kk, g, t);
					mma_bf16_16816(dva[j], pa, b);
					ftc_bkn(b, Qs, j, kk, g, t);
					mma_bf16_16816(dka[j], da, b);
				}
			}
		}
	}
#pragma unroll
	for (int u = 0; u < 2; u++) {
		if (key[u] > klast) continue;
		long o = ((long)r * seqLen + key[u]) * kd + kh * headDim;
#pragma unroll
		for (int j = 0; j < DS; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				int d = 8 * j + 2 * t + e;
				if (d < headDim) {
					st(dk, o + d, dka[j][2 * u + e]);
					st(dv, o + d, dva[j][2 * u + e]);
				}
			}
	}
}

// The kernels per input type and head-dimension bound D: the forward pass
// with key tiles of 64 for D ≤ 64 and 32 for D = 128; dq with tiles of 32;
// dK/dV with tiles of 32, and of 16 for D = 128, whose 16×128 dK and dV
// accumulators take most of a thread's registers. The Go side's
// planAttention picks them.
extern "C" __global__ void flash_fwd_tc_f32_d32(float *out, float *lse, const float *q, const float *k, const float *v, const int *starts,
					       int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd_tc<float, 32, 64>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_fwd_tc_f32_d64(float *out, float *lse, const float *q, const float *k, const float *v, const int *starts,
					       int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd_tc<float, 64, 64>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_fwd_tc_f32_d128(float *out, float *lse, const float *q, const float *k, const float *v, const int *starts,
						int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd_tc<float, 128, 32>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_fwd_tc_bf16_d32(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *starts,
						int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd_tc<bf16, 32, 64>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_fwd_tc_bf16_d64(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *starts,
						int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd_tc<bf16, 64, 64>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_fwd_tc_bf16_d128(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *starts,
						 int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_fwd_tc<bf16, 128, 32>(out, lse, q, k, v, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dq_tc_f32_d32(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse,
					const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq_tc<float, 32, 32>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dkdv_tc_f32_d32(float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
					const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					int headDim) {
	flash_bwd_dkdv_tc<float, 32, 32>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dq_tc_f32_d64(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse,
					const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq_tc<float, 64, 32>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dkdv_tc_f32_d64(float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
					const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					int headDim) {
	flash_bwd_dkdv_tc<float, 64, 32>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dq_tc_bf16_d32(bf16 *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
					const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq_tc<bf16, 32, 32>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dkdv_tc_bf16_d32(bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
					const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					int headDim) {
	flash_bwd_dkdv_tc<bf16, 32, 32>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dq_tc_bf16_d64(bf16 *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
					const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq_tc<bf16, 64, 32>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dkdv_tc_bf16_d64(bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
					const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					int headDim) {
	flash_bwd_dkdv_tc<bf16, 64, 32>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dq_tc_f32_d128(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse,
					 const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq_tc<float, 128, 32>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dkdv_tc_f32_d128(float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
					   const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					   int headDim) {
	flash_bwd_dkdv_tc<float, 128, 16>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dq_tc_bf16_d128(bf16 *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
					 const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads, int headDim) {
	flash_bwd_dq_tc<bf16, 128, 32>(dq, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
extern "C" __global__ void flash_bwd_dkdv_tc_bf16_d128(bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
					   const float *lse, const float *delta, const int *starts, int batch, int seqLen, int heads, int kvHeads,
					   int headDim) {
	flash_bwd_dkdv_tc<bf16, 128, 16>(dk, dv, dout, q, k, v, lse, delta, starts, batch, seqLen, heads, kvHeads, headDim);
}
