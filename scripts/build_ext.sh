#!/usr/bin/env bash
# Builds the Python extension alone from a source tree into a folder that PYTHONPATH can take, for device calls
# that compare several builds (scripts/cross_ab.sh, docs/wip trace calls): no pip install, nothing written to the
# tree. Usage: scripts/build_ext.sh SRC BUILD_DIR DEST JOBS [-DNAME=VALUE...]
#   DEST/hopperkit gets the package's .py files and _C*.so; the build log is BUILD_DIR.log. Exit 1 on failure.
#   HOPPERKIT_GIT_HASH (environment) names the build in build_info.
set -uo pipefail
[ $# -ge 4 ] || { echo "usage: scripts/build_ext.sh SRC BUILD_DIR DEST JOBS [-DNAME=VALUE...]"; exit 2; }
SRC=$1 BUILD=$2 DEST=$3 JOBS=$4; shift 4
PY=${PYTHON:-python3}
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPPERKIT_BUILD_PYTHON=ON \
  -DPython_EXECUTABLE="$(command -v "$PY")" "$@" > "$BUILD.log" 2>&1 &&
cmake --build "$BUILD" --target _C -j "$JOBS" >> "$BUILD.log" 2>&1 &&
mkdir -p "$DEST/hopperkit" && cp "$SRC"/python/hopperkit/*.py "$DEST/hopperkit/" && cp "$BUILD"/_C*.so "$DEST/hopperkit/" ||
  { echo "build of $SRC failed (log: $BUILD.log)"; exit 1; }
