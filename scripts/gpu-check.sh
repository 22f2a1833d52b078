#!/usr/bin/env bash
# Checks the CUDA backend on a GPU host that has no Go toolchain, in one run
# that prints its report as it goes.
#
#   bash scripts/gpu-check.sh build DIR   # where Go is: cross-build test binaries into DIR
#   bash scripts/gpu-check.sh run DIR     # on the GPU host (DIR copied there): run, print one report
#   bash scripts/gpu-check.sh             # both, here (on a host without a GPU: a dry run)
#
# run sets RLNODE_REQUIRE_GPU=1, so a test that would skip for a missing
# GPU, driver or NVRTC fails instead; GPU_CHECK_REQUIRE=0 lifts that for a
# dry run. The libraries are found as rlnode finds them (docs/cuda.md):
# the dynamic linker's path, NVIDIA's Python wheels, a CUDA toolkit, or
# RLNODE_CUDA_DRIVER, RLNODE_NVRTC and RLNODE_CUBLASLT. Where rlnode gpu
# finds no backend, run looks for the missing libraries itself and names
# them in those variables; still none, it stops with the reason.
#
# The sections (SECTIONS below), in the order they run, most wanted first:
#   tests-cuda    learner/cuda's tests on the GPU: NVRTC compiles of every
#                 kernel, every kernel against the CPU backend, cuBLASLt
#                 products, Qwen2 training steps on the device backend,
#                 fp32 and bf16 (the emulated subtests, run in CI, are
#                 skipped unless GPU_CHECK_EMULATION=1)
#   step          a Qwen2.5-0.5B-shaped training step (random weights;
#                 GPU_CHECK_SEQ x GPU_CHECK_BATCH rows, default 1024 x 8) on
#                 the device backend, fp32, bf16 and bf16 with tensor-core
#                 attention (GPU_CHECK_TC=0 leaves that out), beside
#                 PyTorch eager (learner/cuda/testdata/torch_step.py)
#   torch         log probs and gradients of a Qwen2.5-0.5B-shaped
#                 checkpoint on the GPU against PyTorch's on the GPU
#   decode        native decode tokens/s at batch 1 and 64, fp32 and bf16,
#                 beside transformers' generate (hf_generate.py)
#   profile       one bf16 step (and one with tensor-core attention) with
#                 every device op timed alone, the top 25 printed
#   engine        rollout/native's device tests, and `rlnode run quickstart`
#                 for 2 SFT and 2 RL steps with the engine and the learner
#                 on the GPU
#   cluster       nodes on this host: one with --gpus auto (nvidia-smi's
#                 GPUs), one with CUDA_VISIBLE_DEVICES empty (none), and
#                 `rlnode run quickstart --address` with the learner and the
#                 rollout actor each holding half a GPU on cuda: the GPUs
#                 the ledger binds and the devices they open (DeviceFor)
#   tests-shard   learner/shard's device tests on the GPU (two ranks against
#                 one learner, ZeRO stage 0 and 1, checkpoint and resume)
#   attention     one attention's forward and backward passes with each kind
#                 of kernel, beside PyTorch's scaled_dot_product_attention
#   step-more     the bf16 step with bf16 activations (GPU_CHECK_ACTBF16),
#                 and with AdamW on the host (GPU_CHECK_HOSTOPT)
#   step-sharded  one learner and two ranks under ZeRO stage 0 and 1
#   tests-cpu     learner/cpu's tests
#   step-cpu      the step on the CPU backend
#   samehost      the same-host all-reduce at 64 MiB against memcpy and gloo
# GPU_CHECK_TESTS=0 skips tests-cuda and tests-cpu, GPU_CHECK_STEP=0 step
# and step-more, GPU_CHECK_PROFILE=0 profile, GPU_CHECK_TORCH=0 torch,
# GPU_CHECK_DECODE=0 decode and engine, GPU_CHECK_CLUSTER=0 cluster, GPU_CHECK_SHARDED=0 tests-shard
# and step-sharded, GPU_CHECK_ATTN=0 attention, GPU_CHECK_STEP_CPU=0
# step-cpu, GPU_CHECK_SAMEHOST=0 samehost. GPU_CHECK_SHAPE=tiny times a
# small Qwen2 instead of Qwen2.5-0.5B's shape in the step sections and
# decode: a rehearsal, on the emulated GPU say (docs/cuda.md).
#
# Each section runs under its own time limit. GPU_CHECK_BUDGET=SECONDS
# bounds the whole run: a section starts only while its minimum is left,
# and its limit is cut to what is left, so the run ends when the budget does,
# with the report of every section it ran. GPU_CHECK_OUT=DIR also writes
# the report to DIR/report.txt and every section's whole output to
# DIR/full.log, line by line as they come.
set -euo pipefail
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
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
	# The test folders without the npm packages setup.sh installs for the
	# official-client tests (35 MiB, and the GPU host runs no node).
	local td
	for td in learner/cuda/testdata learner/shard/testdata rollout/native/testdata; do
		tar -C "$(dirname "$td")" --exclude=node_modules -cf - testdata | tar -C "$dir/$(dirname "$td")" -xf -
	done
	mkdir -p "$dir/learner/model/testdata"
	cp learner/model/testdata/compare_forward.py learner/model/testdata/make_golden.py learner/model/testdata/qwen2.5-0.5b-instruct.config.json "$dir/learner/model/testdata/"
	cp docs/cuda.md "$dir/docs/"
	cp scripts/gpu-check.sh "$dir/gpu-check.sh"
	for f in "$dir"/*/*/*.test "$dir/bin/rlnode"; do
		gzip -9 -n -f "$f"
	done
	local mib
	mib=$(du -sm "$dir" | cut -f1)
	if ((mib > 60)); then
		echo "gpu-check: $dir is $mib MiB, over the 60 MiB it must stay under to travel as one upload" >&2
		return 1
	fi
	echo "gpu-check: built into $dir ($mib MiB); copy it to the GPU host and run: bash $dir/gpu-check.sh run $dir"
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

