#!/usr/bin/env bash
# fuzz/run.sh BUILD_DIR SECONDS TARGET... — runs each libFuzzer target for SECONDS, starting from
# its checked-in seeds (fuzz/corpus/<target>/, never written to) plus a scratch corpus in
# BUILD_DIR/corpus/<target>/ that grows across runs. FUZZ_JOBS targets run at once (default: the
# core count; each fuzzer is one process on one core, so each still gets its full SECONDS of a core).
# Fails on any crash, leak, sanitizer report, timeout (an input taking > 10 s) or out-of-memory
# (> 2 GB); the reproducer is left in BUILD_DIR/artifacts/ and its path printed by libFuzzer.
# Reproduce with:
#   BUILD_DIR/fuzz/fuzz_<target> BUILD_DIR/artifacts/<target>-crash-...
set -euo pipefail
build=$1 seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
jobs=${FUZZ_JOBS:-$(nproc)}
if ! [[ $jobs =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz/run.sh: FUZZ_JOBS must be a positive integer, got '$jobs'" >&2
  exit 2
fi

# One target: its log in BUILD_DIR/fuzz_<target>.log, its exit status in BUILD_DIR/fuzz_<target>.status.
fuzz_one() {
  local t=$1 bin=$build/fuzz/fuzz_$1 scratch=$build/corpus/$1 dict=() rc=0
  mkdir -p "$scratch" "$build/artifacts"
  [ -f "$here/$t.dict" ] && dict=(-dict="$here/$t.dict")
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "${dict[@]}" \
    "$scratch" "$here/corpus/$t" > "$build/fuzz_$t.log" 2>&1 || rc=$?
  echo "$rc" > "$build/fuzz_$t.status"
}

running=0
for t in "$@"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  echo "== fuzz_$t for ${seconds}s"
  rm -f "$build/fuzz_$t.status"
  fuzz_one "$t" &
  running=$((running + 1))
done
wait || true

status=0
for t in "$@"; do
  rc=$(cat "$build/fuzz_$t.status" 2>/dev/null || echo missing)
  if [ "$rc" != 0 ]; then
    echo "fuzz_$t FAILED (exit status $rc); last lines of $build/fuzz_$t.log:"
    tail -n 40 "$build/fuzz_$t.log"
    status=1
  else
    echo -n "fuzz_$t: "
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$build/fuzz_$t.log" | tr '\n' ' '
    echo
  fi
done
exit $status
