// An emulated GPU behind the CUDA driver API and cuBLASLt: a shared
// library exporting the functions the backend binds (driver.go,
// cublaslt.go), so that cuda.GPU, cuda.Device and everything above them
// run unchanged on the CPU, with NVRTC's real cubins. Loaded through
// RLNODE_CUDA_DRIVER and RLNODE_CUBLASLT (one library serves both).
//
// Device memory is host memory, handed out 256-byte aligned and filled
// with 0xff bytes (NaN as fp32 and bf16), as a GPU gives memory with
// whatever was there. Modules must be cubins for the device's
// architecture; a function must be an entry of its module's symbol table;
// a launch runs the kernel of the same name from the emulation's registry,
// after checking the grid and block against CUDA's limits and every
// pointer argument against the live allocations. Copies, memsets and
// products are checked against the allocations too, and every call that
// needs a context fails without a current one. Some checks are stricter
// than a GPU, which would read or write past an allocation without a
// word: they are there to catch the backend's mistakes here.
//
// cublasLtMatmul computes in column-major order, as documented: op(A) is
// m×k, op(B) k×n, D = alpha·op(A)·op(B) + beta·C (C not read when beta is
// 0), with fp32 accumulation. An algorithm from the heuristic carries the
// problem it was chosen for and the alignments the preference promised;
// using it for another problem, or with operands aligned less than
// promised, fails.
//
// Environment: RLNODE_EMU_GPU_COUNT (GPUs, 1 to 8; default 1), each with
// its own primary context, memory and modules: a kernel or product given
// another device's memory fails; RLNODE_EMU_GPU_ARCH (compute capability
// as 80 or 90; default 90); RLNODE_EMU_GPU_MEMORY (bytes each device has;
// default 16 GiB, and allocations beyond it fail as out of memory).
//
// Streams are the legacy default stream only. As on a GPU, launches,
// products, memsets, device-to-device copies and copies from the host are
// queued per device and run in order when the host waits: a copy to the
// host, cuCtxSynchronize, cuMemFree, cuMemFreeHost, cuMemHostUnregister,
// a synchronous copy from page-locked memory, or a module unload. A copy
// from pageable memory is staged when called; a queued copy
// (cuMemcpyHtoDAsync) reads its page-locked source when it runs, so a
// source changed before then is caught.
#include "registry.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>

