#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`: clang 14, ASan + UBSan, build/fuzz) and runs each
# one for a bounded time on its committed seeds. Fails on any crash, sanitizer report, leak,
# timeout or out-of-memory, and prints the reproducer.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     default 60; targets run $(nproc) at a time
#
# Targets are src/<part>/<name>_fuzz.cc; the seeds of <name>_fuzz are src/<part>/testdata/fuzz_<name>/
# (required) and its dictionary src/<part>/testdata/fuzz_<name>.dict (optional). What a run finds
# is kept in build/fuzz/corpus/<name>_fuzz/ (reused by the next run on this machine); crashes land
# in build/fuzz/artifacts/<name>_fuzz/, logs in build/fuzz/logs/. Reproduce one with
#   build/fuzz/<name>_fuzz build/fuzz/artifacts/<name>_fuzz/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
[[ "$secs" =~ ^[0-9]+$ ]] && [ "$secs" -ge 1 ] || { echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]" >&2; exit 2; }

scripts/install-deps.sh  # clang-14, libclang-rt-14-dev (libFuzzer), libomp-14-dev
cmake --preset fuzz
cmake --build build/fuzz -j"$(nproc)" --target fuzz

# UBSan reports abort (the build uses -fno-sanitize-recover); ASan reports leaks at exit.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:print_stacktrace=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

mapfile -t sources < <(find src -name '*_fuzz.cc' | sort)
[ ${#sources[@]} -gt 0 ] || { echo "fuzz: no src/**/*_fuzz.cc" >&2; exit 1; }
mkdir -p build/fuzz/logs
for src in "${sources[@]}"; do
  seeds="$(dirname "$src")/testdata/fuzz_$(basename "$src" _fuzz.cc)"
  [ -d "$seeds" ] || { echo "fuzz: $src has no seed corpus $seeds/" >&2; exit 1; }
done
names=()
for src in "${sources[@]}"; do
  target=$(basename "$src" .cc)
  part_dir=$(dirname "$src")
  seeds="$part_dir/testdata/fuzz_${target%_fuzz}"
  names+=("$target")
  args=(-max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
        -artifact_prefix="build/fuzz/artifacts/$target/")
  dict="$part_dir/testdata/fuzz_${target%_fuzz}.dict"
  [ -f "$dict" ] && args+=(-dict="$dict")
  rm -rf "build/fuzz/artifacts/$target"
  mkdir -p "build/fuzz/corpus/$target" "build/fuzz/artifacts/$target"
  echo "fuzz: $target for ${secs}s on $seeds/"
  # Up to nproc targets at once; each writes its own log.
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
  ( rc=0
    build/fuzz/"$target" "${args[@]}" "build/fuzz/corpus/$target" "$seeds" > "build/fuzz/logs/$target.log" 2>&1 || rc=$?
    echo "$rc" > "build/fuzz/logs/$target.rc" ) &
done
wait

num_failed=0
printf '%-22s %10s %10s %8s %8s  %s\n' target runs execs/s cov corpus result
for target in "${names[@]}"; do
  log="build/fuzz/logs/$target.log"
  rc=$(cat "build/fuzz/logs/$target.rc")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' "$log" | tail -1)
  corpus=$(find "build/fuzz/corpus/$target" -type f | wc -l)
  if [ "$rc" -eq 0 ]; then
    printf '%-22s %10s %10s %8s %8s  %s\n' "$target" "${runs:-?}" "${eps:-?}" "${cov:-?}" "$corpus" ok
  else
    num_failed=$((num_failed + 1))
    printf '%-22s %10s %10s %8s %8s  %s\n' "$target" "${runs:-?}" "${eps:-?}" "${cov:-?}" "$corpus" "FAILED (exit $rc)"
  fi
done
echo "fuzz: $(( ${#names[@]} - num_failed )) passed, $num_failed failed"
if [ "$num_failed" -ne 0 ]; then
  for target in "${names[@]}"; do
    [ "$(cat "build/fuzz/logs/$target.rc")" -eq 0 ] && continue
    echo
    echo "=== $target: build/fuzz/logs/$target.log (last 60 lines)"
    tail -n 60 "build/fuzz/logs/$target.log"
    for f in "build/fuzz/artifacts/$target"/*; do
      [ -f "$f" ] && echo "reproduce: build/fuzz/$target $f"
    done
  done
  exit 1
fi
