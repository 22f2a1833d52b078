// Package cuda reaches NVIDIA GPUs without cgo: the CUDA driver API,
// cuBLASLt and NVRTC are loaded at run time with purego, so the one binary
// builds without CUDA headers (CGO_ENABLED=0 included) and runs on hosts
// with and without a GPU. Available reports whether this host can run the
// backend and, when it cannot, why (no driver, no device, too old, a missing
// symbol).
//
// The kernels are CUDA C in kernels/, one source for the GPU (compiled by
// NVRTC) and for the CPU emulation in emu/ (compiled by the host C++
// compiler), against which tests check them on machines without a GPU.
// emu/driver.cpp is an emulated GPU behind the driver API and cuBLASLt
// (EmulatedGPUEnv), so that GPU and Device themselves run there too.
// docs/cuda.md describes the backend's design and what is still missing.
package cuda
