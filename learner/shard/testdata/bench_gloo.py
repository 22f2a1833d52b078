"""All-reduce bus bandwidth of PyTorch's gloo backend between processes on
loopback: the peer of BenchmarkAllReduceLoopback (same sizes, float32 sum,
bus bandwidth = bytes/time x 2(n-1)/n as NCCL's tests define it).

    /usr/bin/python3 learner/shard/testdata/bench_gloo.py --ranks 2 --iters 5
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES_MIB = [1, 16, 64]


def worker(rank, n, port, iters, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    for mib in SIZES_MIB:
        x = torch.ones(mib * (1 << 20) // 4, dtype=torch.float32)
        dist.all_reduce(x)  # warm
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        sec = (time.perf_counter() - t0) / iters
        if rank == 0:
            size = mib << 20
            out.put((mib, sec, size / sec / 1e9 * 2 * (n - 1) / n))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--port", type=int, default=29533)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a.ranks, a.port, a.iters, q)) for r in range(a.ranks)]
    for p in procs:
        p.start()
    for _ in SIZES_MIB:
        mib, sec, bus = q.get(timeout=600)
        print(f"gloo ranks={a.ranks} MiB={mib}: {sec*1e3:.1f} ms/op, bus {bus:.3f} GB/s")
    for p in procs:
        p.join()


if __name__ == "__main__":
    main()
