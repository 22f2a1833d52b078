#!/usr/bin/env bash
# Checks the CUDA backend on a GPU host that has no Go toolchain: one run,
# or two of at most 10 minutes each (docs/cuda.md shows the split).
#
#   bash scripts/gpu-check.sh build DIR   # where Go is: cross-build test binaries into DIR
#   bash scripts/gpu-check.sh run DIR     # on the GPU host (DIR copied there): run, print one report
#   bash scripts/gpu-check.sh             # both, here (on a host without a GPU: a dry run)
#
# GPU_CHECK_TESTS=0 skips learner/cuda's and learner/cpu's tests (for a
# second run that only times). run sets RLNODE_REQUIRE_GPU=1, so a test
# that would skip for a missing GPU, driver or NVRTC fails instead;
# GPU_CHECK_REQUIRE=0 lifts that for a dry run.
# The libraries are found as rlnode finds them: the dynamic linker's path,
# NVIDIA's Python wheels (site-packages/nvidia/*/lib), or RLNODE_CUDA_DRIVER,
# RLNODE_NVRTC and RLNODE_CUBLASLT.
#
# It runs learner/cuda's tests (loader, NVRTC compile of every kernel, every
# kernel on the GPU against the CPU backend, the kernel cache, cuBLASLt
# products against learner/blas, and Qwen2 training steps on the
# device-resident backend over the real driver against the CPU backend,
# fp32 and bf16, AdamW on the device against the host optimizer, bf16 weight
# copies), then times a training step of a Qwen2.5-0.5B-shaped model
# (random weights; GPU_CHECK_SEQ, GPU_CHECK_BATCH rows, default 1024 x 8) on
# the device backend (fused AdamW; with bf16 also AdamW on the host,
# GPU_CHECK_HOSTOPT=0 skips that) and the CPU backend, and with PyTorch eager where
# python3 has torch with CUDA (learner/cuda/testdata/torch_step.py), and
# reports the host. GPU_CHECK_STEP=0 skips the timing, GPU_CHECK_STEP_CPU=0
# the CPU backend's (the slowest part); the bf16 step is timed again keeping
# the layers' activations as bf16 (GPU_CHECK_ACTBF16=0 skips it; the
# allocator's line gives the memory), with the attention on the tensor
# cores (GPU_CHECK_TC=0 skips it), and once more with every device op
# timed alone (GPU_CHECK_PROFILE=0 skips it). Then the data-parallel ranks
# on the GPU: learner/shard's device tests (two ranks on the GPU against one
# learner, ZeRO stage 0 and 1 with the update on the device, the ZeRO-1
# checkpoint and resume, the bytes a step copies to the host and through
# page-locked buffers) and a timed step of one learner and of two ranks
# under each stage on the same shape (BenchmarkDeviceStep;
# GPU_CHECK_SHARDED=0 skips both). Last, the same-host all-reduce of
# learner ranks at 64 MiB against this host's memcpy and gloo (samehost
# below; GPU_CHECK_SAMEHOST=0 skips it). Before the step timing, the native
# engine on the GPU (GPU_CHECK_DECODE=0 skips it): rollout/native's device
# tests (greedy and seeded samples against the CPU engine, a model loaded
# onto the device), a short real run with the engine and the learner on the
# GPU (`rlnode run quickstart`, 4 steps), and decode tokens/s at batch 1 and
# 64 on the Qwen2.5-0.5B shape (BenchmarkDecodeGPU, fp32 and bf16 products)
# beside transformers' generate on the same shape
# (rollout/native/testdata/hf_generate.py) where python3 has it. And the
# log probs and gradients of a Qwen2.5-0.5B-shaped checkpoint on the GPU
# against PyTorch's on the GPU (torchcheck below; GPU_CHECK_TORCH=0 skips
# it). And one attention's forward and backward passes timed with each
# kind of kernel beside PyTorch's scaled_dot_product_attention (attention
# below; GPU_CHECK_ATTN=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."