namespace {

// CUresult values (cuda.h).
enum : int {
	OK = 0,
	INVALID_VALUE = 1,
	OUT_OF_MEMORY = 2,
	NOT_INITIALIZED = 3,
	INVALID_DEVICE = 101,
	INVALID_IMAGE = 200,
	INVALID_CONTEXT = 201,
	NO_BINARY_FOR_GPU = 209,
	INVALID_HANDLE = 400,
	NOT_FOUND = 500,
	ILLEGAL_ADDRESS = 700,
	LAUNCH_FAILED = 719,
	HOST_MEMORY_ALREADY_REGISTERED = 712,
	HOST_MEMORY_NOT_REGISTERED = 713,
};

const char *errorString(int r) {
	switch (r) {
	case OK: return "no error";
	case INVALID_VALUE: return "invalid argument";
	case OUT_OF_MEMORY: return "out of memory";
	case NOT_INITIALIZED: return "initialization error";
	case INVALID_DEVICE: return "invalid device ordinal";
	case INVALID_IMAGE: return "device kernel image is invalid";
	case INVALID_CONTEXT: return "invalid device context";
	case NO_BINARY_FOR_GPU: return "no kernel image is available for execution on the device";
	case INVALID_HANDLE: return "invalid resource handle";
	case NOT_FOUND: return "named symbol not found";
	case ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
	case LAUNCH_FAILED: return "unspecified launch failure";
	case HOST_MEMORY_ALREADY_REGISTERED: return "part or all of the requested memory range is already mapped";
	case HOST_MEMORY_NOT_REGISTERED: return "pointer does not correspond to a registered memory region";
	}
	return nullptr;
}

struct Module {
	int dev;
	std::set<std::string> entries;
};

struct Function {
	Module *mod;
	const emureg::Kernel *kernel;
	std::string name;
};

const int maxDevices = 8;

// Dev is one emulated GPU's primary context.
struct Dev {
	int retains;
	unsigned generation; // a context handle from before a release is stale
	uint64_t used;
};

struct Block {
	size_t bytes;
	int dev;
};

std::mutex mu; // guards everything below; launches run under it
bool inited;
int arch = 90, count = 1;
uint64_t capacity = 16ull << 30; // per device
Dev devs[maxDevices];
thread_local uintptr_t current;
std::map<uintptr_t, Block> device;     // allocations by base
std::map<uintptr_t, Block> hostAllocs; // cuMemAllocHost's
std::map<uintptr_t, Block> registered; // cuMemHostRegister's (dev -1)
std::map<uintptr_t, std::unique_ptr<Module>> modules;
std::map<uintptr_t, std::unique_ptr<Function>> functions;

// queue holds each device's stream-ordered work not yet run, as a GPU's
// legacy default stream does: launches, products, memsets, device copies
// and copies from the host. Work runs when the host waits for it.
std::vector<std::function<void()>> queue[maxDevices];

// drain runs dev's queued work in order.
void drain(int dev) {
	auto q = std::move(queue[dev]);
	queue[dev].clear();
	for (auto &op : q) op();
}

void drainAll() {
	for (int d = 0; d < count; d++) drain(d);
}

uintptr_t contextHandle(int dev) { return 0xc0de00000ull + ((uintptr_t)devs[dev].generation << 4) + dev; }

// currentDev is the device whose primary context is current on this
// thread, or -1.
int currentDev() {
	int dev = (int)(current & 0xf);
	if (current == 0 || dev >= count || devs[dev].retains == 0 || current != contextHandle(dev)) return -1;
	return dev;
}

// within is the block of m that holds [p, p+n) (the end of a block counts
// as inside for n = 0), or nullptr.
const Block *within(const std::map<uintptr_t, Block> &m, uintptr_t p, uint64_t n) {
	auto it = m.upper_bound(p);
	if (it == m.begin()) return nullptr;
	--it;
	const Block &b = it->second;
	return p - it->first <= b.bytes && n <= b.bytes - (p - it->first) ? &b : nullptr;
}

// inDevice reports whether [p, p+n) lies inside one live allocation, on
// device dev unless dev is -1.
bool inDevice(uintptr_t p, uint64_t n, int dev = -1) {
	const Block *b = within(device, p, n);
	return b && (dev < 0 || b->dev == dev);
}

// pageLocked reports whether [p, p+n) is page-locked host memory
// (cuMemAllocHost's or cuMemHostRegister's).
bool pageLocked(const void *p, uint64_t n) {
	return within(hostAllocs, (uintptr_t)p, n) || within(registered, (uintptr_t)p, n);
}

// touchesDevice reports whether [p, p+n) overlaps a live allocation.
bool touchesDevice(uintptr_t p, uint64_t n) {
	auto it = device.upper_bound(p + (n ? n - 1 : 0));
	if (it == device.begin()) return false;
	--it;
	return p < it->first + it->second.bytes && it->first < p + std::max<uint64_t>(n, 1);
}

int needContext() {
	if (!inited) return NOT_INITIALIZED;
	if (currentDev() < 0) return INVALID_CONTEXT;
	return OK;
}

template <typename M, typename F> void eraseIf(M &m, F f) {
	for (auto it = m.begin(); it != m.end();) it = f(*it) ? m.erase(it) : std::next(it);
}

// destroyContext frees what dev's primary context owned when its last
// retain is released.
void destroyContext(int dev) {
	drain(dev);
	auto freed = [dev](auto &kv) {
		if (kv.second.dev != dev) return false;
		free((void *)kv.first);
		return true;
	};
	eraseIf(device, freed);
	eraseIf(hostAllocs, freed);
	eraseIf(functions, [dev](auto &kv) { return kv.second->mod->dev == dev; });
	eraseIf(modules, [dev](auto &kv) { return kv.second->dev == dev; });
	if (std::none_of(devs, devs + count, [](const Dev &d) { return d.retains > 0; })) registered.clear();
	devs[dev].used = 0;
	devs[dev].generation++;
}

// ELF64 as a cubin has it.
struct Ehdr {
	unsigned char ident[16];
	uint16_t type, machine;
	uint32_t version;
	uint64_t entry, phoff, shoff;
	uint32_t flags;
	uint16_t ehsize, phentsize, phnum, shentsize, shnum, shstrndx;
};
struct Shdr {
	uint32_t name, type;
	uint64_t flags, addr, offset, size;
	uint32_t link, info;
	uint64_t addralign, entsize;
};
struct Sym {
	uint32_t name;
	unsigned char info, other;
	uint16_t shndx;
	uint64_t value, size;
};

const uint16_t EM_CUDA = 190;
const unsigned char STO_CUDA_ENTRY = 0x10;

// readCubin checks image is a cubin for the device and lists its kernel
// entries. The image has no length: the section table bounds it, and
// offsets past 256 MiB are refused as garbage.
int readCubin(const unsigned char *img, std::set<std::string> &entries) {
	const uint64_t limit = 256ull << 20;
	Ehdr h;
	memcpy(&h, img, sizeof h);
	if (memcmp(h.ident, "\x7f" "ELF", 4) != 0 || h.ident[4] != 2) return INVALID_IMAGE;
	if (h.machine != EM_CUDA) return INVALID_IMAGE;
	// The SM version sits in the low byte of e_flags (NVRTC 11 and 12);
	// newer ELF ABIs move it to the next byte.
	if ((int)(h.flags & 0xff) != arch && (int)(h.flags >> 8 & 0xff) != arch) return NO_BINARY_FOR_GPU;
	if (h.shentsize != sizeof(Shdr) || h.shoff > limit || h.shnum > 65000) return INVALID_IMAGE;
	auto sec = [&](int i) {
		Shdr s;
		memcpy(&s, img + h.shoff + (uint64_t)i * sizeof(Shdr), sizeof s);
		return s;
	};
	for (int i = 0; i < h.shnum; i++) {
		Shdr s = sec(i);
		if (s.type != 2) continue; // SHT_SYMTAB
		if (s.offset > limit || s.size > limit || s.entsize != sizeof(Sym) || s.link >= h.shnum) return INVALID_IMAGE;
		Shdr str = sec(s.link);
		if (str.offset > limit || str.size > limit) return INVALID_IMAGE;
		for (uint64_t j = 0; j < s.size / sizeof(Sym); j++) {
			Sym y;
			memcpy(&y, img + s.offset + j * sizeof(Sym), sizeof y);
			if ((y.info & 0xf) != 2 || !(y.other & STO_CUDA_ENTRY) || y.name >= str.size) continue; // STT_FUNC entries
			const char *n = (const char *)img + str.offset + y.name;
			entries.insert(std::string(n, strnlen(n, str.size - y.name)));
		}
	}
	return entries.empty() ? INVALID_IMAGE : OK;
}

// cuBLASLt's objects.
enum : int {
	LT_OK = 0,
	LT_NOT_INITIALIZED = 1,
	LT_INVALID_VALUE = 7,
	LT_EXECUTION_FAILED = 13,
	LT_NOT_SUPPORTED = 15,
};
enum : int { R32F = 0, R16BF = 14, COMPUTE32F = 68 };

struct LtHandle {
	int magic = 0x4c54;
};
struct LtDesc {
	int transa = 0, transb = 0;
};
struct LtLayout {
	int type;
	uint64_t rows, cols;
	int64_t ld;
	int32_t batch = 1;
	int64_t stride = 0;
};
struct LtPref {
	uint64_t workspace = 0;
	uint32_t align[4] = {256, 256, 256, 256};
};
std::set<void *> ltObjects; // live handles and descriptors

// Algo is what the heuristic writes into the first 64 bytes of a result
// (cublasLtMatmulAlgo_t): the problem it was chosen for and the promises.
struct Algo {
	uint64_t magic;
	uint64_t problem;
	uint32_t align[4];
	uint64_t workspace;
	uint64_t pad[3];
};
static_assert(sizeof(Algo) == 64);
const uint64_t algoMagic = 0x726c6e6f64656c74ull;

struct HeuristicResult {
	Algo algo;
	uint64_t workspaceSize;
	int state;
	float wavesCount;
	int reserved[4];
};
static_assert(sizeof(HeuristicResult) == 96);

uint64_t mix(uint64_t h, uint64_t v) {
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h;
}

uint64_t problemHash(const LtDesc *d, const LtLayout *ls[4]) {
	uint64_t h = mix(d->transa, d->transb);
	for (int i = 0; i < 4; i++) {
		const LtLayout *l = ls[i];
		for (uint64_t v : {(uint64_t)l->type, l->rows, l->cols, (uint64_t)l->ld, (uint64_t)l->batch, (uint64_t)l->stride}) h = mix(h, v);
	}
	return h;
}

// checkProblem validates the shapes and types of D = op(A)·op(B) + C.
int checkProblem(const LtDesc *d, const LtLayout *a, const LtLayout *b, const LtLayout *c, const LtLayout *dd) {
	uint64_t m = d->transa ? a->cols : a->rows, k = d->transa ? a->rows : a->cols;
	uint64_t kb = d->transb ? b->cols : b->rows, n = d->transb ? b->rows : b->cols;
	if (k != kb || c->rows != m || c->cols != n || dd->rows != m || dd->cols != n) return LT_INVALID_VALUE;
	if (a->type != b->type || c->type != dd->type) return LT_NOT_SUPPORTED;
	if (!(a->type == R32F && c->type == R32F) && !(a->type == R16BF && (c->type == R32F || c->type == R16BF))) return LT_NOT_SUPPORTED;
	if (a->batch != b->batch || a->batch != c->batch || a->batch != dd->batch) return LT_INVALID_VALUE;
	return LT_OK;
}

size_t elemSize(int type) { return type == R16BF ? 2 : 4; }

// extent is the bytes a layout's matrices span from their base.
uint64_t extent(const LtLayout *l) {
	if (l->rows == 0 || l->cols == 0) return 0;
	uint64_t last = (l->cols - 1) * (uint64_t)l->ld + l->rows;
	if (l->batch > 1) last += (uint64_t)(l->batch - 1) * (uint64_t)l->stride;
	return last * elemSize(l->type);
}

float load(const void *p, int type, uint64_t i) {
	if (type == R16BF) {
		uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
		float f;
		memcpy(&f, &u, 4);
		return f;
	}
	return ((const float *)p)[i];
}

void store(void *p, int type, uint64_t i, float v) {
	if (type == R16BF) {
		uint32_t u;
		memcpy(&u, &v, 4);
		if ((u & 0x7fffffff) > 0x7f800000) ((uint16_t *)p)[i] = (uint16_t)((u >> 16) | 0x40);
		else ((uint16_t *)p)[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
		return;
	}
	((float *)p)[i] = v;
}

void matmul(const LtDesc *d, const LtLayout *a, const LtLayout *b, const LtLayout *c, const LtLayout *dd, float al, float be, const void *A, const void *B, const void *C, void *D);

// ltNew makes a live cuBLASLt object of v at *out.
template <typename T> int ltNew(T **out, const T &v) {
	if (!out) return LT_INVALID_VALUE;
	*out = new T(v);
	ltObjects.insert(*out);
	return LT_OK;
}

// ltDestroy deletes a live cuBLASLt object.
template <typename T> int ltDestroy(T *o) {
	std::lock_guard<std::mutex> l(mu);
	if (!ltObjects.erase(o)) return LT_INVALID_VALUE;
	delete o;
	return LT_OK;
}

} // namespace

extern "C" {

// ---- driver API ----

int cuDriverGetVersion(int *v) {
	if (!v) return INVALID_VALUE;
	*v = 12040;
	return OK;
}

int cuInit(unsigned flags) {
	std::lock_guard<std::mutex> l(mu);
	if (flags != 0) return INVALID_VALUE;
	if (const char *a = getenv("RLNODE_EMU_GPU_ARCH")) arch = atoi(a);
	if (const char *m = getenv("RLNODE_EMU_GPU_MEMORY")) capacity = strtoull(m, nullptr, 10);
	if (const char *c = getenv("RLNODE_EMU_GPU_COUNT")) count = std::clamp(atoi(c), 1, maxDevices);
	inited = true;
	return OK;
}

int cuGetErrorString(int r, const char **s) {
	if (!s) return INVALID_VALUE;
	*s = errorString(r);
	return *s ? OK : INVALID_VALUE;
}

int cuDeviceGetCount(int *n) {
	if (!inited) return NOT_INITIALIZED;
	*n = count;
	return OK;
}

int cuDeviceGet(int *d, int ordinal) {
	if (!inited) return NOT_INITIALIZED;
	if (ordinal < 0 || ordinal >= count) return INVALID_DEVICE;
	*d = ordinal;
	return OK;
}

int cuDeviceGetName(char *name, int len, int d) {
	if (!inited) return NOT_INITIALIZED;
	if (d < 0 || d >= count) return INVALID_DEVICE;
	if (!name || len <= 0) return INVALID_VALUE;
	snprintf(name, len, "rlnode emulated GPU (CPU)");
	return OK;
}

int cuDeviceGetAttribute(int *v, int attr, int d) {
	if (!inited) return NOT_INITIALIZED;
	if (d < 0 || d >= count) return INVALID_DEVICE;
	switch (attr) {
	case 16: *v = 4; return OK; // multiprocessors
	case 75: *v = arch / 10; return OK;
	case 76: *v = arch % 10; return OK;
	}
	return INVALID_VALUE;
}

int cuDeviceTotalMem_v2(size_t *bytes, int d) {
	if (!inited) return NOT_INITIALIZED;
	if (d < 0 || d >= count) return INVALID_DEVICE;
	*bytes = capacity;
	return OK;
}

int cuDevicePrimaryCtxRetain(uintptr_t *ctx, int d) {
	std::lock_guard<std::mutex> l(mu);
	if (!inited) return NOT_INITIALIZED;
	if (d < 0 || d >= count) return INVALID_DEVICE;
	devs[d].retains++;
	*ctx = contextHandle(d);
	return OK;
}

int cuDevicePrimaryCtxRelease_v2(int d) {
	std::lock_guard<std::mutex> l(mu);
	if (!inited) return NOT_INITIALIZED;
	if (d < 0 || d >= count) return INVALID_DEVICE;
	if (devs[d].retains == 0) return INVALID_CONTEXT;
	if (--devs[d].retains == 0) destroyContext(d);
	return OK;
}

int cuCtxSetCurrent(uintptr_t ctx) {
	std::lock_guard<std::mutex> l(mu);
	if (!inited) return NOT_INITIALIZED;
	int dev = (int)(ctx & 0xf);
	if (ctx != 0 && (dev >= count || devs[dev].retains == 0 || ctx != contextHandle(dev))) return INVALID_CONTEXT;
	current = ctx;
	return OK;
}

int cuCtxSynchronize() {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	drain(currentDev());
	return OK;
}

int cuModuleLoadData(uintptr_t *m, const void *image) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	if (!m || !image) return INVALID_VALUE;
	auto mod = std::make_unique<Module>();
	mod->dev = currentDev();
	if (int r = readCubin((const unsigned char *)image, mod->entries)) return r;
	*m = (uintptr_t)mod.get();
	modules[*m] = std::move(mod);
	return OK;
}

int cuModuleUnload(uintptr_t m) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	auto it = modules.find(m);
	if (it == modules.end()) return INVALID_HANDLE;
	if (it->second->dev != currentDev()) return INVALID_CONTEXT;
	drain(currentDev());
	for (auto f = functions.begin(); f != functions.end();)
		f = f->second->mod == it->second.get() ? functions.erase(f) : std::next(f);
	modules.erase(it);
	return OK;
}

