#!/usr/bin/env bash
# Configures and builds gyre into ${BUILD_DIR:-build} with Ninja, RelWithDebInfo unless an
# argument says otherwise.
#   BUILD_DIR=DIR      the build folder (default build)
#   BUILD_TARGETS="a b"  build only those targets (the demo needs four programs, not the
#                      test suite); default: everything the configuration enables
#   extra arguments    go to cmake (-DGYRE_WITH_CUDA=OFF, ...): when the folder is first
#                      configured, and again whenever they differ from those of this
#                      script's last configure of it (tools/demo.sh configures build/
#                      without the tests, tools/test.sh turns them back on)
# Compiles through ccache where it is installed (tools/setup.sh demo installs it): a second
# build of the same sources, in another folder or a fresh clone, costs seconds a file
# instead of minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
args_file=$build/.gyre-build-args
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
  printf '%s\n' "$*" >"$args_file"
elif [ $# -gt 0 ] && [ "$*" != "$(cat "$args_file" 2>/dev/null)" ]; then
  cmake -S . -B "$build" "$@" >&2
  printf '%s\n' "$*" >"$args_file"
fi
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}" >&2
