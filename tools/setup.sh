#!/usr/bin/env bash
# Installs the Debian 12 packages of one set; does nothing when they are all present.
# Needs root or sudo only when something is missing.
#
#   tools/setup.sh [library|demo|test]   install a set (default: test, everything)
#   tools/setup.sh --list SET            print the set's packages, install nothing
#
# The sets, each containing the one before it:
#   library  the library alone (cmake -DGYRE_BUILD_TESTS=OFF -DGYRE_BUILD_BENCH=OFF):
#            read from docs/install.md's block marked <!-- prerequisites:library -->, the
#            list a user copies (the fresh-machine test's plain step installs exactly it)
#   demo     what tools/demo.sh runs: gyre-bench, gyre-train, DDP on Debian's torch
#   test     what tools/test.sh builds and runs: the suite, the RDMA VM, the fresh-machine
#            test, the fuzzers, both torch lines
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# The packages of docs/install.md's marked block: every word of its first fenced block
# after the marker but the command itself (sudo, apt-get, install), options and comments.
library_packages() {
  local doc=$here/../docs/install.md
  [ -f "$doc" ] || { echo "setup: $doc is missing (it holds the library's packages)" >&2; return 1; }
  awk '
    /<!-- prerequisites:library -->/ { marked = 1; next }
    marked && /^```/ { if (inside) exit; inside = 1; next }
    inside {
      sub(/#.*/, "")
      for (i = 1; i <= NF; i++)
        if ($i !~ /^(sudo|apt-get|apt|install|\\)$/ && $i !~ /^-/) print $i
    }' "$doc"
}

demo_packages=(
  ninja-build                                     # tools/build.sh's generator
  ccache                                          # tools/build.sh and gyre_torch's builds compile through it
  pkg-config                                      # finds OpenBLAS for gyre-train
  libopenblas-dev zlib1g-dev                      # gyre-train: BLAS, gzip'd IDX files
  dataset-fashion-mnist                           # gyre-train's and the DDP demo's data
  python3-torch libtorch-dev                      # gyre_torch (python/): torch 1.13 + c10d headers
  pybind11-dev python3-setuptools python3-dev     # what libtorch-dev needs and does not depend on
)

test_packages=(
  libboost-context-dev                            # the simulator's fibers (sim/, gyre-sim): 4,096 ranks in one process
  googletest libgtest-dev libgmock-dev            # tests
  libbenchmark-dev                                # reduce_bench
  libibverbs-dev                                  # RDMA transport (optional at run time)
  ibverbs-providers ibverbs-utils perftest        # soft-RoCE provider, ibv_devinfo, ib_write_bw
  qemu-system-x86 busybox-static kmod cpio        # the soft-RoCE VM of the rdma tests (tools/rdma_vm.sh)
  iproute2                                        # multi-host tests in network namespaces
  mmdebstrap                                      # tools/fresh_machine_test.sh: a new Debian 12 root
  openmpi-bin libopenmpi-dev                      # mpirun tests; gyre-bench's MPI bootstrap
  slurm-wlm                                       # srun tests (tools/slurm_local.sh)
  clang                                           # libFuzzer targets (fuzz/)
  libclang-rt-14-dev                              # their libFuzzer and sanitizer runtimes (only a Recommends of clang's)
  python3                                         # install_consumer_test: libgyre_c.so from ctypes
  python3-venv                                    # torch_pip_install_debian: venvs over Debian's torch
  python3-pip                                     # tools/torch_venv.sh: expecttest for Debian's python
  ca-certificates                                 # pip's TLS to PyPI (a minbase root has no CA bundle)
  python3-matplotlib                              # tools/plot_bench.py (gyre-bench's plots)
)

# One package a line.
packages_of() {
  local out lib
  out=$(library_packages) || return 1
  [ -n "$out" ] || { echo "setup: docs/install.md's library block lists no package" >&2; return 1; }
  mapfile -t lib <<<"$out"
  case $1 in
    library) printf '%s\n' "${lib[@]}" ;;
    demo)    printf '%s\n' "${lib[@]}" "${demo_packages[@]}" ;;
    test)    printf '%s\n' "${lib[@]}" "${demo_packages[@]}" "${test_packages[@]}" ;;
    *) echo "setup: unknown set '$1' (library, demo or test)" >&2; return 2 ;;
  esac
}

if [ "${1:-}" = --list ]; then
  list=$(packages_of "${2:?--list library|demo|test}")
  echo "$list"
  exit 0
fi
set_name=${1:-test}
list=$(packages_of "$set_name")
mapfile -t packages <<<"$list"

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ($set_name) ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