build() {
	local dir=$1
	mkdir -p "$dir/learner/cuda" "$dir/learner/cpu" "$dir/learner/shard" "$dir/rollout/native" "$dir/docs" "$dir/bin"
	# Stripped and gzipped (run unpacks them): the whole directory stays
	# under 64 MiB, so it can travel to a GPU host as one small upload.
	local flags=(-trimpath -ldflags=-s\ -w)
	local pkg
	for pkg in learner/cuda learner/cpu learner/shard rollout/native; do
		CGO_ENABLED=0 go test -c "${flags[@]}" -o "$dir/$pkg/$(basename "$pkg").test" "./$pkg"
	done
	CGO_ENABLED=0 go build "${flags[@]}" -o "$dir/bin/rlnode" ./cmd/rlnode
	cp -r learner/cuda/testdata "$dir/learner/cuda/"
	mkdir -p "$dir/learner/model/testdata"
	cp learner/model/testdata/compare_forward.py learner/model/testdata/make_golden.py learner/model/testdata/qwen2.5-0.5b-instruct.config.json "$dir/learner/model/testdata/"
	cp -r learner/shard/testdata "$dir/learner/shard/"
	cp -r rollout/native/testdata "$dir/rollout/native/"
	cp docs/cuda.md "$dir/docs/"
	cp scripts/gpu-check.sh "$dir/gpu-check.sh"
	for f in "$dir"/*/*/*.test "$dir/bin/rlnode"; do
		gzip -9 -n -f "$f"
	done
	echo "gpu-check: built into $dir ($(du -sh "$dir" | cut -f1)); copy it to the GPU host and run: bash $dir/gpu-check.sh run $dir"
}

# unpack restores the binaries build gzipped.
unpack() {
	local f
	for f in "$1"/*/*/*.test.gz "$1/bin/rlnode.gz"; do
		[ -e "$f" ] || continue
		gunzip -f "$f"
		chmod +x "${f%.gz}"
	done
}

run() {
	local dir
	dir=$(cd "$1" && pwd)
	unpack "$dir"
	local log
	log=$(mktemp -d)
	export RLNODE_REQUIRE_GPU=${GPU_CHECK_REQUIRE:-1}
	{
		echo "== host"
		uname -srm
		date -u +%Y-%m-%dT%H:%M:%SZ
		if command -v nvidia-smi >/dev/null 2>&1; then
			nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
		else
			echo "nvidia-smi: not found"
		fi
		if command -v python3 >/dev/null 2>&1; then
			python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "available:", torch.cuda.is_available())' 2>&1 | tail -1 || true
		fi
		echo "== rlnode gpu"
		"$dir/bin/rlnode" gpu || true
	} >"$log/host.txt" 2>&1
	local failed=0
	for pkg in learner/cuda learner/cpu; do
		[ "${GPU_CHECK_TESTS:-1}" != 0 ] || break
		local bin
		bin="$dir/$pkg/$(basename "$pkg").test"
		(cd "$dir/$pkg" && timeout 300 "$bin" -test.v -test.count=1 -test.timeout=280s) >"$log/$(basename "$pkg").txt" 2>&1 || failed=1
	done
	: >"$log/shard.txt"
	if [ "${GPU_CHECK_SHARDED:-1}" != 0 ]; then
		# The GPU's subtests only: the emulated ones ran in CI.
		(cd "$dir/learner/shard" && timeout 150 ./shard.test -test.v -test.count=1 -test.run 'TestDevice.*/gpu' -test.timeout=140s) >"$log/shard.txt" 2>&1 || failed=1
	fi
	: >"$log/native.txt"
	: >"$log/decode.txt"
	if [ "${GPU_CHECK_DECODE:-1}" != 0 ]; then
		(cd "$dir/rollout/native" && timeout 120 ./native.test -test.v -test.count=1 -test.run 'TestEngineOnGPU|TestLoadOnDevice' -test.timeout=110s) >"$log/native.txt" 2>&1 || failed=1
		decode "$dir" >"$log/decode.txt" 2>&1 || failed=1
	fi
	: >"$log/torch.txt"
	if [ "${GPU_CHECK_TORCH:-1}" != 0 ]; then
		torchcheck "$dir" >"$log/torch.txt" 2>&1 || failed=1
	fi
	: >"$log/attention.txt"
	if [ "${GPU_CHECK_ATTN:-1}" != 0 ]; then
		attention "$dir" >"$log/attention.txt" 2>&1 || failed=1
	fi
	: >"$log/step.txt"
	if [ "${GPU_CHECK_STEP:-1}" != 0 ]; then
		step "$dir" >"$log/step.txt" 2>&1 || failed=1
	fi
	: >"$log/samehost.txt"
	if [ "${GPU_CHECK_SAMEHOST:-1}" != 0 ]; then
		samehost "$dir" >"$log/samehost.txt" 2>&1 || true
	fi
	echo "================ rlnode gpu-check report ================"
	cat "$log/host.txt"
	for f in "$log"/cuda.txt "$log"/cpu.txt "$log"/shard.txt "$log"/native.txt; do
		[ -s "$f" ] || continue
		local name
		name=$(basename "$f" .txt)
		case $name in
		native) echo "== tests: rollout/native (the engine on the GPU)" ;;
		*) echo "== tests: learner/$name" ;;
		esac
		printf '%s passed, %s failed, %s skipped\n' \
			"$(grep -c -- '^--- PASS' "$f" || true)" "$(grep -c -- '^--- FAIL' "$f" || true)" "$(grep -c -- '^--- SKIP' "$f" || true)"
		# Each failure and skip, and the messages tests logged.
		grep -E -- '^\s*--- (FAIL|SKIP)|^\s+[a-z_]+_test\.go:[0-9]+:' "$f" | head -150 || true
		grep -E -- '^(FAIL|ok|PASS)' "$f" | tail -3 || true
	done
	if [ -s "$log/torch.txt" ]; then
		echo "== log probs and gradients against PyTorch (Qwen2.5-0.5B shape, random weights)"
		cat "$log/torch.txt"
	fi
	if [ -s "$log/decode.txt" ]; then
		echo "== native engine on the GPU: a run, and decode (Qwen2.5-0.5B shape, random weights)"
		cat "$log/decode.txt"
	fi
	if [ -s "$log/attention.txt" ]; then
		echo "== attention forward+backward (Qwen2.5-0.5B heads): warp-per-query, tiled and tensor-core kernels, PyTorch SDPA"
		cat "$log/attention.txt"
	fi
	echo "== training step (Qwen2.5-0.5B shape, random weights)"
	cat "$log/step.txt"
	if [ -s "$log/samehost.txt" ]; then
		echo "== same-host all-reduce, 64 MiB (this host's cores; docs/samehost.md)"
		cat "$log/samehost.txt"
	fi
	echo "== result: $([ "$failed" = 0 ] && echo PASS || echo FAIL) (RLNODE_REQUIRE_GPU=$RLNODE_REQUIRE_GPU; full logs in $log)"
	return "$failed"
}

