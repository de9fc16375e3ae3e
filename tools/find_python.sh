#!/bin/sh
# Print the path of a Python interpreter that this book supports (3.11 to 3.13: the range
# that the pinned, tested set in requirements-dev.txt installs), or exit 1.
#
#   tools/find_python.sh            the first supported one: python3, then python3.13 ...
#                                   python3.11 on PATH, then pyenv's installed versions
#   tools/find_python.sh 3.13       only that minor version
#   tools/find_python.sh --check P  exit 0 if interpreter P is supported, else say why
MIN=11
MAX=13

supported() {  # $1: an interpreter; true if it runs and is 3.MIN .. 3.MAX
    "$1" -c "import sys; sys.exit(not ((3, $MIN) <= sys.version_info[:2] <= (3, $MAX)))" \
        >/dev/null 2>&1
}

if [ "$1" = "--check" ]; then
    if supported "$2"; then exit 0; fi
    version=$("$2" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
    echo "error: ${version:+Python $version at }'$2' is not a supported interpreter: this book" \
         "needs Python 3.$MIN to 3.$MAX (the pinned numpy, contourpy and Sphinx need 3.11 or" \
         "newer; 3.$MAX is the newest tested)." >&2
    found=$(sh "$0" 2>/dev/null) && echo "       This one would do: make PYTHON=$found ..." >&2
    exit 1
fi

if [ -n "$1" ]; then minors=${1#3.}; else
    minors=""; m=$MAX; while [ $m -ge $MIN ]; do minors="$minors $m"; m=$((m - 1)); done
fi
candidates=""
[ -z "$1" ] && candidates="python3"
for m in $minors; do candidates="$candidates python3.$m"; done
root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
for m in $minors; do
    for p in "$root"/versions/3.$m.*/bin/python3.$m; do [ -x "$p" ] && candidates="$candidates $p"; done
done
for p in $candidates; do
    if supported "$p"; then command -v "$p"; exit 0; fi
done
exit 1
