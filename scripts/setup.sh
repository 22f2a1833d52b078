#!/usr/bin/env bash
# Installs what building and testing rlnode needs on a fresh Debian machine:
# Go modules from the module proxy, Debian packages (bubblewrap and python3
# for the code sandbox, slurm-wlm and munge for the Slurm tests, chromium for
# the dashboard's browser tests, libnvrtc11.2 and g++ for the CUDA kernel
# tests), and the npm packages of the tests that drive our servers with
# official clients (openai, OpenTelemetry, DuckDB).
set -euo pipefail
cd "$(dirname "$0")/.."
go mod download

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
[ -x /usr/bin/python3 ] || need+=(python3)
command -v node >/dev/null 2>&1 || need+=(nodejs npm)
# Headless Chromium for the dashboard's browser tests (they skip without it).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# A real Slurm on this machine for the sbatch tests; they need root (slurmd
# starts jobs as their owner) and skip without it, so only root installs it.
if [ "$(id -u)" = 0 ] && ! { [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/munged ]; }; then
	need+=(slurm-wlm munge)
fi
# NVRTC (CUDA's runtime compiler, Debian non-free) and g++ for the CUDA
# kernel tests: they compile every kernel for sm_80/sm_90 and run it under
# a CPU emulation, and skip without them, so only root installs them.
if [ "$(id -u)" = 0 ]; then
	command -v g++ >/dev/null 2>&1 || need+=(g++)
	if ! compgen -G '/usr/lib/*/libnvrtc.so.11.2' >/dev/null; then
		need+=(libnvrtc11.2)
		src=/etc/apt/sources.list.d/debian.sources
		# Add the components to the existing Debian entries where they lack them.
		if [ -f "$src" ]; then
			sed -i -E '/^Components:/{/[[:space:]]contrib([[:space:]]|$)/!s/$/ contrib/;/[[:space:]]non-free([[:space:]]|$)/!s/$/ non-free/}' "$src"
		fi
	fi
fi
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ]; then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
	else
		echo "setup: missing ${need[*]}; install them (apt-get install ${need[*]})" >&2
		exit 1
	fi
fi

# npm packages for tests that drive our servers with official clients.
for dir in $(find . -name node_modules -prune -o -name package.json -path '*/testdata/*' -print | xargs -r -n1 dirname); do
	echo "setup: npm ci in $dir"
	(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
done