# Sections, in the order run runs them: the correctness tests and the
# figures the backend is judged by first (the issue's must-show: tests,
# step beside PyTorch, log probs and gradients against PyTorch, decode), so that a run cut short by its
# budget still has them. Each line: name, the most seconds it may take, the
# fewest it is worth starting with, the switch that skips it, and its
# title in the report.
SECTIONS="
tests-cuda 240 60 GPU_CHECK_TESTS tests: learner/cuda (kernels, cuBLASLt, the device backend's steps on the GPU)
step 240 90 GPU_CHECK_STEP training step (${GPU_CHECK_SHAPE:-qwen2.5-0.5b} shape, random weights): device backend and PyTorch eager
torch 330 120 GPU_CHECK_TORCH log probs and gradients against PyTorch (Qwen2.5-0.5B shape, random weights)
decode 300 90 GPU_CHECK_DECODE native engine decode tokens/s (${GPU_CHECK_SHAPE:-qwen2.5-0.5b} shape, random weights), and transformers' generate
profile 120 40 GPU_CHECK_PROFILE where the bf16 step's time goes: every device op timed alone, the top 25
engine 240 60 GPU_CHECK_DECODE native engine on the GPU: tests, and a run with the engine and the learner on cuda
cluster 150 60 GPU_CHECK_CLUSTER nodes with --gpus auto, and a run through them with the learner and the engine on a GPU each holds
tests-shard 150 40 GPU_CHECK_SHARDED tests: learner/shard (data-parallel ranks on the GPU)
attention 210 60 GPU_CHECK_ATTN attention forward+backward (Qwen2.5-0.5B heads): warp-per-query, tiled and tensor-core kernels, PyTorch SDPA
step-more 330 60 GPU_CHECK_STEP training step, variants: bf16 activations, AdamW on the host
step-sharded 180 60 GPU_CHECK_SHARDED training step: one learner and two ranks on the GPU (ZeRO stage 0 and 1)
tests-cpu 300 30 GPU_CHECK_TESTS tests: learner/cpu
step-cpu 150 60 GPU_CHECK_STEP_CPU training step on the CPU backend
samehost 270 60 GPU_CHECK_SAMEHOST same-host all-reduce, 64 MiB (this host's cores; docs/samehost.md)
"

# section runs one section's commands (run calls it through this script,
# under the section's time limit).
section() {
	local name=$1 dir=$2
	case $name in
	tests-cuda | tests-cpu)
		local pkg=learner/${name#tests-}
		local skip=()
		# The emulated subtests ran in CI; on a GPU only the GPU's run,
		# unless GPU_CHECK_EMULATION=1.
		if [ "${GPU_CHECK_EMULATION:-$([ "${RLNODE_REQUIRE_GPU:-}" = 1 ] && echo 0 || echo 1)}" = 0 ]; then
			skip=(-test.skip '/emul')
		fi
		# The tests' own timeout, inside the section's limit: a test that
		# hangs is named (Go prints the tests running), not just stopped.
		cd "$dir/$pkg" && "./$(basename "$pkg").test" -test.v -test.count=1 "${skip[@]}" -test.timeout=$((${GPU_CHECK_LIMIT:-300} - 10))s
		;;
	tests-shard)
		# The GPU's subtests only: the emulated ones ran in CI.
		cd "$dir/learner/shard" && ./shard.test -test.v -test.count=1 -test.run 'TestDevice.*/gpu' -test.timeout=$((${GPU_CHECK_LIMIT:-150} - 10))s
		;;
	step) step "$dir" ;;
	step-more) step_more "$dir" ;;
	profile) profile "$dir" ;;
	step-sharded) step_sharded "$dir" ;;
	step-cpu) step_cpu "$dir" ;;
	torch) torchcheck "$dir" ;;
	decode) decode "$dir" ;;
	engine) engine "$dir" ;;
	cluster) clustercheck "$dir" ;;
	attention) attention "$dir" ;;
	samehost) samehost "$dir" ;;
	*)
		echo "gpu-check: no section $name" >&2
		return 2
		;;
	esac
}