int cuModuleGetFunction(uintptr_t *f, uintptr_t m, const char *name) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	auto it = modules.find(m);
	if (it == modules.end()) return INVALID_HANDLE;
	if (it->second->dev != currentDev()) return INVALID_CONTEXT;
	if (!f || !name || !it->second->entries.count(name)) return NOT_FOUND;
	auto k = emureg::registry.find(name);
	if (k == emureg::registry.end()) return NOT_FOUND;
	auto fn = std::make_unique<Function>(Function{it->second.get(), &k->second, name});
	*f = (uintptr_t)fn.get();
	functions[*f] = std::move(fn);
	return OK;
}

int cuFuncSetAttribute(uintptr_t f, int attr, int v) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	return functions.count(f) ? OK : INVALID_HANDLE;
}

int cuLaunchKernel(uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem, uintptr_t stream, void **params, void **extra) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	auto it = functions.find(f);
	if (it == functions.end()) return INVALID_HANDLE;
	int dev = currentDev();
	if (it->second->mod->dev != dev) return INVALID_CONTEXT;
	const emureg::Kernel &k = *it->second->kernel;
	if (stream != 0) return INVALID_HANDLE;
	if (extra != nullptr || (k.nargs > 0 && params == nullptr)) return INVALID_VALUE;
	if (gx == 0 || gy == 0 || gz == 0 || gx > 0x7fffffffu || gy > 65535 || gz > 65535) return INVALID_VALUE;
	if (bx == 0 || by == 0 || bz == 0 || bx > 1024 || by > 1024 || bz > 64 || (uint64_t)bx * by * bz > 1024) return INVALID_VALUE;
	if (smem > 48 * 1024) return INVALID_VALUE;
	if (bx * by * bz % 32 != 0) {
		fprintf(stderr, "emulated GPU: %s: the emulation runs whole warps only (block %ux%ux%u)\n", it->second->name.c_str(), bx, by, bz);
		return LAUNCH_FAILED;
	}
	for (int i = 0; i < k.nargs; i++) {
		if (!(k.pointers >> i & 1)) continue;
		uintptr_t p = *(const uintptr_t *)params[i];
		if (p != 0 && !inDevice(p, 0, dev)) {
			fprintf(stderr, "emulated GPU %d: %s: argument %d (%#lx) is not in this device's memory\n", dev, it->second->name.c_str(), i, (unsigned long)p);
			return ILLEGAL_ADDRESS;
		}
	}
	// The arguments are copied now, as cuLaunchKernel does: the caller
	// may reuse its parameter array once the call returns.
	struct Args {
		std::vector<uint64_t> values;
		std::vector<void *> ptrs;
	};
	auto a = std::make_shared<Args>();
	a->values.resize(k.nargs);
	a->ptrs.resize(k.nargs);
	for (int i = 0; i < k.nargs; i++) {
		memcpy(&a->values[i], params[i], std::min<size_t>(k.sizes[i], 8));
		a->ptrs[i] = &a->values[i];
	}
	queue[dev].push_back([a, &k, gx, gy, gz, bx, by, bz] { emu::run(dim3(gx, gy, gz), dim3(bx, by, bz), [&] { k.call(a->ptrs.data()); }); });
	return OK;
}

