#!/usr/bin/env bash
# make sanitize: the unit tests, the replay of every fuzz corpus and the race tests,
# built with AddressSanitizer and UndefinedBehaviorSanitizer (clang) in their own
# build tree. Any sanitizer report fails its test (-fno-sanitize-recover, and
# halt_on_error below). CI runs it after `make test`.
#   SANITIZE_LABELS   ctest labels to run (default: unit|race)
#   SANITIZE_TARGETS  what to build (default: the unit tests, the corpus replays and
#                     the programs the race tests start)
set -euo pipefail
build=${1:-build-sanitize}
repo=$(cd "$(dirname "$0")/.." && pwd)
labels=${SANITIZE_LABELS:-unit|race}

command -v clang++ >/dev/null || { echo "make sanitize: needs clang++" >&2; exit 2; }
CC=clang CXX=clang++ cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGGML_REMOTE_SANITIZE=ON \
    $(command -v ninja >/dev/null && echo -G Ninja) >/dev/null
default_targets="ggml-remote-unit-tests ggml-remote-server ggml-remote-worker ggml-remote-services ggml-remote ggml-remote-race-client"
for corpus in "$repo"/tests/fuzz/corpus/*/; do
    default_targets+=" ggml-remote-fuzz-replay-$(basename "$corpus")"
done
# shellcheck disable=SC2086
cmake --build "$build" -j2 --target ${SANITIZE_TARGETS:-$default_targets}

# Leaks are not checked: LeakSanitizer stops the world with ptrace, which the
# workers' seccomp filter refuses, and a worker's memory ends with its process.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=0:detect_leaks=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
ctest --test-dir "$build" --output-on-failure -L "$labels" ${CTEST_ARGS:-}
