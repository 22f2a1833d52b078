// The emulation's driver: reads launches from stdin, runs them under
// cuda_emu.h and writes the buffers back to stdout. The kernels and the
// registry of their names (registry.inc, written by the Go side) are
// included at build time. Protocol, little-endian, per launch:
//   in:  u32 name length, name, u32 grid x y z, u32 block x y z, u32 nargs,
//        per arg u8 kind then: 'B' u64 bytes + data | 'N' | 'i' i32 |
//        'l' i64 | 'f' f32 | 'd' f64
//   out: u32 status (0 ok), then per 'B' arg u64 bytes + data; on error
//        u32 message length + message.
#include "registry.h"

namespace {

using emureg::registry;

const uint64_t maxBuffer = 1ull << 30;

bool readFull(void *p, size_t n) { return fread(p, 1, n, stdin) == n; }
template <typename T> bool readVal(T &v) { return readFull(&v, sizeof v); }
void writeFull(const void *p, size_t n) { fwrite(p, 1, n, stdout); }

void fail(const std::string &msg) {
	uint32_t st = 1, n = (uint32_t)msg.size();
	writeFull(&st, 4);
	writeFull(&n, 4);
	writeFull(msg.data(), n);
	fflush(stdout);
}

struct Arg {
	char kind;
	uint64_t len = 0;
	std::vector<unsigned char> buf;
	void *ptr = nullptr;
	union {
		int32_t i;
		int64_t l;
		float f;
		double d;
	} v;
};

} // namespace

int main() {
	for (;;) {
		uint32_t n;
		if (!readVal(n)) return 0; // end of input
		if (n > 256) return 2;
		std::string name(n, '\0');
		uint32_t g[3], b[3], nargs;
		if (!readFull(&name[0], n) || !readFull(g, sizeof g) || !readFull(b, sizeof b) || !readVal(nargs) || nargs > 64) return 2;
		std::vector<Arg> args(nargs);
		std::vector<void *> ptrs(nargs);
		for (uint32_t i = 0; i < nargs; i++) {
			Arg &a = args[i];
			if (!readVal(a.kind)) return 2;
			switch (a.kind) {
			case 'B': {
				if (!readVal(a.len) || a.len > maxBuffer) return 2;
				a.buf.resize(a.len ? a.len : 1);
				if (!readFull(a.buf.data(), a.len)) return 2;
				a.ptr = a.buf.data();
				ptrs[i] = &a.ptr;
				break;
			}
			case 'N': ptrs[i] = &a.ptr; break;
			case 'i': if (!readVal(a.v.i)) return 2; ptrs[i] = &a.v; break;
			case 'l': if (!readVal(a.v.l)) return 2; ptrs[i] = &a.v; break;
			case 'f': if (!readVal(a.v.f)) return 2; ptrs[i] = &a.v; break;
			case 'd': if (!readVal(a.v.d)) return 2; ptrs[i] = &a.v; break;
			default: return 2;
			}
		}
		auto it = registry.find(name);
		if (it == registry.end()) {
			fail("no kernel " + name);
			continue;
		}
		if (it->second.nargs != (int)nargs) {
			fail(name + ": " + std::to_string(nargs) + " arguments, the kernel takes " + std::to_string(it->second.nargs));
			continue;
		}
		unsigned threads = b[0] * b[1] * b[2];
		if (threads == 0 || threads > 1024 || threads % 32 != 0 || g[0] * (uint64_t)g[1] * g[2] == 0) {
			fail(name + ": block of " + std::to_string(threads) + " threads (1..1024, a multiple of 32) or empty grid");
			continue;
		}
		auto &fn = it->second.call;
		emu::run(dim3(g[0], g[1], g[2]), dim3(b[0], b[1], b[2]), [&] { fn(ptrs.data()); });
		uint32_t ok = 0;
		writeFull(&ok, 4);
		for (auto &a : args) {
			if (a.kind != 'B') continue;
			writeFull(&a.len, 8);
			writeFull(a.buf.data(), a.len);
		}
		fflush(stdout);
	}
}
