// Helpers shared by the tiled attention kernels (flash.cu, flash_tc.cu).
#ifndef RLNODE_FLASH_CUH
#define RLNODE_FLASH_CUH

__device__ __forceinline__ int flash_imin(int a, int b) { return a < b ? a : b; }

// flash_kmin is the smallest start among queries [q0, q0+n) of a row.
__device__ __forceinline__ int flash_kmin(const int *st, int q0, int n) {
	int k = q0;
	for (int t = q0; t < q0 + n; t++) k = flash_imin(k, st[t]);
	return k;
}

#endif
