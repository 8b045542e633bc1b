#!/usr/bin/env bash
# Builds gyre and the whole CPU test suite with AddressSanitizer + UndefinedBehaviorSanitizer
# (preset `asan`: clang 14, GYRE_SANITIZE=ON; the same configuration and folder as the fuzz preset,
# build/fuzz, so that CI compiles the sanitized libraries once for the fuzzers and the suite: the
# libraries carry libFuzzer's coverage hooks, which the ASan runtime answers with no-ops outside a
# fuzzer) and runs it: `ctest --preset asan`, which is
# `ctest -LE gpu` with ASAN_OPTIONS / UBSAN_OPTIONS set to stop at the first report
# (halt_on_error=1, print_stacktrace=1, detect_leaks=1; see CMakePresets.json). Every test runs,
# the CLI contract tests and both Node client tests (serve_openai_client, mcp_sdk_client) included
# (they drive the sanitized binary), except three numerics-parity tests on the trained fixture
# whose code paths the same suites cover on smaller fixtures under ASan: TextEval's agreement with
# transformers, the trained model's long prompt across chunks, and speculative greedy decoding on
# glm5_mini (130 s, 79 s and 69 s under ASan on 2 cores, 10x their plain time; 12-05 CI run), and
# the sampled-verify-row chi-square on glm5_mini (29 s under ASan here; the tiny fixtures run). They
# run in the plain suite. Idempotent; prints the build and
# test times. Runs in CI (.ci/run) after the fuzz stage: 395 s build + 91 s tests from clean.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/install-test-data.sh
start=$SECONDS
cmake --preset asan
cmake --build build/fuzz -j"$(nproc)"
built=$SECONDS
rc=0
ctest --preset asan || rc=$?
echo "sanitize: build $((built - start)) s, tests $((SECONDS - built)) s"
exit "$rc"
