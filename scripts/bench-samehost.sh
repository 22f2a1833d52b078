#!/usr/bin/env bash
# Same-host fast path, side by side in one run: shared memory (the
# default between processes on one host) against loopback TCP
# (RLNODE_BULK_TCP=1) and PyTorch gloo, with this machine's memcpy as the
# ceiling. Each round runs every variant once, interleaved, so that the
# machine's load falls on all of them alike; the load is printed before
# each section. Figures go to docs/benchmarks.md.
#
#   bash scripts/bench-samehost.sh [rounds]   (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/shard.test" ./learner/shard
go test -c -o "$bin/actor.test" ./actor
go test -c -o "$bin/weightsync.test" ./weightsync

load() { echo "## $1 — $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"; }
bench() { # dir binary pattern benchtime [env...]
	local dir=$1 exe=$2 pat=$3 n=$4
	shift 4
	(cd "$dir" && env "$@" "$exe" -test.run '^$' -test.bench "$pat" -test.benchtime "$n" 2>&1 | grep -E '^Benchmark' || true)
}

echo "# same-host benchmarks: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
for r in $(seq "$rounds"); do
	echo "# round $r"
	load memcpy
	bench learner/shard "$bin/shard.test" 'Memcpy' 20x
	for mode in shm tcp; do
		load "all-reduce over $mode"
		bench learner/shard "$bin/shard.test" 'AllReduceLoopback' 20x RLNODE_BULK_TCP=$([ $mode = tcp ] && echo 1 || echo 0)
	done
	for n in 2 4; do
		load "gloo, $n ranks"
		/usr/bin/python3 learner/shard/testdata/bench_gloo.py --ranks "$n" --iters 20 --port $((29533 + r * 10 + n)) || echo "gloo failed"
	done
	for mode in shm tcp; do
		load "bulk over $mode"
		bench actor "$bin/actor.test" 'Bulk256MiB/rlnode|BulkReaders' 10x RLNODE_BULK_TCP=$([ $mode = tcp ] && echo 1 || echo 0)
	done
	for mode in shm tcp; do
		load "publish over $mode"
		bench weightsync "$bin/weightsync.test" 'PublishProcesses' 8x RLNODE_BULK_TCP=$([ $mode = tcp ] && echo 1 || echo 0)
	done
done
load done
