#!/usr/bin/env bash
# Builds gyre (CPU preset) and runs the whole test suite with CTest. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/install-test-data.sh
cmake --preset cpu
cmake --build build/cpu -j"$(nproc)"
ctest --preset cpu