int cuMemAlloc_v2(uint64_t *p, size_t bytes) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	if (!p || bytes == 0) return INVALID_VALUE;
	Dev &d = devs[currentDev()];
	if (bytes > capacity - d.used) return OUT_OF_MEMORY;
	size_t rounded = (bytes + 255) / 256 * 256;
	void *m = aligned_alloc(256, rounded);
	if (!m) return OUT_OF_MEMORY;
	memset(m, 0xff, rounded);
	device[(uintptr_t)m] = Block{bytes, currentDev()};
	d.used += bytes;
	*p = (uintptr_t)m;
	return OK;
}

int cuMemFree_v2(uint64_t p) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	auto it = device.find(p);
	if (it == device.end()) return INVALID_VALUE;
	drain(it->second.dev); // cuMemFree waits for the device
	devs[it->second.dev].used -= it->second.bytes;
	free((void *)p);
	device.erase(it);
	return OK;
}

int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	if (n == 0) return OK;
	if (!inDevice(dst, n) || !src || touchesDevice((uintptr_t)src, n)) return INVALID_VALUE;
	if (pageLocked(src, n)) {
		// From page-locked memory the copy is synchronous: it runs after
		// the queued work.
		drain(currentDev());
		memcpy((void *)dst, src, n);
		return OK;
	}
	// From pageable memory the driver stages the bytes and returns; the
	// copy runs in stream order.
	auto staged = std::make_shared<std::vector<unsigned char>>((const unsigned char *)src, (const unsigned char *)src + n);
	queue[currentDev()].push_back([staged, dst] { memcpy((void *)dst, staged->data(), staged->size()); });
	return OK;
}

int cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, uintptr_t stream) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	if (stream != 0) return INVALID_HANDLE;
	if (n == 0) return OK;
	if (!inDevice(dst, n) || !src || touchesDevice((uintptr_t)src, n)) return INVALID_VALUE;
	// The backend promises page-locked sources for queued copies. The
	// source is read when the copy runs: changing it before then changes
	// what arrives, as on a GPU.
	if (!pageLocked(src, n)) return INVALID_VALUE;
	queue[currentDev()].push_back([dst, src, n] { memcpy((void *)dst, src, n); });
	return OK;
}

int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	if (n == 0) return OK;
	if (!inDevice(src, n) || !dst || touchesDevice((uintptr_t)dst, n)) return INVALID_VALUE;
	drain(currentDev());
	memcpy(dst, (const void *)src, n);
	return OK;
}

int cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t n) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	if (n == 0) return OK;
	if (!inDevice(dst, n) || !inDevice(src, n)) return INVALID_VALUE;
	queue[currentDev()].push_back([dst, src, n] { memmove((void *)dst, (const void *)src, n); });
	return OK;
}

int cuMemsetD8_v2(uint64_t dst, unsigned char v, size_t n) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	if (n == 0) return OK;
	if (!inDevice(dst, n, currentDev())) return INVALID_VALUE;
	queue[currentDev()].push_back([dst, v, n] { memset((void *)dst, v, n); });
	return OK;
}

