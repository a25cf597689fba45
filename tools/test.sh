#!/usr/bin/env bash
# The README's second command: install what is missing, build, run the whole suite.
#   tools/test.sh                      normal build in build/
#   tools/test.sh --sanitize address   ASan+UBSan build in build-asan/
#   tools/test.sh --sanitize thread    TSan build in build-tsan/
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=""
if [ "${1:-}" = "--sanitize" ]; then sanitize=${2:?address or thread}; fi
tools/setup.sh
tools/torch_venv.sh   # PyPI torch 2 for torch_backend_pypi, cached under ~/.cache/gyre
if [ -n "$sanitize" ]; then
  export BUILD_DIR=${BUILD_DIR:-build-${sanitize/address/asan}}
  BUILD_DIR=${BUILD_DIR/thread/tsan}
  tools/build.sh -DGYRE_SANITIZE="$sanitize"
else
  export BUILD_DIR=${BUILD_DIR:-build}
  tools/build.sh
fi
# No leftovers from a previous run may pass for ours.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1}
cd "$BUILD_DIR"
# GYRE_REQUIRE_RDMA (CI sets it) is for the VM run below: on the host, with no RDMA
# device, the rdma tests skip.
env -u GYRE_REQUIRE_RDMA ctest --output-on-failure --timeout 300 -j 2 -LE rdma_vm
# Then the rdma tests for real, inside a soft-RoCE VM (tools/rdma_vm_test.sh; a few minutes;
# skips saying why where no VM can boot, fails instead under GYRE_REQUIRE_RDMA=1). Not for
# sanitizer builds: the emulated CPU would multiply their cost again.
if [ -z "$sanitize" ]; then ctest --output-on-failure -L rdma_vm; fi
