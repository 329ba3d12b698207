#!/usr/bin/env bash
# Write ab_variants/NAME/ from a commit or branch: its versions of the files it changed since it branched off the
# checked-out line (HEAD), for scripts/variant_ab.sh. Files the commit deletes are not supported (the script says so).
# Usage: scripts/make_variant.sh NAME COMMIT [-- PATH...]   (PATHs limit the files, e.g. -- src/prologue)
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=$1 REV=$2; shift 2
[ "${1:-}" = "--" ] && shift
rm -rf "ab_variants/$NAME"
BASE=$(git merge-base HEAD "$REV")
# HEAD may have moved on since the commit branched off, but not in the files the variant replaces (those would
# lose HEAD's later changes): then rebase the commit first
BOTH=$(comm -12 <(git diff --name-only "$BASE" HEAD -- "$@" | sort) <(git diff --name-only "$BASE" "$REV" -- "$@" | sort))
if [ -n "$BOTH" ]; then
  echo "make_variant: HEAD changed these files after $REV branched off; rebase it first: $BOTH"; exit 2
fi
n=0
while IFS=$'\t' read -r status path; do
  case "$status" in
    D) echo "make_variant: $REV deletes $path: not supported"; exit 2 ;;
    *) mkdir -p "ab_variants/$NAME/$(dirname "$path")"; git show "$REV:$path" > "ab_variants/$NAME/$path"; n=$((n + 1)) ;;
  esac
done < <(git diff --name-status --no-renames "$BASE" "$REV" -- "$@")  # the commit's own changes
echo "ab_variants/$NAME: $n files from $REV ($(git rev-parse --short "$REV"))"
