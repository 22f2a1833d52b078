#!/usr/bin/python3
"""Time torch.mm / torch.bmm (float32, CPU) on the shapes BenchmarkSgemm uses.

Run with Debian's PyTorch, which calls libblas.so.3 (OpenBLAS once
libopenblas0-pthread is installed):

    /usr/bin/python3 learner/blas/bench_torch.py [--reps N] [--threads T] [--coretype C]

Each shape is timed --reps times after a warm-up; the best and the median
GFLOP/s are printed, next to the names `go test -bench Sgemm` prints.

OpenBLAS 0.3.21 (Debian 12) does not know this CPU (family 6, model 207,
Emerald Rapids) and falls back to its "Prescott" SSE3 kernels, about a third
of its AVX-512 speed. To give PyTorch its best, the script sets
OPENBLAS_CORETYPE from the CPU flags (Cooperlake with avx512_bf16, SkylakeX
with avx512f, Haswell with avx2) unless the environment or --coretype says
otherwise; --coretype detect leaves OpenBLAS to its own detection.
"""
import argparse
import os
import statistics
import sys
import time

# name, transA, transB, m, n, k — as in bench_test.go.
SHAPES = [
    ("square256", False, False, 256, 256, 256),
    ("square512", False, False, 512, 512, 512),
    ("square1024", False, False, 1024, 1024, 1024),
    ("square2048", False, False, 2048, 2048, 2048),
    ("2048x512x512", False, False, 2048, 512, 512),
    ("2048x512x512_NT", False, True, 2048, 512, 512),
    ("2048x1536x512_NT", False, True, 2048, 1536, 512),
    ("2048x512x1536_NT", False, True, 2048, 512, 1536),
    ("512x512x2048_TN", True, False, 512, 512, 2048),
    ("512x1536x2048_TN", True, False, 512, 1536, 2048),
    ("2048x512x1536_NN", False, False, 2048, 512, 1536),
    ("decode1x4096x1024_NT", False, True, 1, 4096, 1024),
    ("decode4x4096x1024_NT", False, True, 4, 4096, 1024),
    ("decode16x4096x1024_NT", False, True, 16, 4096, 1024),
]

# name, heads, m, n, k, transB — as in BenchmarkSgemmBatched.
BATCHED = [
    ("QKt_b64_256x256x64", 64, 256, 256, 64, True),
    ("PV_b64_256x64x256", 64, 256, 64, 256, False),
]


def operand(rows, cols, trans, batch=None):
    """A rows×cols operand stored row-major, or stored transposed (a view)."""
    shape = (cols, rows) if trans else (rows, cols)
    if batch is not None:
        shape = (batch,) + shape
    x = torch.rand(shape, dtype=torch.float32) * 2 - 1
    return x.transpose(-1, -2) if trans else x


def time_it(fn, flops, reps):
    fn()  # warm-up
    rates = []
    for _ in range(reps):
        inner = max(1, int(2e9 // flops))  # about a second at 2 GFLOP/s, less when faster
        inner = min(inner, 50)
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        dt = (time.perf_counter() - t0) / inner
        rates.append(flops / dt / 1e9)
    return max(rates), statistics.median(rates)


def best_coretype():
    """The OpenBLAS core type for this CPU's vector extensions."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if "avx512_bf16" in flags:
        return "Cooperlake"
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags:
        return "Haswell"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--coretype", default=os.environ.get("OPENBLAS_CORETYPE", "auto"))
    args = ap.parse_args()
    # Both must be set before OpenBLAS is loaded, i.e. before importing torch.
    core = best_coretype() if args.coretype == "auto" else args.coretype
    if core and core != "detect":
        os.environ["OPENBLAS_CORETYPE"] = core
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    global torch
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(detect)')}")
    print(f"{'shape':<24}{'best GFLOP/s':>14}{'median':>10}")
    with torch.no_grad():
        for name, ta, tb, m, n, k in SHAPES:
            a, b = operand(m, k, ta), operand(k, n, tb)
            c = torch.empty(m, n)
            best, med = time_it(lambda: torch.mm(a, b, out=c), 2.0 * m * n * k, args.reps)
            print(f"{name:<24}{best:>14.1f}{med:>10.1f}")
        for name, heads, m, n, k, tb in BATCHED:
            a, b = operand(m, k, False, heads), operand(k, n, tb, heads)
            c = torch.empty(heads, m, n)
            best, med = time_it(lambda: torch.bmm(a, b, out=c), 2.0 * heads * m * n * k, args.reps)
            print(f"{name:<24}{best:>14.1f}{med:>10.1f}")


if __name__ == "__main__":
    main()
