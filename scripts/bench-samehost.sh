#!/usr/bin/env bash
# Same-host fast path, side by side in one run: shared memory (the
# default between processes on one host) against loopback TCP
# (RLNODE_BULK_TCP=1) and PyTorch gloo, with this machine's memcpy as the
# ceiling, and SharedCopyBound (the memory work of the all-reduce on
# shared buffers, with no signalling) as the design's own, beside the
# in-place all-reduce (AllReduceInPlace, InPlaceCopyBound) and the reads
# no all-reduce can avoid (ReadBound); the all-reduce
# through the bulk path's slots (AllReduceSlots) and its ceiling
# (RingCopyBound) as the design before. Each round runs every variant once,
# interleaved, so that the machine's load falls on all of them alike; the
# load is printed before each section, and a summary (min / median / max
# over the rounds) at the end. Figures go to docs/benchmarks.md.
#
#   bash scripts/bench-samehost.sh [rounds]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
log=$bin/log
go test -c -o "$bin/shard.test" ./learner/shard
go test -c -o "$bin/actor.test" ./actor
go test -c -o "$bin/weightsync.test" ./weightsync

load() { section=$1; echo "## $1 — $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"; }
bench() { # dir binary pattern benchtime [env...]
	local dir=$1 exe=$2 pat=$3 n=$4
	shift 4
	(cd "$dir" && env "$@" "$exe" -test.run '^$' -test.bench "$pat" -test.benchtime "$n" 2>&1 | grep -E '^Benchmark|FAIL|^\s+\S+_test\.go:' || true) | record
}
record() { while IFS= read -r l; do echo "$l"; printf '%s|%s|%s\n' "$r" "$section" "$l" >>"$log"; done; }

echo "# same-host benchmarks: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
for r in $(seq "$rounds"); do
	echo "# round $r"
	load memcpy
	bench learner/shard "$bin/shard.test" 'Memcpy|RingCopyBound|SharedCopyBound|InPlaceCopyBound|ReadBound' 20x
	bench actor "$bin/actor.test" 'Destination256MiB' 10x
	for mode in shm tcp; do
		load "all-reduce over $mode"
		bench learner/shard "$bin/shard.test" "AllReduceLoopback$([ $mode = shm ] && echo '|AllReduceInPlace|AllReduceSlots')" 20x RLNODE_BULK_TCP=$([ $mode = tcp ] && echo 1 || echo 0)
	done
	for n in 2 4; do
		load "gloo, $n ranks"
		/usr/bin/python3 learner/shard/testdata/bench_gloo.py --ranks "$n" --iters 20 --port $((29533 + r * 10 + n)) | record || echo "gloo failed"
	done
	for mode in shm tcp; do
		load "bulk over $mode"
		bench actor "$bin/actor.test" 'Bulk256MiB/rlnode|BulkReaders' 10x RLNODE_BULK_TCP=$([ $mode = tcp ] && echo 1 || echo 0)
	done
	for mode in shm tcp; do
		load "publish over $mode"
		# Receive (one engine's share, in CPU time) sets its own transport.
		bench weightsync "$bin/weightsync.test" "PublishProcesses$([ $mode = shm ] && echo '|Receive')" 8x RLNODE_BULK_TCP=$([ $mode = tcp ] && echo 1 || echo 0)
	done
done
load done
echo "# summary over $rounds rounds: min / median / max"
python3 - "$log" <<'PY'
import re, statistics, sys
vals, by_round = {}, {}
for line in open(sys.argv[1]):
    rnd, sec, rest = line.rstrip().split("|", 2)
    m = re.match(r"(Benchmark\S+?)(-\d+)?\s+\d+\s+(\d+) ns/op(.*)", rest)
    if m:
        name, ns, tail = m.group(1), int(m.group(3)), m.group(4)
        g = re.search(r"([\d.]+) (busGB/s|GB/s)", tail)
        mb = re.search(r"([\d.]+) MB/s", tail)
        cpu = re.search(r"([\d.]+) cpu-ms/op", tail)
        if cpu:
            key, v = f"{sec}: {name} cpu-ms/op", float(cpu.group(1))
        elif g:
            key, v = f"{sec}: {name} {g.group(2)}", float(g.group(1))
        elif mb and not sec.startswith("publish"):
            key, v = f"{sec}: {name} GB/s", float(mb.group(1)) / 1e3
        else:
            key, v = f"{sec}: {name} ms/op", ns / 1e6
    elif (m := re.match(r"gloo ranks=(\d+) MiB=(\d+): .* bus ([\d.]+) GB/s", rest)):
        key, v = f"gloo: ranks={m.group(1)}/MiB={m.group(2)} busGB/s", float(m.group(3))
    else:
        continue
    vals.setdefault(key, []).append(v)
    by_round.setdefault(rnd, {})[key] = v
