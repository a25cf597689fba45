#!/usr/bin/env bash
# The README's second command: install what is missing, build, run the whole suite.
#   tools/test.sh                      every stage CI runs (below), in that order
#   tools/test.sh --stages S[,S...]    only those stages
#   tools/test.sh --sanitize address   the same as --stages asan
#   tools/test.sh --sanitize thread    the same as --stages tsan
#   tools/test.sh --build-only [--sanitize X]   install and build, run nothing
# The stages:
#   suite    the build in build/ and every ctest entry but the VM's (unit, multi-process,
#            network namespaces, launchers, torch on both lines)
#   rdma_vm  the rdma tests for real in a soft-RoCE VM (tools/rdma_vm_test.sh; about a
#            minute and a half; skips saying why where no VM can boot, fails instead
#            under GYRE_REQUIRE_RDMA=1, which CI sets)
#   fresh    tools/fresh_machine_test.sh: the two commands on a new minimal Debian 12
#            root (skips, saying why, where it cannot run: not root)
#   asan     the suite built with ASan+UBSan in build-asan/ (no torch, no VM: the
#            emulated CPU and torch's own uninstrumented code would multiply its cost)
#   tsan     the same with TSan in build-tsan/
# GYRE_TEST_STAGES sets the default list: suite,rdma_vm,fresh,asan (tsan is not in it:
# docs/testing.md says where it runs and why).
set -euo pipefail
cd "$(dirname "$0")/.."
stages=${GYRE_TEST_STAGES:-suite,rdma_vm,fresh,asan}
build_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --sanitize) stages=${2:?address or thread}; stages=${stages/address/asan}; stages=${stages/thread/tsan}; shift 2 ;;
    --stages) stages=${2:?a list such as suite,asan}; shift 2 ;;
    --build-only) build_only=1; shift ;;
    *) sed -n '2,8p' "$0" >&2; exit 2 ;;
  esac
done
for s in ${stages//,/ }; do
  case $s in suite|rdma_vm|fresh|asan|tsan) ;; *) echo "test.sh: unknown stage '$s'" >&2; exit 2 ;; esac
done
has() { [[ ",$stages," == *",$1,"* ]]; }
say() { echo "== test.sh: $* ($(date +%T))" >&2; }

tools/setup.sh test   # every package: the suite, the VM, the fresh-machine test, fuzzers
tools/torch_venv.sh   # PyPI torch 2 for the pypi torch entries, cached under ~/.cache/gyre
# No leftovers from a previous run may pass for ours.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1}

if has suite || has rdma_vm; then
  # The tests and benchmarks on explicitly: tools/demo.sh configures build/ without them.
  BUILD_DIR=${BUILD_DIR:-build} tools/build.sh -DGYRE_BUILD_TESTS=ON -DGYRE_BUILD_BENCH=ON
  if [ $build_only = 0 ] && has suite; then
    say "stage suite"
    # GYRE_REQUIRE_RDMA (CI sets it) is for the VM: on the host, with no RDMA device, the
    # rdma tests skip.
    (cd "${BUILD_DIR:-build}" && env -u GYRE_REQUIRE_RDMA ctest --output-on-failure --timeout 300 -j 2 -LE rdma_vm)
  fi
  if [ $build_only = 0 ] && has rdma_vm; then
    say "stage rdma_vm"
    (cd "${BUILD_DIR:-build}" && ctest --output-on-failure -L rdma_vm)
  fi
fi
if [ $build_only = 0 ] && has fresh; then
  say "stage fresh"
  # Skips (77), saying why, where it cannot run; CI runs as root.
  rc=0; tools/fresh_machine_test.sh || rc=$?
  [ $rc = 0 ] || [ $rc = 77 ] || exit $rc
fi
for s in asan tsan; do
  has $s || continue
  dir=build-$s
  BUILD_DIR=$dir tools/build.sh -DGYRE_SANITIZE="$([ $s = asan ] && echo address || echo thread)"
  [ $build_only = 0 ] || continue
  say "stage $s"
  # The torch entries build gyre_torch against torch's own uninstrumented libraries:
  # they run in the suite stage only.
  (cd "$dir" && env -u GYRE_REQUIRE_RDMA ctest --output-on-failure --timeout 300 -j 2 -LE 'rdma_vm|torch')
done
say "all stages passed: $stages"