# step times training steps: the device backend (fp32, bf16 products) and
# the CPU backend through BenchmarkTrainingStep, PyTorch eager through
# torch_step.py, all on the same shape, rows and loss.
step() {
	local dir=$1
	local seq=${GPU_CHECK_SEQ:-1024} batch=${GPU_CHECK_BATCH:-8}
	local bin="$dir/learner/cuda/cuda.test" rc=0
	export RLNODE_STEP_SHAPE=qwen2.5-0.5b RLNODE_STEP_SEQ=$seq RLNODE_STEP_BATCH=$batch
	echo "rows: $batch x $seq tokens, the second half of each row scored"
	(cd "$dir/learner/cuda" && RLNODE_STEP_CPU=0 timeout 150 "$bin" -test.run '^$' -test.bench 'TrainingStep' -test.benchtime 3x -test.timeout=140s) 2>&1 |
		grep -E 'Benchmark|allocator|FAIL|panic|Error' || rc=1
	# bf16 activation storage: the bf16 step keeping the layers'
	# activations as bf16 (time, and the allocator's bytes in the log line).
	if [ "${GPU_CHECK_ACTBF16:-1}" != 0 ]; then
		(cd "$dir/learner/cuda" && RLNODE_STEP_CPU=0 RLNODE_STEP_ACTBF16=1 timeout 90 "$bin" -test.run '^$' -test.bench 'TrainingStep/gpu-bf16-bf16acts' -test.benchtime 1x -test.timeout=85s) 2>&1 |
			grep -E 'Benchmark|allocator|FAIL|panic' || echo "device backend with bf16 activations: no figure (timed out after 90 s?)"
	fi
	# The attention on the tensor cores (opt-in until seen here): the bf16
	# step again with it.
	if [ "${GPU_CHECK_TC:-1}" != 0 ]; then
		(cd "$dir/learner/cuda" && RLNODE_STEP_CPU=0 RLNODE_STEP_TC=1 timeout 90 "$bin" -test.run '^$' -test.bench 'TrainingStep/gpu-bf16-tc' -test.benchtime 3x -test.timeout=85s) 2>&1 |
			grep -E 'Benchmark|FAIL|panic' || echo "device backend with tensor-core attention: no figure (timed out after 90 s?)"
	fi
	# Where the bf16 step's time goes: one step with each device op timed
	# alone (kernels by name, products by shape, copies).
	if [ "${GPU_CHECK_PROFILE:-1}" != 0 ]; then
		(cd "$dir/learner/cuda" && RLNODE_STEP_CPU=0 RLNODE_STEP_PROFILE=1 timeout 90 "$bin" -test.run '^$' -test.bench 'TrainingStep/gpu-bf16$' -test.benchtime 1x -test.timeout=85s) 2>&1 |
			sed -n '/profiled step/,/all device ops/p' | grep . || echo "profiled bf16 step: no figure (timed out after 90 s?)"
	fi
	# The fused AdamW's gain: the same bf16 step with AdamW on the host.
	if [ "${GPU_CHECK_HOSTOPT:-1}" != 0 ]; then
		(cd "$dir/learner/cuda" && RLNODE_STEP_CPU=0 RLNODE_STEP_HOSTOPT=1 timeout 90 "$bin" -test.run '^$' -test.bench 'TrainingStep/gpu-bf16-hostopt' -test.benchtime 1x -test.timeout=85s) 2>&1 |
			grep -E 'Benchmark|FAIL|panic' || echo "device backend with AdamW on the host: no figure (timed out after 90 s?)"
	fi
	if [ "${GPU_CHECK_STEP_CPU:-1}" != 0 ]; then
		(cd "$dir/learner/cuda" && timeout 150 "$bin" -test.run '^$' -test.bench 'TrainingStep/cpu' -test.benchtime 1x -test.timeout=140s) 2>&1 |
			grep -E 'Benchmark|FAIL|panic' || echo "CPU backend: no figure (timed out after 150 s?)"
	fi
	# Data-parallel ranks on the GPU: one learner, two ranks under ZeRO
	# stage 0 and 1 (same device, half the rows each).
	if [ "${GPU_CHECK_SHARDED:-1}" != 0 ]; then
		(cd "$dir/learner/shard" && timeout 180 ./shard.test -test.run '^$' -test.bench 'DeviceStep/gpu' -test.benchtime 1x -test.timeout=170s) 2>&1 |
			grep -E 'Benchmark|FAIL|panic|Error' || echo "sharded steps: no figure (timed out after 180 s?)"
	fi
	if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
		for dt in bf16 fp32; do
			timeout 120 python3 "$dir/learner/cuda/testdata/torch_step.py" --shape qwen2.5-0.5b --seq "$seq" --batch "$batch" --dtype "$dt" --steps 3 2>&1 | tail -1 || true
		done
	else
		echo "PyTorch with CUDA: not available, no comparison"
	fi
	return "$rc"
}

