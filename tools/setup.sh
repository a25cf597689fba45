#!/usr/bin/env bash
# Installs the Debian 12 packages gyre needs to build, test and run its demo; does
# nothing when they are all present. Needs root or sudo only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config   # toolchain
  ccache                                          # tools/build.sh and gyre_torch's builds compile through it
  libfmt-dev                                      # logging
  libssl-dev                                      # libcrypto: HMAC, HKDF, AES-GCM (authentication, docs/security.md)
  libboost-context-dev                            # the simulator's fibers (sim/, gyre-sim): 4,096 ranks in one process
  googletest libgtest-dev libgmock-dev            # tests
  libbenchmark-dev                                # reduce_bench
  libibverbs-dev                                  # RDMA transport (optional at run time)
  ibverbs-providers ibverbs-utils perftest        # soft-RoCE provider, ibv_devinfo, ib_write_bw
  qemu-system-x86 busybox-static kmod cpio        # the soft-RoCE VM of the rdma tests (tools/rdma_vm.sh)
  libopenblas-dev zlib1g-dev                      # gyre-train: BLAS, gzip'd IDX files
  dataset-fashion-mnist                           # gyre-train's data
  iproute2                                        # multi-host tests in network namespaces
  mmdebstrap                                      # tools/fresh_machine_test.sh: a new Debian 12 root
  openmpi-bin libopenmpi-dev                      # mpirun tests; gyre-bench's MPI bootstrap
  slurm-wlm                                       # srun tests (tools/slurm_local.sh)
  clang                                           # libFuzzer targets (fuzz/)
  python3                                         # install_consumer_test: libgyre_c.so from ctypes
  python3-torch libtorch-dev python3-venv         # gyre_torch (python/): torch 1.13 + c10d headers
  pybind11-dev python3-setuptools python3-dev     # what libtorch-dev needs and does not depend on
  python3-pip                                     # tools/torch_venv.sh: expecttest for Debian's python
  ca-certificates                                 # pip's TLS to PyPI (a minbase root has no CA bundle)
  python3-matplotlib                              # tools/plot_bench.py (gyre-bench's plots)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
