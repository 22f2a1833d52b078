// The kernels and the registry of their names (registry.inc, written by
// the Go side), shared by the emulation's program (harness.cpp) and its
// shared library (device.cpp).
#ifndef RLNODE_EMU_REGISTRY_H
#define RLNODE_EMU_REGISTRY_H

#include "cuda_emu.h"

#include <stdio.h>

#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include KERNELS_INC

namespace emureg {

template <typename... A, size_t... I> void call(void (*f)(A...), void **a, std::index_sequence<I...>) {
	f(*static_cast<std::remove_reference_t<A> *>(a[I])...);
}

template <typename... A> std::pair<int, std::function<void(void **)>> invoker(void (*f)(A...)) {
	return {(int)sizeof...(A), [f](void **a) { call(f, a, std::index_sequence_for<A...>{}); }};
}

// registry maps a kernel's name to its parameter count and a call taking
// an array of pointers to its arguments (as cuLaunchKernel's
// kernelParams).
inline const std::map<std::string, std::pair<int, std::function<void(void **)>>> registry = {
#include "registry.inc"
};

} // namespace emureg

#endif
