#!/usr/bin/env bash
# Lists the functions in src/ longer than a limit (default 80 lines), longest
# first, from universal-ctags' start and end lines. Exits 1 when any is found.
#   scripts/long-functions.sh [LIMIT] [DIR...]
set -o pipefail
limit=${1:-80}
[ $# -gt 0 ] && shift
dirs=${*:-src}
# shellcheck disable=SC2086
ctags -R --languages=C++ --kinds-C++=f --fields=+ne -o - $dirs |
    awk -F'\t' -v limit="$limit" '
    {
        start = ""; end = ""
        for (i = 4; i <= NF; i++) {
            if ($i ~ /^line:/) start = substr($i, 6)
            if ($i ~ /^end:/) end = substr($i, 5)
        }
        if (start == "" || end == "") next
        if ($1 ~ /^__anon/) next   # lambdas count toward their enclosing function
        n = end - start + 1
        if (n > limit) { printf "%5d  %s:%s  %s\n", n, $2, start, $1; found = 1 }
    }
    END { exit found ? 1 : 0 }' | sort -rn
