#!/usr/bin/env bash
# fuzz/run.sh BUILD_DIR SECONDS TARGET... — runs each libFuzzer target for SECONDS, starting from
# its checked-in seeds (fuzz/corpus/<target>/, never written to) plus a scratch corpus in
# BUILD_DIR/corpus/<target>/ that grows across runs. Fails on the first crash, leak, sanitizer
# report, timeout (an input taking > 10 s) or out-of-memory (> 2 GB); the reproducer is left in
# BUILD_DIR/artifacts/ and its path printed by libFuzzer. Reproduce with:
#   BUILD_DIR/fuzz/fuzz_<target> BUILD_DIR/artifacts/<target>-crash-...
set -euo pipefail
build=$1 seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
status=0
for t in "$@"; do
  bin=$build/fuzz/fuzz_$t
  scratch=$build/corpus/$t
  mkdir -p "$scratch" "$build/artifacts"
  dict=()
  [ -f "$here/$t.dict" ] && dict=(-dict="$here/$t.dict")
  echo "== fuzz_$t for ${seconds}s"
  if ! "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "${dict[@]}" \
       "$scratch" "$here/corpus/$t" > "$build/fuzz_$t.log" 2>&1; then
    echo "fuzz_$t FAILED; last lines of $build/fuzz_$t.log:"
    tail -n 40 "$build/fuzz_$t.log"
    status=1
  else
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$build/fuzz_$t.log" | tr '\n' ' '
    echo
  fi
done
exit $status