# summarize prints the report's part for one section from its log.
summarize() {
	local name=$1 f=$2
	case $name in
	tests-*)
		printf '%s passed, %s failed, %s skipped\n' \
			"$(grep -c -- '^--- PASS' "$f" || true)" "$(grep -c -- '^--- FAIL' "$f" || true)" "$(grep -c -- '^--- SKIP' "$f" || true)"
		# Each failure and skip, and the messages tests logged.
		grep -E -- '^\s*--- (FAIL|SKIP)|^\s+[a-z_]+_test\.go:[0-9]+:|^panic' "$f" | head -150 || true
		# A timeout's panic names the tests that were running.
		grep -A4 -- '^panic: test timed out' "$f" | grep -E '^\s+Test' | head -8 || true
		grep -E -- '^(FAIL|ok|PASS)' "$f" | tail -3 || true
		;;
	*) cat "$f" ;;
	esac
}

run() {
	local dir
	dir=$(cd "$1" && pwd)
	unpack "$dir"
	export RLNODE_REQUIRE_GPU=${GPU_CHECK_REQUIRE:-1}
	# Temporary files (a 0.5B checkpoint and its gradients: gigabytes) on
	# DIR's disk rather than a /tmp that may be small, and one kernel cache
	# for every section, whatever HOME is (or unset).
	mkdir -p "$dir/tmp" "$dir/kernel-cache"
	export TMPDIR=${GPU_CHECK_TMPDIR:-$dir/tmp} RLNODE_CUDA_CACHE=${RLNODE_CUDA_CACHE:-$dir/kernel-cache}
	local log out=${GPU_CHECK_OUT:-}
	log=$(mktemp -d)
	if [ -n "$out" ]; then
		mkdir -p "$out"
		: >"$out/report.txt"
		: >"$out/full.log"
	fi
	# say prints a line of the report as soon as it is known (and keeps it
	# in GPU_CHECK_OUT/report.txt), so a run stopped from outside has
	# everything up to its last section.
	say() {
		if [ -n "$out" ]; then
			tee -a "$out/report.txt"
		else
			cat
		fi
	}
	local budget=${GPU_CHECK_BUDGET:-0} t0
	t0=$(date +%s)
	{
		echo "================ rlnode gpu-check report ================"
		echo "== host"
		uname -srm
		date -u +%Y-%m-%dT%H:%M:%SZ
		echo "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
		if command -v nvidia-smi >/dev/null 2>&1; then
			timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
		else
			echo "nvidia-smi: not found"
		fi
		if command -v python3 >/dev/null 2>&1; then
			echo "python3: $(command -v python3)"
			timeout 60 python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "available:", torch.cuda.is_available())' 2>&1 | tail -1 || true
		else
			echo "python3: not found"
		fi
		echo "== rlnode gpu"
		# rlnode gpu exits 0 either way: its last lines say whether the
		# backend is available.
		if ! backend_available; then
			find_libraries
			backend_available || true
		fi
		[ "$budget" = 0 ] || echo "budget: $budget s for the whole run; a section starts only with its minimum left, and stops when the budget does"
	} 2>&1 | say
	# The libraries find_libraries found, for the sections (it ran in the
	# pipeline's subshell above).
	if [ -s "$dir/tmp/libraries.env" ]; then
		set -a
		# shellcheck disable=SC1091
		. "$dir/tmp/libraries.env"
		set +a
	fi
	# Without the backend every GPU section fails, each at length (the
	# emulated GPU's run alone takes minutes): say so, and stop.
	if [ "$RLNODE_REQUIRE_GPU" = 1 ] && ! backend_available >/dev/null 2>&1; then
		{
			echo "== NO CUDA BACKEND: rlnode gpu failed (above), so no section ran"
			echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
			ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc\.so|libcublasLt\.so' | head -12 || echo "ldconfig -p: none of libcuda, libnvrtc, libcublasLt"
			echo "to rerun with the libraries named: RLNODE_CUDA_DRIVER=... RLNODE_NVRTC=... RLNODE_CUBLASLT=... (docs/cuda.md)"
			echo "== result: FAIL (RLNODE_REQUIRE_GPU=1)"
		} 2>&1 | say
		return 1
	fi
	local failed=0 ran=() skipped=() name max min switch title
	while read -r name max min switch title; do
		[ -n "$name" ] || continue
		[ "${!switch:-1}" != 0 ] || continue
		local lim=$max
		if [ "$budget" != 0 ]; then
			local left=$((budget - ($(date +%s) - t0)))
			if [ "$left" -lt "$min" ]; then
				skipped+=("$name")
				continue
			fi
			[ "$lim" -le "$left" ] || lim=$left
		fi
		local s0 rc=0
		s0=$(date +%s)
		if [ -n "$out" ]; then
			echo "######## $name (limit $lim s)" >>"$out/full.log"
			GPU_CHECK_LIMIT=$lim timeout -k 10 "$lim" bash "$SELF" section "$name" "$dir" </dev/null 2>&1 | tee -a "$out/full.log" >"$log/$name.txt" || rc=$?
		else
			GPU_CHECK_LIMIT=$lim timeout -k 10 "$lim" bash "$SELF" section "$name" "$dir" </dev/null >"$log/$name.txt" 2>&1 || rc=$?
		fi
		{
			echo "== $title [$(($(date +%s) - s0)) s]"
			summarize "$name" "$log/$name.txt"
			case $rc in
			0) ;;
			124 | 137) echo "$name: stopped at its limit of $lim s" ;;
			*) echo "$name: exit status $rc" ;;
			esac
		} 2>&1 | say
		[ "$rc" = 0 ] || failed=1
		ran+=("$name")
	done <<<"$SECTIONS"
	{
		echo "== sections run: ${ran[*]:-none}; in $(($(date +%s) - t0)) s"
		[ ${#skipped[@]} = 0 ] || echo "== not started, too little of the budget left: ${skipped[*]}"
		echo "== result: $([ "$failed" = 0 ] && echo PASS || echo FAIL) (RLNODE_REQUIRE_GPU=$RLNODE_REQUIRE_GPU; full logs in $log)"
	} | say
	return "$failed"
}

# backend_available prints rlnode gpu's report and says whether it found
# the CUDA backend available.
backend_available() {
	gpu_report=$(timeout 60 "$dir/bin/rlnode" gpu 2>&1) || true
	printf '%s\n' "$gpu_report"
	grep -q '^CUDA backend: available' <<<"$gpu_report"
}

# find_libraries looks for the three libraries where rlnode's own search
# did not (rlnode gpu failed): the linker's cache, the folders drivers
# are mounted at, python3's site-packages (NVIDIA's wheels, PyTorch's
# own), a CUDA toolkit. It names each one found in an RLNODE_* variable
# not already set, prints them, and keeps them in DIR/tmp/libraries.env
# for the sections.
find_libraries() {
	local var what glob dirs=() found
	dirs+=(/usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /opt)
	if command -v python3 >/dev/null 2>&1; then
		local sp
		sp=$(timeout 30 python3 -c 'import site, sysconfig; print("\n".join(site.getsitepackages() + [sysconfig.get_paths()["purelib"]]))' 2>/dev/null || true)
		while read -r d; do [ -z "$d" ] || dirs+=("$d"); done <<<"$sp"
	fi
	: >"$dir/tmp/libraries.env"
	for var in RLNODE_CUDA_DRIVER:driver:libcuda.so.1 RLNODE_NVRTC:NVRTC:'libnvrtc.so.1[0-9]*' RLNODE_CUBLASLT:cuBLASLt:'libcublasLt.so.1[0-9]*'; do
		glob=${var##*:}
		what=${var#*:}
		what=${what%%:*}
		var=${var%%:*}
		# Only the libraries rlnode gpu did not load, and not named already.
		grep -q "^$what: *not loaded" <<<"${gpu_report:-}" || continue
		[ -z "${!var:-}" ] || continue
		found=$(ldconfig -p 2>/dev/null | grep -E 'x86-64|AArch64' | grep -o "/[^ ]*/${glob%%\**}[^ ]*" | grep -v stubs | head -1 || true)
		if [ -z "$found" ]; then
			found=$(timeout 30 find "${dirs[@]}" -maxdepth 4 -name "$glob" -not -path '*stubs*' \( -type f -o -type l \) 2>/dev/null | grep -v 'builtins\|alt' | sort -r | head -1 || true)
		fi
		if [ -n "$found" ]; then
			echo "gpu-check: rlnode found no library itself; setting $var=$found"
			echo "$var=$found" >>"$dir/tmp/libraries.env"
			export "$var=$found"
		else
			echo "gpu-check: $var: no $glob found"
		fi
	done
}

# step_env sets the training-step benchmarks' shape and rows.
step_env() {
	export RLNODE_STEP_SHAPE=${GPU_CHECK_SHAPE:-qwen2.5-0.5b} RLNODE_STEP_SEQ=${GPU_CHECK_SEQ:-1024} RLNODE_STEP_BATCH=${GPU_CHECK_BATCH:-8}
}

# has_torch_cuda says whether python3 has torch with a GPU.
has_torch_cuda() {
	command -v python3 >/dev/null 2>&1 && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null
}

# step times training steps on the same shape, rows and loss: the device
# backend (fp32, bf16 products, bf16 with the attention on the tensor
# cores; fused AdamW) through BenchmarkTrainingStep, and PyTorch eager
# through torch_step.py.
step() {
	local dir=$1 rc=0
	step_env
	echo "rows: $RLNODE_STEP_BATCH x $RLNODE_STEP_SEQ tokens, the second half of each row scored"
	# With the attention on the tensor cores too (-tc; opt-in until seen
	# here), unless GPU_CHECK_TC=0.
	(cd "$dir/learner/cuda" && RLNODE_STEP_CPU=0 RLNODE_STEP_TC=$([ "${GPU_CHECK_TC:-1}" = 0 ] && echo 0 || echo 1) timeout --foreground 150 ./cuda.test -test.run '^$' -test.bench 'TrainingStep' -test.benchtime 3x -test.timeout=140s) 2>&1 |
		grep -E 'Benchmark|allocator|FAIL|panic|Error|_test\.go:[0-9]+:' || rc=1
	if has_torch_cuda; then
		local o
		o=$(mktemp)
		for dt in bf16 fp32; do
			# The JSON line, or what went wrong (warnings may follow the JSON on stderr).
			timeout --foreground 120 python3 "$dir/learner/cuda/testdata/torch_step.py" --shape "$RLNODE_STEP_SHAPE" --seq "$RLNODE_STEP_SEQ" --batch "$RLNODE_STEP_BATCH" --dtype "$dt" --steps 3 >"$o" 2>&1 || true
			grep -m1 '^{' "$o" || tail -n 5 "$o"
		done
	else
		echo "PyTorch with CUDA: not available, no comparison"
	fi
	return "$rc"
}

# step_more times the bf16 step's variants: keeping the layers'
# activations as bf16 (time, and the allocator's bytes), and AdamW on the
# host (what the fused optimizer saves).
step_more() {
	local dir=$1
	step_env
	cd "$dir/learner/cuda"
	if [ "${GPU_CHECK_ACTBF16:-1}" != 0 ]; then
		RLNODE_STEP_CPU=0 RLNODE_STEP_ACTBF16=1 timeout --foreground 90 ./cuda.test -test.run '^$' -test.bench 'TrainingStep/gpu-bf16-bf16acts' -test.benchtime 1x -test.timeout=85s 2>&1 |
			grep -E 'Benchmark|allocator|FAIL|panic|_test\.go:[0-9]+:' || echo "device backend with bf16 activations: no figure (it failed, or ran past its 90 s)"
	fi
	if [ "${GPU_CHECK_HOSTOPT:-1}" != 0 ]; then
		RLNODE_STEP_CPU=0 RLNODE_STEP_HOSTOPT=1 timeout --foreground 90 ./cuda.test -test.run '^$' -test.bench 'TrainingStep/gpu-bf16-hostopt' -test.benchtime 1x -test.timeout=85s 2>&1 |
			grep -E 'Benchmark|FAIL|panic|_test\.go:[0-9]+:' || echo "device backend with AdamW on the host: no figure (it failed, or ran past its 90 s)"
	fi
}

# profile runs one bf16 step, and one with the attention on the tensor
# cores, with every device op timed alone (kernels by name, products by
# shape, copies): where the step's time goes.
profile() {
	step_env
	cd "$1/learner/cuda"
	local tc
	tc=$([ "${GPU_CHECK_TC:-1}" = 0 ] && echo 0 || echo 1)
	# -test.v: without it, a benchmark's log is cut to its first lines.
	RLNODE_STEP_CPU=0 RLNODE_STEP_TC=$tc RLNODE_STEP_PROFILE=1 timeout --foreground 110 ./cuda.test -test.v -test.run '^$' -test.bench 'TrainingStep/gpu-bf16(-tc)?$' -test.benchtime 1x -test.timeout=105s 2>&1 |
		sed -n -e '/^Benchmark.*ns\/op/p' -e '/FAIL\|panic\|_test\.go:[0-9]*: [^p]/p' -e '/profiled step/,/all device ops/p' | grep . || { echo "profiled bf16 step: no figure (it failed, or ran past its 110 s)"; return 1; }
}

# step_sharded times a step of one learner and of two data-parallel ranks
# on the GPU under ZeRO stage 0 and 1 (same device, half the rows each).
step_sharded() {
	step_env
	cd "$1/learner/shard" && timeout --foreground 180 ./shard.test -test.run '^$' -test.bench 'DeviceStep/gpu' -test.benchtime 1x -test.timeout=170s 2>&1 |
		grep -E 'Benchmark|FAIL|panic|Error|_test\.go:[0-9]+:' || { echo "sharded steps: no figure (it failed, or ran past its 180 s)"; return 1; }
}

# step_cpu times the same step on the CPU backend (the slowest part).
step_cpu() {
	step_env
	cd "$1/learner/cuda" && timeout --foreground 150 ./cuda.test -test.run '^$' -test.bench 'TrainingStep/cpu' -test.benchtime 1x -test.timeout=140s 2>&1 |
		grep -E 'Benchmark|FAIL|panic|_test\.go:[0-9]+:' || { echo "CPU backend: no figure (it failed, or ran past its 150 s)"; return 1; }
}

# attention times one causal attention's forward and backward passes on
# the GPU with the warp-per-query kernels, the tiled ones and the
# tensor-core ones (BenchmarkAttention), and PyTorch's scaled_dot_product_attention on the
# same shape (torch_attention.py, float32 and bfloat16).
attention() {
	local dir=$1 rc=0
	local seq=${GPU_CHECK_SEQ:-1024} batch=${GPU_CHECK_BATCH:-8}
	echo "rows: $batch x $seq tokens, one causal sequence each"
	(cd "$dir/learner/cuda" && RLNODE_ATTN_SEQ=$seq RLNODE_ATTN_BATCH=$batch timeout --foreground 120 ./cuda.test -test.run '^$' -test.bench 'Attention/gpu' -test.benchtime 5x -test.timeout=110s) 2>&1 |
		grep -E 'Benchmark|FAIL|panic|Error|_test\.go:[0-9]+:' || { echo "attention: no figure (it failed, or ran past its 120 s)"; rc=1; }
	if has_torch_cuda; then
		timeout --foreground 90 python3 "$dir/learner/cuda/testdata/torch_attention.py" --seq "$seq" --batch "$batch" 2>&1 | tail -2 || true
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
	if ! has_torch_cuda; then
		echo "PyTorch with CUDA: not available, no comparison"
		return 1
	fi
	timeout --foreground 120 "$dir/bin/rlnode" model init --config "$dir/learner/model/testdata/qwen2.5-0.5b-instruct.config.json" --out "$tmp/q05" --seed 1 || return 1
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
		timeout --foreground 150 "$dir/bin/rlnode" model forward --model "$tmp/q05" --input "$tmp/in.json" --out "$tmp/go-$dev.safetensors" --grad --device "$dev" || { rc=1; continue; }
		# shellcheck disable=SC2086
		timeout --foreground 150 python3 "$dir/learner/model/testdata/compare_forward.py" --model "$tmp/q05" --input "$tmp/in.json" \
			--scores "$tmp/go-$dev.safetensors" --grad --device cuda $tols || rc=1
	done
	rm -rf "$tmp"
	return "$rc"
}

# engine runs rollout/native's device tests (greedy and seeded samples
# against the CPU engine, a model loaded onto the device) and quickstart
# for 2 SFT and 2 RL steps with the engine and the learner on the GPU.
engine() {
	local dir=$1 rc=0 out
	out=$(mktemp -d)
	(cd "$dir/rollout/native" && timeout --foreground 120 ./native.test -test.v -test.count=1 -test.run 'TestEngineOnGPU|TestLoadOnDevice' -test.timeout=110s) >"$out/tests.txt" 2>&1 || rc=1
	printf 'rollout/native: %s passed, %s failed, %s skipped\n' \
		"$(grep -c -- '--- PASS' "$out/tests.txt" || true)" "$(grep -c -- '--- FAIL' "$out/tests.txt" || true)" "$(grep -c -- '--- SKIP' "$out/tests.txt" || true)"
	grep -E -- '--- (FAIL|SKIP)|^\s+[a-z_]+_test\.go:[0-9]+:|^panic' "$out/tests.txt" | head -40 || true
	if timeout --foreground 120 "$dir/bin/rlnode" run quickstart --out "$out/run" --set sft.steps=2 --set schedule.steps=2 \
		--set engines.policy.device=cuda --set placement.learner_device=cuda >"$out/run.log" 2>&1; then
		echo "rlnode run quickstart, engine and learner on cuda, 2 SFT and 2 RL steps: ok"
		tail -n 2 "$out/run/metrics.jsonl" | cut -c1-200
	else
		echo "rlnode run quickstart on cuda: FAILED"
		tail -n 20 "$out/run.log"
		rc=1
	fi
	rm -rf "$out"
	return "$rc"
}

# clustercheck starts two nodes on this host, one offering what nvidia-smi
# finds (--gpus auto) and one told no GPU is visible, prints the GPUs each
# offers, and runs quickstart through them (2 SFT and 2 RL steps) with
# the learner and the rollout actor each holding half a GPU and opening
# cuda: only the GPU node can host them, and each opens the device the
# node's ledger gave it.
clustercheck() {
	local dir=$1 rc=0 out gossip
	out=$(mktemp -d)
	(
		export RLNODE_HOME=$out/home
		rl=$dir/bin/rlnode
		if ! timeout --foreground 40 "$rl" start --bind 127.0.0.1:0 --gpus "${GPU_CHECK_CLUSTER_GPUS:-auto}" --node-id gpu --detach >"$out/start.txt" 2>&1; then
			echo "rlnode start --gpus auto: FAILED"
			tail -n 20 "$out/start.txt"
			exit 1
		fi
		gossip=$(awk '$1 == "gossip:" {print $2; exit}' "$out/start.txt")
		CUDA_VISIBLE_DEVICES='' timeout --foreground 40 "$rl" join "$gossip" --bind 127.0.0.1:0 --gpus auto --node-id cpu \
			--key-file "$RLNODE_HOME/cluster.key" --detach >"$out/join.txt" 2>&1 || { echo "rlnode join: FAILED"; tail -n 20 "$out/join.txt"; }
		timeout --foreground 20 "$rl" status --address "$gossip" 2>&1 | sed -n '1,3p'
		if timeout --foreground 150 "$rl" run quickstart --address "$gossip" --bind 127.0.0.1:0 --key-file "$RLNODE_HOME/cluster.key" --driver-only \
			--out "$out/run" --set sft.steps=2 --set schedule.steps=2 --set placement.learner.gpus=0.5 --set placement.rollout.gpus=0.5 \
			--set placement.learner_device=cuda --set engines.policy.device=cuda >"$out/run.log" 2>&1; then
			echo "rlnode run quickstart through the cluster, learner and engine on half a GPU each: ok"
			tail -n 2 "$out/run/metrics.jsonl" | cut -c1-200
		else
			echo "rlnode run quickstart through the cluster on cuda: FAILED"
			tail -n 25 "$out/run.log"
			exit 1
		fi
	) || rc=1
	RLNODE_HOME=$out/home timeout --foreground 30 "$dir/bin/rlnode" stop --all >/dev/null 2>&1 || true
	rm -rf "$out"
	return "$rc"
}

# decode times the native engine's greedy decode (128 tokens after 16,
# batch 1 and 64; fp32 and bf16 products) and transformers' generate on
# the same shape.
decode() {
	local dir=$1 rc=0
	(cd "$dir/rollout/native" && RLNODE_DECODE_SHAPE=${GPU_CHECK_SHAPE:-qwen2.5-0.5b} timeout --foreground 240 ./native.test -test.v -test.run '^$' -test.bench 'DecodeGPU' -test.benchtime 1x -test.timeout=230s) 2>&1 |
		grep -E '^Benchmark.*tokens/s|FAIL|panic|Error|no GPU|_test\.go:[0-9]+:' || { echo "native decode: no figure (it failed, or ran past its 240 s)"; rc=1; }
	if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch, transformers, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
		timeout --foreground 180 python3 "$dir/rollout/native/testdata/hf_generate.py" 2>&1 | grep -E '^hf_generate|^torch |Error|error' | tail -8 || true
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
	(cd "$dir/learner/shard" && timeout --foreground 150 ./shard.test -test.run '^$' -test.bench 'Memcpy/MiB=64|(SharedCopy|Read)Bound/ranks=./MiB=64|AllReduce(Loopback|InPlace)/ranks=./MiB=64' -test.benchtime 20x -test.timeout=140s) 2>&1 |
		grep -E 'Benchmark|FAIL|panic|_test\.go:[0-9]+:' || echo "same-host all-reduce: no figure (it failed, or ran past its 150 s)"
	if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch.distributed' 2>/dev/null; then
		for n in 2 4; do
			timeout --foreground 60 python3 "$dir/learner/shard/testdata/bench_gloo.py" --ranks "$n" --iters 10 --port $((29600 + n)) 2>&1 | grep 'MiB=64' || true
		done
	else
		echo "PyTorch: not available, no gloo figure"
	fi
}

case "${1:-}" in
build) build "${2:?usage: gpu-check.sh build DIR}" ;;
run) run "${2:?usage: gpu-check.sh run DIR}" ;;
section) section "${2:?}" "${3:?}" ;;
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
