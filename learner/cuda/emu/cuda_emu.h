// A small CUDA emulation for the host C++ compiler, enough to run the
// kernels in ../kernels on a CPU and check them against the CPU backend:
// the blocks of a grid run one after another, not in index order (the odd
// blocks from the last down, then the even ones from the first up), so a
// kernel whose blocks read what other blocks of the same launch write,
// which a GPU runs in no set order, fails here too; the threads of a block are
// OS threads that meet at a barrier for __syncthreads; __shared__ is static
// storage, which the one block running at a time owns; warp shuffles and
// votes go through a per-warp exchange with its own barrier. A thread that
// returns early leaves its block's and warp's barriers, as on the GPU;
// a lane that reads an exited lane's value through a shuffle (undefined on
// the GPU) stops the process with a message, as does a 32-bit shared
// memory load of a misaligned address (a fault on the GPU; see
// emu::aligned).
// Speed is no aim: it runs small shapes in tests. Dynamic shared memory,
// atomics and cooperative groups are not provided.
#ifndef RLNODE_CUDA_EMU_H
#define RLNODE_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
	unsigned x, y, z;
	dim3(unsigned x = 1, unsigned y = 1, unsigned z = 1) : x(x), y(y), z(z) {}
};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__

#ifndef EMU_SPIN
#define EMU_SPIN 16
#endif

namespace emu {

// Barrier is a reusable barrier whose party count can shrink (drop) when
// a thread leaves, as threads that exit a kernel early leave bar.sync.
class Barrier {
	std::mutex mu; // guards expected and arrived
	int expected = 0, arrived = 0;
	std::atomic<unsigned> gen{0};