int cuMemAllocHost_v2(void **p, size_t bytes) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	if (!p || bytes == 0) return INVALID_VALUE;
	void *m = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
	if (!m) return OUT_OF_MEMORY;
	hostAllocs[(uintptr_t)m] = Block{bytes, currentDev()};
	*p = m;
	return OK;
}

int cuMemFreeHost(void *p) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	auto it = hostAllocs.find((uintptr_t)p);
	if (it == hostAllocs.end()) return INVALID_VALUE;
	drainAll(); // queued copies may read it
	free(p);
	hostAllocs.erase(it);
	return OK;
}

int cuMemHostRegister_v2(void *p, size_t bytes, unsigned flags) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	if (!p || bytes == 0) return INVALID_VALUE;
	uintptr_t a = (uintptr_t)p;
	auto it = registered.upper_bound(a + bytes - 1);
	if (it != registered.begin() && std::prev(it)->first + std::prev(it)->second.bytes > a) return HOST_MEMORY_ALREADY_REGISTERED;
	registered[a] = Block{bytes, -1};
	return OK;
}

int cuMemHostUnregister(void *p) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r;
	if (!registered.count((uintptr_t)p)) return HOST_MEMORY_NOT_REGISTERED;
	drainAll(); // queued copies may read it
	registered.erase((uintptr_t)p);
	return OK;
}