# attention times one causal attention's forward and backward passes on
# the GPU with the warp-per-query kernels, the tiled ones and the
# tensor-core ones (BenchmarkAttention), and PyTorch's scaled_dot_product_attention on the
# same shape (torch_attention.py, float32 and bfloat16).
attention() {
	local dir=$1 rc=0
	local seq=${GPU_CHECK_SEQ:-1024} batch=${GPU_CHECK_BATCH:-8}
	echo "rows: $batch x $seq tokens, one causal sequence each"
	(cd "$dir/learner/cuda" && RLNODE_ATTN_SEQ=$seq RLNODE_ATTN_BATCH=$batch timeout 120 ./cuda.test -test.run '^$' -test.bench 'Attention/gpu' -test.benchtime 5x -test.timeout=110s) 2>&1 |
		grep -E 'Benchmark|FAIL|panic|Error' || { echo "attention: no figure (timed out after 120 s?)"; rc=1; }
	if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
		timeout 90 python3 "$dir/learner/cuda/testdata/torch_attention.py" --seq "$seq" --batch "$batch" 2>&1 | tail -2 || true
	else
		echo "PyTorch with CUDA: not available, no comparison"
	fi
	return "$rc"
}

# torchcheck writes a random Qwen2.5-0.5B-shaped checkpoint, scores four
# sequences with `rlnode model forward --grad` on the GPU (fp32, then bf16
# products) and checks the log probs and every weight's gradient against
# PyTorch on the GPU (learner/model/testdata/compare_forward.py, fp32).
torchcheck() {
	local dir=$1 tmp rc=0
	tmp=$(mktemp -d)
	if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
		echo "PyTorch with CUDA: not available, no comparison"
		return 1
	fi
	timeout 120 "$dir/bin/rlnode" model init --config "$dir/learner/model/testdata/qwen2.5-0.5b-instruct.config.json" --out "$tmp/q05" --seed 1 || return 1
	python3 - "$tmp/in.json" <<'PY'
import json, random, sys
r = random.Random(1)
seqs = [{"prompt": [r.randrange(151000) for _ in range(p)], "response": [r.randrange(151000) for _ in range(n)]} for p, n in [(200, 56), (64, 192), (17, 3), (300, 212)]]
json.dump({"sequences": seqs}, open(sys.argv[1], "w"))
PY
	local dev tols
	for dev in cuda cuda-bf16; do
		tols="--tol-logp 1e-3 --tol-grad 1e-2"
		[ "$dev" = cuda-bf16 ] && tols="--tol-logp 0.25 --tol-grad 0.25"
		echo "-- rlnode model forward --device $dev"
		timeout 150 "$dir/bin/rlnode" model forward --model "$tmp/q05" --input "$tmp/in.json" --out "$tmp/go-$dev.safetensors" --grad --device "$dev" || { rc=1; continue; }
		# shellcheck disable=SC2086
		timeout 150 python3 "$dir/learner/model/testdata/compare_forward.py" --model "$tmp/q05" --input "$tmp/in.json" \
			--scores "$tmp/go-$dev.safetensors" --grad --device cuda $tols || rc=1
	done
	rm -rf "$tmp"
	return "$rc"
}

