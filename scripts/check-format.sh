#!/usr/bin/env bash
# Fails, naming each file, where a C++ file of src/, tools/ or tests/ is not as
# clang-format (.clang-format) would write it. FIX=1 rewrites them instead.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mapfile -t files < <(git ls-files 'src/*.h' 'src/*.cpp' 'tools/*.h' 'tools/*.cpp' 'tests/*.h' 'tests/*.cpp')
if [ "${FIX:-0}" = 1 ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/check-format.$$; then
  grep -o '^[^:]*\.\(h\|cpp\)' /tmp/check-format.$$ | sort -u | sed 's/^/not formatted: /'
  rm -f /tmp/check-format.$$
  echo "check-format: run FIX=1 scripts/in-sysroot scripts/check-format.sh" >&2
  exit 1
fi
rm -f /tmp/check-format.$$
echo "check-format: ${#files[@]} files as clang-format writes them"
