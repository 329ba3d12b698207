#!/usr/bin/env bash
# Write ab_variants/NAME/ from a commit or branch: its versions of the files where it differs from the checked-out
# tree (HEAD), for scripts/variant_ab.sh. Files the commit deletes are not supported (the script says so).
# Usage: scripts/make_variant.sh NAME COMMIT [-- PATH...]   (PATHs limit the files, e.g. -- src/prologue)
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=$1 REV=$2; shift 2
[ "${1:-}" = "--" ] && shift
rm -rf "ab_variants/$NAME"
if [ "$(git merge-base HEAD "$REV")" != "$(git rev-parse HEAD)" ]; then
  echo "make_variant: $REV does not contain HEAD: its files would undo HEAD's later changes to them; rebase it first"
  exit 2
fi
n=0
while IFS=$'\t' read -r status path; do
  case "$status" in
    D) echo "make_variant: $REV deletes $path: not supported"; exit 2 ;;
    *) mkdir -p "ab_variants/$NAME/$(dirname "$path")"; git show "$REV:$path" > "ab_variants/$NAME/$path"; n=$((n + 1)) ;;
  esac
done < <(git diff --name-status --no-renames HEAD..."$REV" -- "$@")  # the commit's own changes since HEAD's line
echo "ab_variants/$NAME: $n files from $REV ($(git rev-parse --short "$REV"))"