// ---- cuBLASLt ----

size_t cublasLtGetVersion() { return 120405; }

int cublasLtCreate(LtHandle **h) {
	std::lock_guard<std::mutex> l(mu);
	return ltNew(h, LtHandle{});
}

int cublasLtDestroy(LtHandle *h) { return ltDestroy(h); }

int cublasLtMatmulDescCreate(LtDesc **d, int compute, int scale) {
	std::lock_guard<std::mutex> l(mu);
	if (compute != COMPUTE32F || scale != R32F) return LT_NOT_SUPPORTED;
	return ltNew(d, LtDesc{});
}

int cublasLtMatmulDescDestroy(LtDesc *d) { return ltDestroy(d); }

int cublasLtMatmulDescSetAttribute(LtDesc *d, int attr, const void *buf, size_t size) {
	std::lock_guard<std::mutex> l(mu);
	if (!ltObjects.count(d) || !buf) return LT_INVALID_VALUE;
	if ((attr == 3 || attr == 4) && size == 4) { // TRANSA, TRANSB
		int32_t v;
		memcpy(&v, buf, 4);
		if (v != 0 && v != 1) return LT_NOT_SUPPORTED;
		(attr == 3 ? d->transa : d->transb) = v;
		return LT_OK;
	}
	return LT_INVALID_VALUE;
}

int cublasLtMatrixLayoutCreate(LtLayout **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
	std::lock_guard<std::mutex> g(mu);
	if (type != R32F && type != R16BF) return LT_NOT_SUPPORTED;
	if (ld < (int64_t)std::max<uint64_t>(rows, 1)) return LT_INVALID_VALUE;
	return ltNew(l, LtLayout{type, rows, cols, ld});
}

int cublasLtMatrixLayoutDestroy(LtLayout *l) { return ltDestroy(l); }

int cublasLtMatrixLayoutSetAttribute(LtLayout *l, int attr, const void *buf, size_t size) {
	std::lock_guard<std::mutex> g(mu);
	if (!ltObjects.count(l) || !buf) return LT_INVALID_VALUE;
	if (attr == 5 && size == 4) { // BATCH_COUNT
		memcpy(&l->batch, buf, 4);
		return l->batch >= 1 ? LT_OK : LT_INVALID_VALUE;
	}
	if (attr == 6 && size == 8) { // STRIDED_BATCH_OFFSET
		memcpy(&l->stride, buf, 8);
		return LT_OK;
	}
	return LT_INVALID_VALUE;
}

int cublasLtMatmulPreferenceCreate(LtPref **p) {
	std::lock_guard<std::mutex> l(mu);
	return ltNew(p, LtPref{});
}

int cublasLtMatmulPreferenceDestroy(LtPref *p) { return ltDestroy(p); }

int cublasLtMatmulPreferenceSetAttribute(LtPref *p, int attr, const void *buf, size_t size) {
	std::lock_guard<std::mutex> l(mu);
	if (!ltObjects.count(p) || !buf) return LT_INVALID_VALUE;
	if (attr == 1 && size == 8) { // MAX_WORKSPACE_BYTES
		memcpy(&p->workspace, buf, 8);
		return LT_OK;
	}
	if (attr >= 5 && attr <= 8 && size == 4) { // MIN_ALIGNMENT_{A,B,C,D}_BYTES
		memcpy(&p->align[attr - 5], buf, 4);
		return LT_OK;
	}
	return LT_INVALID_VALUE;
}

