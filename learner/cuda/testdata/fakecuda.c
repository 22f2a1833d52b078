/* Stand-ins for libcuda, libnvrtc and libcublasLt, built by the loader
 * tests with -D switches choosing versions, results and which symbols to
 * leave out. They implement only what Probe calls; the rest return 999. */
#include <stdio.h>
#include <string.h>

#ifdef FAKE_DRIVER
#ifndef DRIVER_VERSION
#define DRIVER_VERSION 12040
#endif
#ifndef INIT_RESULT
#define INIT_RESULT 0
#endif
#ifndef DEVICE_COUNT
#define DEVICE_COUNT 1
#endif
#ifndef ARCH
#define ARCH 90
#endif
int cuDriverGetVersion(int *v) { *v = DRIVER_VERSION; return 0; }
int cuInit(unsigned flags) { return INIT_RESULT; }
int cuGetErrorString(int r, const char **s) { *s = r == 100 ? "no CUDA-capable device is detected" : "fake error"; return 0; }
#ifndef OMIT_DEVICE_COUNT
int cuDeviceGetCount(int *n) { *n = DEVICE_COUNT; return 0; }
#endif
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDeviceGetName(char *name, int len, int d) { snprintf(name, len, "Fake GPU %d", d); return 0; }
int cuDeviceGetAttribute(int *v, int attr, int d) {
	switch (attr) {
	case 75: *v = ARCH / 10; break;
	case 76: *v = ARCH % 10; break;
	case 16: *v = 132; break;
	default: *v = 0;
	}
	return 0;
}
int cuDeviceTotalMem_v2(unsigned long long *b, int d) { *b = 80ULL << 30; return 0; }
#define STUB(name) int name() { return 999; }
STUB(cuDevicePrimaryCtxRetain) STUB(cuDevicePrimaryCtxRelease_v2) STUB(cuCtxSetCurrent)
STUB(cuCtxSynchronize) STUB(cuModuleLoadData) STUB(cuModuleUnload) STUB(cuFuncSetAttribute)
STUB(cuModuleGetFunction) STUB(cuMemAlloc_v2) STUB(cuMemFree_v2) STUB(cuMemcpyHtoD_v2) STUB(cuMemcpyHtoDAsync_v2)
STUB(cuMemcpyDtoH_v2) STUB(cuMemsetD8_v2) STUB(cuMemcpyDtoD_v2)
STUB(cuMemAllocHost_v2) STUB(cuMemFreeHost) STUB(cuMemHostRegister_v2) STUB(cuMemHostUnregister)
#ifndef OMIT_LAUNCH
STUB(cuLaunchKernel)
#endif
#endif

#ifdef FAKE_NVRTC
#ifndef NVRTC_MAJOR
#define NVRTC_MAJOR 12
#define NVRTC_MINOR 4
#endif
int nvrtcVersion(int *major, int *minor) { *major = NVRTC_MAJOR; *minor = NVRTC_MINOR; return 0; }
const char *nvrtcGetErrorString(int r) { return "fake nvrtc error"; }
#define STUB(name) int name() { return 999; }
#ifdef NVRTC_BUILTINS
/* As NVRTC does on its first compile: open the builtins by soname, and
 * fail with NVRTC_ERROR_BUILTIN_OPERATION_FAILURE where they are not
 * found. */
#include <dlfcn.h>
int nvrtcCompileProgram(void *prog, int n, const char **opts) { return dlopen(NVRTC_BUILTINS, RTLD_NOW) ? 0 : 7; }
#else
STUB(nvrtcCompileProgram)
#endif
STUB(nvrtcCreateProgram) STUB(nvrtcDestroyProgram)
STUB(nvrtcGetProgramLogSize) STUB(nvrtcGetProgramLog) STUB(nvrtcGetCUBINSize)
#ifndef OMIT_CUBIN
STUB(nvrtcGetCUBIN)
#endif
#endif

#ifdef FAKE_CUBLASLT
#ifndef CUBLASLT_VERSION
#define CUBLASLT_VERSION 120402
#endif
unsigned long cublasLtGetVersion(void) { return CUBLASLT_VERSION; }
#define STUB(name) int name() { return 999; }
STUB(cublasLtCreate) STUB(cublasLtDestroy) STUB(cublasLtMatmulDescCreate)
STUB(cublasLtMatmulDescDestroy) STUB(cublasLtMatmulDescSetAttribute) STUB(cublasLtMatrixLayoutCreate)
STUB(cublasLtMatrixLayoutDestroy) STUB(cublasLtMatrixLayoutSetAttribute) STUB(cublasLtMatmulPreferenceCreate)
STUB(cublasLtMatmulPreferenceDestroy) STUB(cublasLtMatmulPreferenceSetAttribute)
STUB(cublasLtMatmulAlgoGetHeuristic) STUB(cublasLtMatmul)
#endif
