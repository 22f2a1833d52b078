#include "common.cuh"

// The per-token terms of the PPO/GRPO policy loss (learner/rl.PolicyLoss),
// one thread per token, fp32. With r = exp(clamp(logp - old)), A the
// advantage and w the token's aggregation weight (0 for masked tokens):
//
//	pg = max(-A·r, -A·clip(r, 1-clipLow, 1+clipHigh))
//	pg = min(pg, -A·dualClip)                 if A < 0 and dualClip > 0
//	pg = pg · min(exp(old - sample), tisCap)  if tisCap > 0
//	ℓ  = pg + klCoef·KL(logp, ref) - entCoef·H
//
// loss[t] = w·ℓ, dlogp[t] = w·dℓ/dlogp, dentropy[t] = -entCoef·w, and
// flags[t] records which branches bound (1 clipped, 2 dual-clipped, 4 TIS
// truncated). klKind: 1 k1, 2 k2, 3 k3 (low-variance). sample, ref and
// entropy may be null when their term is off.

#define LOG_RATIO_CLAMP 20.f
#define K3_LOG_RATIO_CLAMP 20.f
#define K3_CLAMP 10.f

__device__ __forceinline__ float clampf(float x, float lo, float hi) { return fminf(hi, fmaxf(lo, x)); }

extern "C" __global__ void policy_loss_tokens(float *loss, float *dlogp, float *dentropy, int *flags, const float *logp, const float *old,
					      const float *adv, const float *sample, const float *ref, const float *entropy, const float *weight,
					      int n, float clipLow, float clipHigh, float dualClip, float tisCap, float klCoef, int klKind,
					      float entCoef) {
	for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t += gridDim.x * blockDim.x) {
		float w = weight[t];
		if (w == 0.f) {
			loss[t] = 0.f;
			dlogp[t] = 0.f;
			if (dentropy) dentropy[t] = 0.f;
			flags[t] = 0;
			continue;
		}
		float lp = logp[t], o = old[t], a = adv[t];
		float logRatio = lp - o, dLogRatio = 1.f;
		if (logRatio > LOG_RATIO_CLAMP || logRatio < -LOG_RATIO_CLAMP) {
			logRatio = clampf(logRatio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP);
			dLogRatio = 0.f;
		}
		float ratio = expf(logRatio);
		float unclipped = -a * ratio;
		float clipped = -a * clampf(ratio, 1.f - clipLow, 1.f + clipHigh);
		float pg = unclipped, dpg = -a * ratio * dLogRatio;
		int fl = 0;
		if (clipped > unclipped) {
			pg = clipped;
			dpg = 0.f;
			fl |= 1;
		}
		if (dualClip > 0.f && a < 0.f) {
			float lower = -a * dualClip;
			if (lower < pg) {
				pg = lower;
				dpg = 0.f;
				fl |= 2;
			} else if (lower == pg) {
				dpg *= 0.5f;
			}
		}
		if (tisCap > 0.f) {
			float tis = expf(clampf(o - sample[t], -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP));
			if (tis > tisCap) {
				tis = tisCap;
				fl |= 4;
			}
			pg *= tis;
			dpg *= tis;
		}
		float l = pg, grad = dpg;
		if (klCoef > 0.f) {
			float d = lp - ref[t], kl, dkl;
			if (klKind == 1) {
				kl = d;
				dkl = 1.f;
			} else if (klKind == 2) {
				kl = 0.5f * d * d;
				dkl = d;
			} else { // k3 with x = ref - logp: e^x - x - 1, both clamped as verl does
				float x = -d, dx = -1.f;
				if (x > K3_LOG_RATIO_CLAMP || x < -K3_LOG_RATIO_CLAMP) {
					x = clampf(x, -K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP);
					dx = 0.f;
				}
				float e = expf(x);
				kl = e - x - 1.f;
				dkl = (e - 1.f) * dx;
				if (kl > K3_CLAMP || kl < -K3_CLAMP) {
					kl = clampf(kl, -K3_CLAMP, K3_CLAMP);
					dkl = 0.f;
				}
			}
			l += klCoef * kl;
			grad += klCoef * dkl;
		}
		if (entCoef > 0.f) {
			l -= entCoef * entropy[t];
			dentropy[t] = -entCoef * w;
		}
		loss[t] = w * l;
		dlogp[t] = w * grad;
		flags[t] = fl;
	}
}
