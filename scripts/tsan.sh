#!/usr/bin/env bash
# ThreadSanitizer over the concurrency tests (issue 20, item 5): preset `tsan` (clang 14,
# GYRE_TSAN=ON, build/tsan) builds the test binaries of the parts that run threads — parallel (the
# in-process and TCP communicators, bootstrap, context parallelism), engine (scheduler thread,
# cancellation, prefix cache, speculation), transfer (the KV/state transfer engine and the
# disaggregated runners) and serve (the HTTP server, its strands and work pool, streaming) — and runs
# them with halt_on_error=1: the first data race, lock-order inversion or thread leak stops the binary
# and prints both stacks, the threads' creation sites and the mutexes held (docs/feedback.md,
# "Races found by name"). OMP_NUM_THREADS=1: libomp and OpenBLAS are not instrumented, so their
# worker threads would only give false reports; gyre's own threads are what this stage checks.
#
#   scripts/tsan.sh [PART ...]     default: parallel engine transfer serve, every test
#   scripts/tsan.sh --ci           CI's bounded set: parallel, transfer, and engine without the
#                                  model-fixture suites (Fixtures/*, Backends/*: numerics, not threads;
#                                  770 of test_engine's 868 s under TSan). serve is left to the full run
#                                  (its build and 180 s of tests would take CI past 45 min).
#
# Prints per binary its tests, its time and PASS / FAIL, then `tsan: build N s, tests N s`. Exit 0
# iff every binary passed. Runs in CI (.ci/run) after the ASan + UBSan stage.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/install-test-data.sh
ci=0
if [ "${1:-}" = "--ci" ]; then ci=1; shift; set -- parallel engine transfer; fi
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(parallel engine transfer serve)
targets=()
for p in "${parts[@]}"; do targets+=("test_$p"); done
start=$SECONDS
cmake --preset tsan
cmake --build build/tsan -j"$(nproc)" --target "${targets[@]}"
built=$SECONDS
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:report_thread_leaks=1:ignore_noninstrumented_modules=1:suppressions=$PWD/scripts/tsan.supp"
export OMP_NUM_THREADS=1
# clang 14's TSan needs its fixed shadow layout; kernels with 32+ bits of mmap randomisation break it
# ("unexpected memory mapping"). Run without address randomisation when a probe says so.
launch=()
if ! build/tsan/test_"${parts[0]}" --gtest_list_tests > /dev/null 2>&1; then
  launch=(setarch "$(uname -m)" -R)
  echo "tsan: running with address randomisation off (setarch -R)"
fi
rc=0
for t in "${targets[@]}"; do
  t0=$SECONDS
  filter=()
  [ "$ci" = 1 ] && [ "$t" = test_engine ] && filter=(--gtest_filter=-Fixtures/*:Backends/*)
  if "${launch[@]}" "build/tsan/$t" --gtest_brief=1 "${filter[@]}"; then
    echo "tsan: $t PASS ($((SECONDS - t0)) s)"
  else
    echo "tsan: $t FAIL ($((SECONDS - t0)) s)"
    rc=1
  fi
done
echo "tsan: build $((built - start)) s, tests $((SECONDS - built)) s"
exit "$rc"