int cublasLtMatmulAlgoGetHeuristic(LtHandle *h, LtDesc *d, LtLayout *a, LtLayout *b, LtLayout *c, LtLayout *dd, LtPref *p, int requested, HeuristicResult *out, int *returned) {
	std::lock_guard<std::mutex> l(mu);
	for (void *o : {(void *)h, (void *)d, (void *)a, (void *)b, (void *)c, (void *)dd, (void *)p})
		if (!ltObjects.count(o)) return LT_INVALID_VALUE;
	if (requested < 1 || !out || !returned) return LT_INVALID_VALUE;
	if (int r = checkProblem(d, a, b, c, dd)) return r;
	const LtLayout *ls[4] = {a, b, c, dd};
	HeuristicResult res{};
	res.algo.magic = algoMagic;
	res.algo.problem = problemHash(d, ls);
	memcpy(res.algo.align, p->align, sizeof p->align);
	res.workspaceSize = std::min<uint64_t>(p->workspace, 1 << 20);
	res.algo.workspace = res.workspaceSize;
	res.wavesCount = 1;
	*out = res;
	*returned = 1;
	return LT_OK;
}

int cublasLtMatmul(LtHandle *h, LtDesc *d, const float *alpha, const void *A, LtLayout *a, const void *B, LtLayout *b, const float *beta, const void *C, LtLayout *c, void *D, LtLayout *dd, const Algo *algo, void *ws, size_t wsSize, uintptr_t stream) {
	std::lock_guard<std::mutex> l(mu);
	if (int r = needContext()) return r == NOT_INITIALIZED ? LT_NOT_INITIALIZED : LT_EXECUTION_FAILED;
	for (void *o : {(void *)h, (void *)d, (void *)a, (void *)b, (void *)c, (void *)dd})
		if (!ltObjects.count(o)) return LT_INVALID_VALUE;
	if (stream != 0 || !alpha || !beta || !algo) return LT_INVALID_VALUE;
	if (int r = checkProblem(d, a, b, c, dd)) return r;
	const LtLayout *ls[4] = {a, b, c, dd};
	if (algo->magic != algoMagic || algo->problem != problemHash(d, ls)) {
		fprintf(stderr, "emulated cuBLASLt: the algorithm was chosen for another problem\n");
		return LT_INVALID_VALUE;
	}
	const void *ptrs[4] = {A, B, C, D};
	for (int i = 0; i < 4; i++) {
		if ((uintptr_t)ptrs[i] % algo->align[i] != 0) {
			fprintf(stderr, "emulated cuBLASLt: operand %c at %p is aligned less than the %u bytes promised\n", "ABCD"[i], ptrs[i], algo->align[i]);
			return LT_NOT_SUPPORTED;
		}
		if (!inDevice((uintptr_t)ptrs[i], extent(ls[i]), currentDev())) {
			fprintf(stderr, "emulated cuBLASLt: operand %c at %p (%lu bytes) is not in the current device's memory\n", "ABCD"[i], ptrs[i], (unsigned long)extent(ls[i]));
			return LT_EXECUTION_FAILED;
		}
	}
	if (wsSize < algo->workspace || (algo->workspace > 0 && !inDevice((uintptr_t)ws, wsSize, currentDev()))) return LT_INVALID_VALUE;
	if (C == D && (c->type != dd->type || c->ld != dd->ld || c->stride != dd->stride)) return LT_INVALID_VALUE;
	// alpha and beta are read now (host pointer mode); the descriptors'
	// contents travel with the queued product.
	queue[currentDev()].push_back([d = *d, a = *a, b = *b, c = *c, dd = *dd, al = *alpha, be = *beta, A, B, C, D] {
		matmul(&d, &a, &b, &c, &dd, al, be, A, B, C, D);
	});
	return LT_OK;
}

} // extern "C"

namespace {

// matmul computes D = al·op(A)·op(B) + be·C in column-major order.
void matmul(const LtDesc *d, const LtLayout *a, const LtLayout *b, const LtLayout *c, const LtLayout *dd, float al, float be, const void *A, const void *B, const void *C, void *D) {
	uint64_t m = dd->rows, n = dd->cols, k = d->transa ? a->rows : a->cols;
	for (int32_t t = 0; t < dd->batch; t++) {
		uint64_t oa = (uint64_t)t * a->stride, ob = (uint64_t)t * b->stride, oc = (uint64_t)t * c->stride, od = (uint64_t)t * dd->stride;
		for (uint64_t j = 0; j < n; j++)
			for (uint64_t i = 0; i < m; i++) {
				float s = 0;
				for (uint64_t q = 0; q < k; q++) {
					float x = load(A, a->type, oa + (d->transa ? q + i * a->ld : i + q * a->ld));
					float y = load(B, b->type, ob + (d->transb ? j + q * b->ld : q + j * b->ld));
					s = fmaf(x, y, s);
				}
				float v = al * s;
				if (be != 0) v = fmaf(be, load(C, c->type, oc + i + j * c->ld), v);
				store(D, dd->type, od + i + j * dd->ld, v);
			}
	}
}

} // namespace
