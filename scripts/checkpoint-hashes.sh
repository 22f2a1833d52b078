#!/usr/bin/env bash
# Runs shortened deterministic versions of the built-in recipes and prints the
# SHA-256 of every file in each run's final checkpoint (weights, optimizer
# state, learner and driver state; the feedback policy's too) and of the
# run's metrics.jsonl with its wall-clock fields removed.
#
#   bash scripts/checkpoint-hashes.sh            # print
#   bash scripts/checkpoint-hashes.sh --check    # compare with scripts/checkpoint-hashes-KERNEL.golden
#   bash scripts/checkpoint-hashes.sh --write    # rewrite that golden file
#
# The bytes depend on the CPU backend's kernels (the summation order of the
# matrix kernel, the vector loops' exp), so there is one golden file per
# kernel `rlnode version` names: avx512-12x32, avx2-6x16, generic-4x4.
# RLNODE_CPU_ISA=avx2 or generic checks a lesser one on a bigger CPU.
# A refactor of the training loop must leave these bytes unchanged; a change
# that alters them on purpose rewrites the golden file and says why in its commit.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-print}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

go build -o "$work/rlnode" ./cmd/rlnode
kernel=$("$work/rlnode" version | sed -n 's/^cpu kernel: \([^ ]*\).*/\1/p')
golden=scripts/checkpoint-hashes-${kernel:?rlnode version named no cpu kernel}.golden
if [ "$mode" = --check ] && [ ! -f "$golden" ]; then
	echo "no golden file for the cpu kernel $kernel: $golden (record one with --write from a commit known to be right)" >&2
	exit 1
fi

# Each line: recipe name, then its --set overrides (steps cut to a few).
short="--set schedule.eval_every=3 --set schedule.checkpoint_every=3 --set eval.held_out=8"
runs=(
	"quickstart --set sft.steps=60 --set schedule.steps=4"
	"quickstart_lora --set sft.steps=60 --set schedule.steps=4"
	"ppo_math --set sft.steps=60 --set schedule.steps=4"
	"mlmt_math --set sft.steps=60 --set schedule.steps=4 --set algorithm.batch_prompts=8"
	"mlmt_math_static --set sft.steps=60 --set schedule.steps=4 --set algorithm.batch_prompts=8"
	"score_math --set sft.steps=60 --set schedule.steps=4 --set algorithm.batch_prompts=8"
	"grpo_gsm8k --set sft.steps=60 --set schedule.steps=4 --set algorithm.batch_prompts=8"
	"quickstart --set sft.steps=60 --set schedule.steps=4 --set engines.policy.replicas=2"
	"mlmt_math_stopgrad --set sft.steps=60 --set schedule.steps=4 --set algorithm.batch_prompts=8"
)

out="$work/hashes.txt"
: >"$out"
for spec in "${runs[@]}"; do
	read -r name args <<<"$spec"
	label="$name${args:+ $args}"
	dir="$work/run"
	rm -rf "$dir"
	# shellcheck disable=SC2086
	if ! "$work/rlnode" run "$name" --out "$dir" $short $args >"$work/log" 2>&1; then
		echo "run failed: $label" >&2
		tail -20 "$work/log" >&2
		exit 1
	fi
	last=$(ls -d "$dir"/checkpoints/step-* | sort -t- -k2 -n | tail -1)
	echo "# $label" >>"$out"
	(cd "$last" && find . -type f | LC_ALL=C sort | xargs sha256sum) >>"$out"
	# Wall-clock fields (seconds, rates) differ between runs; everything else must not.
	sed -E 's/"[a-z_0-9]*(_s|per_s|_per_sec)":[-0-9.eE+]+,?//g; s/,}/}/g' "$dir/metrics.jsonl" |
		sha256sum | sed 's/-$/metrics.jsonl (timings removed)/' >>"$out"
done

case "$mode" in
--write) cp "$out" "$golden"; echo "wrote $golden" ;;
--check)
	if diff -u "$golden" "$out"; then echo "checkpoint hashes: identical to $golden"; else
		echo "checkpoint hashes differ from $golden" >&2; exit 1; fi ;;
*) cat "$out" ;;
esac
