#!/usr/bin/env bash
# Installs what building and testing rlnode needs on a fresh Debian machine.
# Go modules come from the module proxy through `go mod download`.
set -euo pipefail
cd "$(dirname "$0")/.."
go mod download