	void release() {
		arrived = 0;
		gen.fetch_add(1, std::memory_order_release);
		gen.notify_all();
	}

public:
	void reset(int n) {
		std::lock_guard<std::mutex> l(mu);
		expected = n;
		arrived = 0;
	}
	void sync() {
		// gen cannot move before this thread arrives: it counts in expected.
		unsigned g = gen.load(std::memory_order_acquire);
		{
			std::lock_guard<std::mutex> l(mu);
			if (++arrived >= expected) {
				release();
				return;
			}
		}
		// Yield for a while before sleeping: most waits are short, and a
		// sleep and wake-up costs more than the work between barriers.
		for (int i = 0; i < EMU_SPIN && gen.load(std::memory_order_acquire) == g; i++) std::this_thread::yield();
		while (gen.load(std::memory_order_acquire) == g) gen.wait(g, std::memory_order_acquire);
	}
	void drop() {
		std::lock_guard<std::mutex> l(mu);
		expected--;
		if (arrived > 0 && arrived >= expected) release();
	}
};

// Warp is a warp's exchange. Slots alternate between two banks, so one
// barrier per exchange suffices: a lane writes bank k%2 for exchange k only
// after exchange k-1's barrier, which every lane passes after its reads of
// exchange k-2.
struct Warp {
	Barrier bar;
	uint64_t slot[2][32];
	int lanes;
	// tag[k][l] names the exchange lane l last wrote slot[k][l] for: its
	// block and the lane's count of exchanges in that block. A lane that
	// has exited wrote no slot for the exchanges after it left.
	uint64_t tag[2][32];
};

struct Launch {
	dim3 grid, block;
	Barrier blockBar; // __syncthreads
	Barrier gate;     // between blocks: never shrinks
	std::vector<Warp> warps;
};

inline Launch *g_launch;
inline thread_local dim3 t_threadIdx, t_blockIdx;
inline thread_local int t_tid;
inline thread_local unsigned t_bank; // exchanges this lane has made, mod 2
inline thread_local uint64_t t_tag;  // this lane's block << 32 | exchanges made

inline Warp &warp() { return g_launch->warps[t_tid / 32]; }
inline int lane() { return t_tid % 32; }

// fault reports what a GPU would fault on or leave undefined, and stops
// the process: a test cannot pass over it.
[[noreturn]] inline void fault(const char *what) {
	fprintf(stderr, "cuda emulation: block (%u,%u,%u) thread (%u,%u,%u): %s\n", t_blockIdx.x, t_blockIdx.y, t_blockIdx.z, t_threadIdx.x,
		t_threadIdx.y, t_threadIdx.z, what);
	fflush(stderr);
	abort();
}

// aligned checks that p may be read as a value of n bytes on the GPU,
// which faults on a misaligned vector or 32-bit load (host memory does
// not).
inline void aligned(const void *p, unsigned n) {
	if ((uintptr_t)p % n != 0) fault("misaligned load: the address is not a multiple of the access size");
}

// publish writes v to this lane's slot of the warp's next exchange and
// waits for the warp; the slots are then read with readLane.
inline uint64_t *publish(Warp &w, uint64_t v) {
	t_bank ^= 1;
	t_tag++;
	w.slot[t_bank][lane()] = v;
	w.tag[t_bank][lane()] = t_tag;
	w.bar.sync();
	return w.slot[t_bank];
}

// readLane checks that lane src took part in this lane's current
// exchange: one that has exited did not, and a shuffle that reads it gets
// an undefined value on the GPU.
inline void readLane(Warp &w, int src) {
	if (w.tag[t_bank][src & 31] != t_tag) fault("a shuffle reads a lane that has exited (or is not at this shuffle)");
}

template <typename T> inline uint64_t bits(T v) {
	static_assert(sizeof(T) <= 8, "shuffle of a type over 8 bytes");
	uint64_t u = 0;
	memcpy(&u, &v, sizeof v);
	return u;
}
template <typename T> inline T unbits(uint64_t u) {
	T v;
	memcpy(&v, &u, sizeof v);
	return v;
}

// exchange publishes v for the warp and returns lane src's value.
template <typename T> inline T exchange(T v, int src) {
	Warp &w = warp();
	uint64_t *slot = publish(w, bits(v));
	readLane(w, src);
	return unbits<T>(slot[src & 31]);
}

// allgather publishes v for the warp and fills out with every lane's.
inline void allgather(uint64_t v, uint64_t *out) {
	Warp &w = warp();
	uint64_t *slot = publish(w, v);
	for (int i = 0; i < w.lanes; i++) {
		readLane(w, i);
		out[i] = slot[i];
	}
}

inline unsigned ballot(bool p) {
	Warp &w = warp();
	uint64_t *slot = publish(w, p);
	unsigned m = 0;
	for (int i = 0; i < w.lanes; i++) // an exited lane's bit is 0
		if (w.tag[t_bank][i] == t_tag && slot[i]) m |= 1u << i;
	return m;
}

// blockAt is the block run i-th of n: the odd blocks from the last down,
// then the even ones from the first up. An odd block runs before both its
// neighbours, so a block that reads what the block before it wrote, or
// what the block after it wrote, sees it unwritten at one neighbour pair
// in two (given three blocks or more); index order hid the first kind.
inline long blockAt(long i, long n) {
	long odd = n / 2; // blocks 1, 3, ...
	return i < odd ? 2 * (odd - i) - 1 : 2 * (i - odd);
}

// run executes body for every thread of every block of the launch.
inline void run(dim3 grid, dim3 block, const std::function<void()> &body) {
	Launch L;
	L.grid = grid;
	L.block = block;
	int n = (int)(block.x * block.y * block.z);
	int nw = (n + 31) / 32;
	L.warps = std::vector<Warp>(nw);
	auto resetBlock = [&] {
		L.blockBar.reset(n);
		for (int w = 0; w < nw; w++) {
			L.warps[w].lanes = w == nw - 1 ? n - 32 * w : 32;
			L.warps[w].bar.reset(L.warps[w].lanes);
		}
	};
	resetBlock();
	L.gate.reset(n);
	g_launch = &L;
	long blocks = (long)grid.x * grid.y * grid.z;
	auto thread = [&](int tid) {
		t_tid = tid;
		t_threadIdx = dim3(tid % block.x, tid / block.x % block.y, tid / (block.x * block.y));
		for (long i = 0; i < blocks; i++) {
			long b = blockAt(i, blocks);
			t_blockIdx = dim3(b % grid.x, b / grid.x % grid.y, b / ((long)grid.x * grid.y));
			t_bank = 0;
			t_tag = (uint64_t)i << 32;
			body();
			L.blockBar.drop();
			warp().bar.drop();
			L.gate.sync();
			if (tid == 0) resetBlock();
			L.gate.sync();
		}
	};
	std::vector<std::thread> ts;
	for (int i = 1; i < n; i++) ts.emplace_back(thread, i);
	thread(0);
	for (auto &t : ts) t.join();
	g_launch = nullptr;
}

} // namespace emu

