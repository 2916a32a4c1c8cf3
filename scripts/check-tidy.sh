#!/usr/bin/env bash
# clang-tidy (.clang-tidy) over the code at the trust boundary: the protocol, the
# transports, and what the listener and workers share. BUILD's compile_commands.json
# gives each file its flags. Usage: scripts/check-tidy.sh BUILD [FILE...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:?usage: scripts/check-tidy.sh BUILD [FILE...]}
shift
[ -f "$build/compile_commands.json" ] || { echo "check-tidy: no $build/compile_commands.json (configure first)" >&2; exit 2; }
if [ $# -eq 0 ]; then
  mapfile -t files < <(git ls-files 'src/protocol/*.cpp' 'src/transport/*.cpp' 'src/host/common/*.cpp')
else
  files=("$@")
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet >"$log" 2>&1; then
  grep -v 'warnings\? generated\.$' "$log" | grep -v '^Suppressed\|^Use -header-filter' >&2 || true
  echo "check-tidy: .clang-tidy found the above" >&2
  exit 1
fi
echo "check-tidy: ${#files[@]} files pass .clang-tidy"
