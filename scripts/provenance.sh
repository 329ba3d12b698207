# provenance.sh: source from the A/B scripts. The benchmarks name their commit from HOPPERKIT_COMMIT, else git. A
# device copy of the tree can carry a stale .git (session 15: runs labelled with the session's first commit), so
# set HOPPERKIT_GIT_HASH in the device command to the local `git rev-parse --short HEAD`.
export HOPPERKIT_COMMIT=${HOPPERKIT_COMMIT:-${HOPPERKIT_GIT_HASH:-}}
[ -n "$HOPPERKIT_COMMIT" ] || echo "warning: HOPPERKIT_GIT_HASH is not set: results take their commit from this tree's .git, which a device copy may carry stale" >&2
