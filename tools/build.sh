#!/usr/bin/env bash
# Configures and builds gyre into ${BUILD_DIR:-build} (extra arguments go to cmake; they
# apply when the folder is first configured); BUILD_TARGETS="a b" builds only those
# targets (the demo needs three programs, not the test suite). Compiles through ccache
# where it is installed (tools/setup.sh installs it): a second build of the same sources,
# in another folder or a fresh clone, costs seconds a file instead of minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  launcher=()
  if command -v ccache >/dev/null; then
    # The source folder mapped to "." in the debug info, so that objects compiled in one
    # clone are correct in another and ccache can share them (with the two variables
    # below, it hashes paths relative to the folder).
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
              "-DCMAKE_C_FLAGS=-fdebug-prefix-map=$PWD=." "-DCMAKE_CXX_FLAGS=-fdebug-prefix-map=$PWD=.")
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@" >&2
fi
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}" >&2