# decode runs quickstart for 4 steps with the engine and the learner on
# the GPU, then times the native engine's greedy decode (128 tokens after
# 16, batch 1 and 64; fp32 and bf16 products) and transformers' generate on
# the same shape.
decode() {
	local dir=$1 rc=0 out
	out=$(mktemp -d)
	if timeout 120 "$dir/bin/rlnode" run quickstart --out "$out/run" --set schedule.steps=4 \
		--set engines.policy.device=cuda --set placement.learner_device=cuda >"$out/run.log" 2>&1; then
		echo "rlnode run quickstart, engine and learner on cuda, 4 steps: ok"
		tail -n 2 "$out/run/metrics.jsonl" | cut -c1-200
	else
		echo "rlnode run quickstart on cuda: FAILED"
		tail -n 20 "$out/run.log"
		rc=1
	fi
	(cd "$dir/rollout/native" && timeout 240 ./native.test -test.v -test.run '^$' -test.bench 'DecodeGPU' -test.benchtime 1x -test.timeout=230s) 2>&1 |
		grep -E '^Benchmark.*tokens/s|FAIL|panic|Error|no GPU' || { echo "native decode: no figure (timed out after 240 s?)"; rc=1; }
	if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch, transformers, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
		timeout 180 python3 "$dir/rollout/native/testdata/hf_generate.py" 2>&1 | grep -E 'hf_generate|Error|error' | tail -6 || true
	else
		echo "transformers with CUDA: not available, no comparison"
	fi
	return "$rc"
}

# samehost measures the learner ranks' all-reduce on shared buffers at
# 64 MiB with 2 and 4 ranks against this host's memcpy, the memory work's
# bounds and PyTorch gloo: on a host with more cores than ranks (a 2-core
# machine cannot say whether 4 ranks reach half of memcpy). About a
# minute; GPU_CHECK_SAMEHOST=0 skips it.
samehost() {
	local dir=$1
	echo "load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
	(cd "$dir/learner/shard" && timeout 150 ./shard.test -test.run '^$' -test.bench 'Memcpy/MiB=64|(SharedCopy|Read)Bound/ranks=./MiB=64|AllReduce(Loopback|InPlace)/ranks=./MiB=64' -test.benchtime 20x -test.timeout=140s) 2>&1 |
		grep -E 'Benchmark|FAIL|panic' || echo "same-host all-reduce: no figure (timed out after 150 s?)"
	if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch.distributed' 2>/dev/null; then
		for n in 2 4; do
			timeout 60 python3 "$dir/learner/shard/testdata/bench_gloo.py" --ranks "$n" --iters 10 --port $((29600 + n)) 2>&1 | grep 'MiB=64' || true
		done
	else
		echo "PyTorch: not available, no gloo figure"
	fi
}

case "${1:-}" in
build) build "${2:?usage: gpu-check.sh build DIR}" ;;
run) run "${2:?usage: gpu-check.sh run DIR}" ;;
"")
	dir=$(mktemp -d)
	build "$dir" >/dev/null
	run "$dir"
	;;
*)
	echo "usage: gpu-check.sh [build DIR | run DIR]" >&2
	exit 2
	;;
esac
