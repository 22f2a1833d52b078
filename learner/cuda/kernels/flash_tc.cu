#include "common.cuh"

// Tiled causal GQA attention forward on the tensor cores: flash.cu's
// flash_fwd contract (arguments, layouts, lse), with the two products of
// each tile (scores Q·Kᵀ, output P·V) as bf16 mma.sync with fp32
// accumulation, the online softmax in fp32 — what the device backend runs
// when its matrix products are bf16. Inputs of either type are rounded to
// bf16 for the products (q after the 1/√headDim scale), as are the
// probabilities before P·V; the softmax's sums use them unrounded.
//
// A block of FTC_THREADS (4 warps) owns 64 queries of one (batch row,
// head), 16 per warp, and streams tiles of C keys and values through
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

// ftc_pair reads two neighbouring bf16 of shared memory as one register.
__device__ __forceinline__ unsigned ftc_pair(const bf16 *p) { return (unsigned)p[0] | (unsigned)p[1] << 16; }

__device__ __forceinline__ int ftc_imin(int a, int b) { return a < b ? a : b; }

// flash_fwd_tc: grid batch·heads·ceil(seqLen/64) blocks of FTC_THREADS.
template <typename T, int D, int C>
__device__ void flash_fwd_tc(T *out, float *lse, const T *q, const T *k, const T *v, const int *starts, int batch, int seqLen, int heads,
			     int kvHeads, int headDim) {
	__shared__ bf16 Ks[C][D + 8];
	__shared__ bf16 Vs[C][D + 8];
	constexpr int R = 64, KS = D / 16, NS = C / 8, DS = D / 8;
	int tiles = (seqLen + R - 1) / R;
	if (tiles == 0) return;
	long rh = blockIdx.x / tiles;
	if (rh >= (long)batch * heads) return; // the whole block
	int q0 = (int)(blockIdx.x % tiles) * R;
	int h = (int)(rh % heads), r = (int)(rh / heads);
	int kh = h / (heads / kvHeads);
	int qd = heads * headDim, kd = kvHeads * headDim;
	int nq = ftc_imin(R, seqLen - q0);
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
	// Q's A fragments, k-slice kk: a[0] (row g, dims 2t, 2t+1), a[1]
	// (row g+8), a[2], a[3] the same rows at dims +8.
	unsigned qa[KS][4];
#pragma unroll
	for (int kk = 0; kk < KS; kk++)
#pragma unroll
		for (int x = 0; x < 4; x++) {
			int u = x & 1, d = kk * 16 + 2 * t + 8 * (x >> 1);
			float v0 = 0.f, v1 = 0.f;
			if (row[u] < seqLen) {
				const T *p = qb + (long)row[u] * qd;
				if (d < headDim) v0 = ld(p, d) * scale;
				if (d + 1 < headDim) v1 = ld(p, d + 1) * scale;
			}
			qa[kk][x] = pack_bf16(v0, v1);
		}
	float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
	float o[DS][4];
#pragma unroll
	for (int j = 0; j < DS; j++)
#pragma unroll
		for (int x = 0; x < 4; x++) o[j][x] = 0.f;

	int kmin = q0;
	for (int i = q0; i < q0 + nq; i++) kmin = ftc_imin(kmin, sq[i]);
	int kend = q0 + nq; // keys [kmin, kend)
	for (int c0 = kmin; c0 < kend; c0 += C) {
		int nc = ftc_imin(C, kend - c0);
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
				unsigned b[2] = {ftc_pair(&Ks[8 * j + g][kk * 16 + 2 * t]), ftc_pair(&Ks[8 * j + g][kk * 16 + 2 * t + 8])};
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
			unsigned pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
					  pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
			int k0 = kk * 16 + 2 * t;
#pragma unroll
			for (int j = 0; j < DS; j++) {
				int d = 8 * j + g;
				unsigned b[2] = {(unsigned)Vs[k0][d] | (unsigned)Vs[k0 + 1][d] << 16, (unsigned)Vs[k0 + 8][d] | (unsigned)Vs[k0 + 9][d] << 16};
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

// The kernels per input type and head-dimension bound D (key tiles of 64
// for D ≤ 64, 32 for D = 128). The Go side's planAttention picks them.
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
