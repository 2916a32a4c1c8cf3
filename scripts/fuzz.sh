#!/usr/bin/env bash
# make fuzz: builds the libFuzzer targets (clang, ASan + UBSan) in their own build
# tree and runs each for FUZZ_SECONDS, starting from the committed seed corpus.
# New inputs go to a scratch corpus (FUZZ_CORPUS, kept between runs, never the
# repository); findings to BUILD/crashes/. Exits non-zero on any finding.
#   FUZZ_SECONDS   seconds per target (default 60)
#   FUZZ_TARGETS   which targets (default: message_decoder tensor_validation session region_rings guest_replies peer_channel store_channel model_library)
#   FUZZ_CORPUS    scratch corpus root (default /tmp/ggml-remote-fuzz)
#   FUZZ_ARGS      extra libFuzzer flags
set -euo pipefail
build=${1:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-message_decoder tensor_validation session region_rings guest_replies peer_channel store_channel model_library}
scratch=${FUZZ_CORPUS:-/tmp/ggml-remote-fuzz}
repo=$(cd "$(dirname "$0")/.." && pwd)

command -v clang++ >/dev/null || { echo "make fuzz: needs clang++ with libFuzzer" >&2; exit 2; }
CC=clang CXX=clang++ cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGGML_REMOTE_FUZZ=ON \
    $(command -v ninja >/dev/null && echo -G Ninja) >/dev/null
build_targets=()
for target in $targets; do build_targets+=("ggml-remote-fuzz-$target"); done
cmake --build "$build" -j2 --target "${build_targets[@]}"

mkdir -p "$build/crashes"
failed=()
for target in $targets; do
    mkdir -p "$scratch/$target"
    echo "== fuzzing $target for $seconds s (corpus $scratch/$target, seeds tests/fuzz/corpus/$target)"
    # Findings are crash-, leak-, timeout- and oom- artifacts. libFuzzer also writes a
    # slow-unit- artifact for an input over 10 s (well under -timeout): it is reported,
    # not counted, since on a shared 2-core machine it says more about the load.
    findings() { find "$build/crashes" -maxdepth 1 -type f ! -name '*slow-unit-*' | wc -l; }
    artifacts_before=$(findings)
    # One process at a time, at the lowest priority: fuzzing shares the machine.
    set +e
    nice -n 19 "$build/bin/ggml-remote-fuzz-$target" -max_total_time="$seconds" -timeout=25 \
        -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$build/crashes/$target-" \
        ${FUZZ_ARGS:-} "$scratch/$target" "$repo/tests/fuzz/corpus/$target" >"$build/fuzz-$target.log" 2>&1
    rc=$?
    set -e
    grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|INFO: exiting|stat::|==[0-9]+==ERROR|SUMMARY|.*GGML_ASSERT|artifact_prefix)' \
        "$build/fuzz-$target.log" || true
    # With FUZZ_ARGS="-fork=1 -ignore_crashes=1" a run goes on after a finding: count them.
    [ "$(findings)" = "$artifacts_before" ] || rc=${rc/#0/1}
    grep -h '^Slowest unit' "$build/fuzz-$target.log" || true
    [ "$rc" = 0 ] || failed+=("$target (exit $rc, see $build/fuzz-$target.log)")
done
if [ ${#failed[@]} -gt 0 ]; then
    printf 'make fuzz: finding in %s\n' "${failed[@]}" >&2
    ls -l "$build/crashes" >&2
    exit 1
fi
echo "make fuzz: no findings"
