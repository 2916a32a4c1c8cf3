#!/bin/sh
# Prints the Depends: of the libraries that ELF files need, as dpkg-shlibdeps
# would, for a build root without dpkg-dev: for each NEEDED library, the package
# that holds it, at the highest version its symbols file gives for the symbols
# the files use (or the version of its shlibs file).
#   usage: shlibdeps.sh [--at-least PACKAGE=VERSION]... ELF...
# --at-least raises (or adds) a package's minimum: what symbols cannot tell, such
# as an ABI a plugin relies on.
set -eu

floors=""
while [ $# -gt 0 ]; do
    case $1 in
    --at-least) floors="$floors $2"; shift 2 ;;
    --) shift; break ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: shlibdeps.sh [--at-least PACKAGE=VERSION]... ELF..." >&2; exit 2; }

info=/var/lib/dpkg/info
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The file of a package's control area (symbols, shlibs), with or without :arch.
control_file() {  # control_file PACKAGE EXT
    for f in "$info/$1:$(dpkg --print-architecture).$2" "$info/$1.$2"; do
        [ -f "$f" ] && { echo "$f"; return 0; }
    done
    return 1
}

# Every dynamic symbol the files take from elsewhere, as name@VERSION (name@Base
# when unversioned).
readelf --dyn-syms -W "$@" |
    awk '$7 == "UND" && $8 != "" { s = $8; sub(/@+/, "@", s); if (s !~ /@/) s = s "@Base"; print s }' |
    sort -u >"$work/undefined"

# pkg minver lines, one per (library package, version a used symbol needs).
: >"$work/minima"
for soname in $(readelf -d -W "$@" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u); do
    owner=$(dpkg -S "*/$soname" 2>/dev/null | awk -v so="/$soname" 'substr($2, length($2) - length(so) + 1) == so { print $1; exit }')
    [ -n "$owner" ] || { echo "shlibdeps.sh: no package holds $soname" >&2; exit 1; }
    package=${owner%%:*}
    package=${package%,}
    if symbols=$(control_file "$package" symbols) && grep -q "^$soname " "$symbols"; then
        # The soname's section of the symbols file: " symbol@VERSION minver".
        awk -v so="$soname" -v pkg="$package" '
            FNR == NR { used[$1] = 1; next }
            /^[^ *|#]/ { in_section = ($1 == so); next }
            in_section && /^ / {
                name = $1; sub(/^\([^)]*\)/, "", name)   # drop tags like (arch=amd64)
                if (name in used) print pkg, $2
            }
            END { print pkg, "0" }' "$work/undefined" "$symbols" >>"$work/minima"
    elif shlibs=$(control_file "$package" shlibs); then
        # "libfoo 1 libfoo1 (>= 1.2)": the library name and version that make the soname.
        awk -v so="$soname" '{
                name = $1 ".so." $2
                if (name == so) { v = ""; if (match($0, /\(>= [^)]*\)/)) v = substr($0, RSTART + 4, RLENGTH - 5); print $3, (v == "" ? "0" : v); exit }
            }' "$shlibs" >>"$work/minima"
    else
        echo "$package 0" >>"$work/minima"
    fi
done
for floor in $floors; do echo "${floor%%=*} ${floor#*=}" >>"$work/minima"; done

# The highest minimum per package, compared as Debian versions.
depends=""
for package in $(cut -d' ' -f1 "$work/minima" | sort -u); do
    best=0
    for version in $(awk -v p="$package" '$1 == p { print $2 }' "$work/minima" | sort -u); do
        dpkg --compare-versions "$version" gt "$best" && best=$version
    done
    entry=$package
    [ "$best" = 0 ] || entry="$package (>= $best)"
    depends="${depends:+$depends, }$entry"
done
echo "$depends"