#define threadIdx (emu::t_threadIdx)
#define blockIdx (emu::t_blockIdx)
#define blockDim (emu::g_launch->block)
#define gridDim (emu::g_launch->grid)

inline void __syncthreads() { emu::g_launch->blockBar.sync(); }
template <typename T> inline T __shfl_sync(unsigned, T v, int src, int = 32) { return emu::exchange(v, src); }
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int m, int = 32) { return emu::exchange(v, emu::lane() ^ m); }
template <typename T> inline T __shfl_down_sync(unsigned, T v, unsigned d, int = 32) {
	int src = emu::lane() + (int)d;
	T r = emu::exchange(v, src < emu::warp().lanes ? src : emu::lane());
	return r;
}
inline unsigned __ballot_sync(unsigned, int p) { return emu::ballot(p != 0); }
inline int __any_sync(unsigned, int p) { return emu::ballot(p != 0) != 0; }
inline int __all_sync(unsigned m, int p) { return emu::ballot(p != 0) == (emu::warp().lanes == 32 ? 0xffffffffu : (1u << emu::warp().lanes) - 1); }

// mma_bf16_16816 is mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// with C and D in c: the warp's A (16×16), B (16×8) and C (16×8) spread
// over its lanes as the PTX ISA lays out their fragments. Lane l is in
// group g = l/4 at t = l%4; a 32-bit register holds two bf16, the lower
// index in the low half. A: a[0] row g, columns 2t, 2t+1; a[1] row g+8;
// a[2] row g, columns 2t+8, 2t+9; a[3] row g+8, those columns. B: b[0]
// rows 2t, 2t+1 of column g; b[1] rows 2t+8, 2t+9. C: c[0], c[1] row g,
// columns 2t, 2t+1; c[2], c[3] row g+8. Products and sums in fp32, over k
// in order (the hardware's order and rounding of the sum may differ).
inline void mma_bf16_16816(float *c, const unsigned *a, const unsigned *b) {
	uint64_t A01[32], A23[32], B[32];
	emu::allgather(a[0] | (uint64_t)a[1] << 32, A01);
	emu::allgather(a[2] | (uint64_t)a[3] << 32, A23);
	emu::allgather(b[0] | (uint64_t)b[1] << 32, B);
	auto half = [](uint64_t w, int i) { return emu::unbits<float>((uint32_t)((w >> (16 * i)) & 0xffffu) << 16); };
	float Am[16][16], Bm[16][8];
	for (int l = 0; l < 32; l++) {
		int g = l / 4, t = l % 4;
		for (int h = 0; h < 2; h++) {
			Am[g][2 * t + h] = half(A01[l], h);
			Am[g + 8][2 * t + h] = half(A01[l], 2 + h);
			Am[g][2 * t + 8 + h] = half(A23[l], h);
			Am[g + 8][2 * t + 8 + h] = half(A23[l], 2 + h);
			Bm[2 * t + h][g] = half(B[l], h);
			Bm[2 * t + 8 + h][g] = half(B[l], 2 + h);
		}
	}
	int g = emu::lane() / 4, t = emu::lane() % 4;
	for (int i = 0; i < 4; i++) {
		int row = g + 8 * (i / 2), col = 2 * t + i % 2;
		float acc = c[i];
		for (int k = 0; k < 16; k++) acc += Am[row][k] * Bm[k][col];
		c[i] = acc;
	}
}

inline float __uint_as_float(unsigned u) { return emu::unbits<float>(u); }
inline unsigned __float_as_uint(float f) { return (unsigned)emu::bits(f); }
inline float __int_as_float(int i) { return emu::unbits<float>((unsigned)i); }
inline int __float_as_int(float f) { return (int)emu::bits(f); }

#endif
