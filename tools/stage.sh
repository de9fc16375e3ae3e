#!/usr/bin/env bash
# One stage of `make test`: run it, print its wall and CPU time, record them.
#
#     sh tools/stage.sh NAME COMMAND [ARG ...]
#
# Appends "NAME<TAB>wall s<TAB>CPU s<TAB>exit status" to $STAGES (default
# _build/stages.tsv), which make test prints at the end and .ci/run checks: every
# stage that should run has a line there, with status 0.
set -u
name=$1
shift
stages=${STAGES:-_build/stages.tsv}
mkdir -p "$(dirname "$stages")"
times=$(mktemp)
echo "== $name: $*"
exec 3>&2
TIMEFORMAT='%R %U %S'
{ time "$@" 2>&3; } 2>"$times"
status=$?
read -r wall user sys <"$times"
rm -f "$times"
cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }')
printf '%s\t%.1f\t%s\t%s\n' "$name" "$wall" "$cpu" "$status" >>"$stages"
printf '== %s: %.0f s (%s s of CPU)%s\n' "$name" "$wall" "$cpu" \
    "$([ "$status" = 0 ] || echo ", FAILED with status $status")"
exit "$status"
