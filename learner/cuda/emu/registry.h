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
#include <vector>

#include KERNELS_INC

namespace emureg {

template <typename... A, size_t... I> void call(void (*f)(A...), void **a, std::index_sequence<I...>) {
	f(*static_cast<std::remove_reference_t<A> *>(a[I])...);
}

// Kernel is one kernel's parameter count, which of its parameters are
// pointers (bit i for parameter i), a call taking an array of pointers to
// its arguments (as cuLaunchKernel's kernelParams), and the parameters'
// sizes.
struct Kernel {
	int nargs;
	uint64_t pointers;
	std::function<void(void **)> call;
	std::vector<unsigned char> sizes; // bytes of each parameter
};

template <typename... A, size_t... I> uint64_t pointerMask(std::index_sequence<I...>) {
	return ((std::is_pointer_v<std::remove_reference_t<A>> ? uint64_t(1) << I : 0) | ... | 0);
}

template <typename... A> Kernel invoker(void (*f)(A...)) {
	static_assert(sizeof...(A) <= 64, "a kernel takes at most 64 parameters here");
	return {(int)sizeof...(A), pointerMask<A...>(std::index_sequence_for<A...>{}), [f](void **a) { call(f, a, std::index_sequence_for<A...>{}); },
		{(unsigned char)sizeof(std::remove_reference_t<A>)...}};
}

// registry maps a kernel's name to its Kernel.
inline const std::map<std::string, Kernel> registry = {
#include "registry.inc"
};

} // namespace emureg

#endif