def stat(v):
    return f"{min(v):.3g} / {statistics.median(v):.3g} / {max(v):.3g} ({len(v)})"
for key, v in vals.items():
    print(f"{key}: {stat(v)}")
# Ratios within each round (the variants of a round ran minutes apart).
ratios = {}
def ratio(name, a, b):
    for rv in by_round.values():
        if a in rv and b in rv and rv[b] > 0:
            ratios.setdefault(name, []).append(rv[a] / rv[b])
for n in (2, 4):
    for mib in (1, 16, 64):
        shm = f"all-reduce over shm: BenchmarkAllReduceLoopback/ranks={n}/MiB={mib} busGB/s"
        ratio(f"shm / gloo, {n} ranks, {mib} MiB", shm, f"gloo: ranks={n}/MiB={mib} busGB/s")
        ratio(f"shm / tcp, {n} ranks, {mib} MiB", shm, f"all-reduce over tcp: BenchmarkAllReduceLoopback/ranks={n}/MiB={mib} busGB/s")
    ratio(f"shm / memcpy, {n} ranks, 64 MiB", f"all-reduce over shm: BenchmarkAllReduceLoopback/ranks={n}/MiB=64 busGB/s", "memcpy: BenchmarkMemcpy/MiB=64 GB/s")
    ratio(f"shm / SharedCopyBound, {n} ranks, 64 MiB", f"all-reduce over shm: BenchmarkAllReduceLoopback/ranks={n}/MiB=64 busGB/s", f"memcpy: BenchmarkSharedCopyBound/ranks={n}/MiB=64 busGB/s")
    ratio(f"in place / memcpy, {n} ranks, 64 MiB", f"all-reduce over shm: BenchmarkAllReduceInPlace/ranks={n}/MiB=64 busGB/s", "memcpy: BenchmarkMemcpy/MiB=64 GB/s")
    ratio(f"ReadBound / memcpy, {n} ranks, 64 MiB", f"memcpy: BenchmarkReadBound/ranks={n}/MiB=64 busGB/s", "memcpy: BenchmarkMemcpy/MiB=64 GB/s")
    ratio(f"slots / memcpy, {n} ranks, 64 MiB", f"all-reduce over shm: BenchmarkAllReduceSlots/ranks={n}/MiB=64 busGB/s", "memcpy: BenchmarkMemcpy/MiB=64 GB/s")
    ratio(f"slots / RingCopyBound, {n} ranks, 64 MiB", f"all-reduce over shm: BenchmarkAllReduceSlots/ranks={n}/MiB=64 busGB/s", f"memcpy: BenchmarkRingCopyBound/ranks={n}/MiB=64 busGB/s")
for b in ("rlnode", "rlnode-reused", "rlnode-view"):
    ratio(f"256 MiB pull ({b}), shm / tcp", f"bulk over shm: BenchmarkBulk256MiB/{b} GB/s", f"bulk over tcp: BenchmarkBulk256MiB/{b} GB/s")
ratio("256 MiB pull, view (shm) / new buffer (tcp)", "bulk over shm: BenchmarkBulk256MiB/rlnode-view GB/s", "bulk over tcp: BenchmarkBulk256MiB/rlnode GB/s")
for mode in ("shm", "tcp"):
    ratio(f"publish over {mode}, 3 engines / 1", f"publish over {mode}: BenchmarkPublishProcesses/engines=3 ms/op", f"publish over {mode}: BenchmarkPublishProcesses/engines=1 ms/op")
for name, v in ratios.items():
    print(f"{name}: {stat(v)}")
PY
