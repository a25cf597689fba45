#!/bin/bash
# tools/rdma_vm_test.sh <build-dir>: the ctest entry `rdma_vm`. Runs the rdma-labelled tests
# (tests/rdma/*_test.cc) inside a soft-RoCE VM (tools/rdma_vm.sh, topology "pair": rxe_a and
# rxe_b on the two ends of a veth pair) with GYRE_REQUIRE_RDMA=1, so a device that is missing
# in the VM fails instead of skipping.
# Exit 77 (ctest: skipped), printing why, where no VM can be booted here: not root, no
# qemu-system-x86_64 (tools/setup.sh installs it), or the kernel image cannot be built (no
# Debian mirror). GYRE_REQUIRE_RDMA=1 turns those skips into failures (CI sets it).
# GYRE_RDMA_VM_TESTS: a ctest -R regex to run a subset (default: all rdma tests).
set -uo pipefail
build=$(cd "${1:?usage: rdma_vm_test.sh <build-dir>}" && pwd -P)
here=$(cd "$(dirname "$0")" && pwd -P)
skip() {
  if [ "${GYRE_REQUIRE_RDMA:-0}" = 1 ]; then echo "rdma_vm: FAILED (GYRE_REQUIRE_RDMA=1): $*"; exit 1; fi
  echo "rdma_vm: skipped: $*"; exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (9p share of /, packages)"
command -v qemu-system-x86_64 > /dev/null || skip "qemu-system-x86_64 is not installed (run tools/setup.sh)"
for p in busybox-static cpio kmod ibverbs-providers; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    skip "package $p is not installed (run tools/setup.sh)"
done
filter=${GYRE_RDMA_VM_TESTS:-.}
export RDMA_VM_TIMEOUT=${RDMA_VM_TIMEOUT:-1100}
"$here/rdma_vm.sh" "$build" \
  "GYRE_REQUIRE_RDMA=1 ctest -L '^rdma\$' -R '$filter' --output-on-failure --timeout 900"
rc=$?
[ $rc = 125 ] && skip "the VM could not be booted or its RDMA setup failed (see above)"
exit $rc
