#!/usr/bin/env bash
# A copy of the tree (run from its root) with a patch applied, for the cross-build scripts (cross_ab.sh,
# trace_ab.sh): everything but build/, ab_variants/, .peers/ and .git/, then `patch -p1`.
# Usage: scripts/patched_copy.sh DEST PATCH   (exit 1, "does not apply", if the patch fails)
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: scripts/patched_copy.sh DEST PATCH"; exit 2; }
mkdir -p "$1"
tar cf - --exclude=./build --exclude=./ab_variants --exclude=./.peers --exclude=./.git . | (cd "$1" && tar xf -)
(cd "$1" && patch -p1 -s < "$2") || { echo "the patch $2 does not apply"; exit 1; }
