// The emulated device's shared library: the kernels under cuda_emu.h,
// launched in-process on memory the caller owns (the device backend's
// "device memory" is host memory). Launches must not overlap: the
// emulation keeps one launch's state in globals.
#include "registry.h"

extern "C" {

// emu_launch runs kernel name over grid×block threads with args as
// cuLaunchKernel's kernelParams (args[i] points to argument i's value).
// It returns 0, or 1 with a message in err (errlen bytes, NUL-terminated).
int emu_launch(const char *name, const unsigned *grid, const unsigned *block, void **args, int nargs, char *err, int errlen) {
	auto fail = [&](const std::string &msg) {
		snprintf(err, errlen, "%s", msg.c_str());
		return 1;
	};
	auto it = emureg::registry.find(name);
	if (it == emureg::registry.end()) return fail(std::string("no kernel ") + name);
	if (it->second.nargs != nargs)
		return fail(std::string(name) + ": " + std::to_string(nargs) + " arguments, the kernel takes " + std::to_string(it->second.nargs));
	unsigned threads = block[0] * block[1] * block[2];
	if (threads == 0 || threads > 1024 || threads % 32 != 0 || grid[0] * (uint64_t)grid[1] * grid[2] == 0)
		return fail(std::string(name) + ": block of " + std::to_string(threads) + " threads (1..1024, a multiple of 32) or empty grid");
	auto &fn = it->second.call;
	emu::run(dim3(grid[0], grid[1], grid[2]), dim3(block[0], block[1], block[2]), [&] { fn(args); });
	return 0;
}

}
