#!/usr/bin/env bash
# ctest's torch_backend_<line>: builds gyre_torch against one torch line into OUT and
# runs its tests there.   run_suite.sh debian|pypi OUT [GYRERUN] [WHAT]
# WHAT: backend (default: torch_version_check_test + store_bridge_test + collectives_test
# + auth_torch_test + flight_recorder_torch_test + shrink_torch_test + torchft_test +
# ddp_test), dist_suite (torch's own distributed_test.py, the expected-pass list, world 2
# and 3), features (ddp_features_test), frameworks (frameworks_test: Lightning and
# Accelerate against gloo; 77 where they are not installed), version (torch_version_check_test
# alone: the recorded torch and gyre_torch.__version__ against GYRE_PROJECT_VERSION),
# recovery (recovery_torch_test: a DDP script under gyrerun --elastic survives a rank's
# death, 10 runs; torch >= 2.15),
# styles (styles_test: FSDP2, DCP, tensor and pipeline parallelism, DTensor, functional
# collectives on gyre against gloo; 77 on torch < 2.6),
# style_suite (torch's DTensor/TP/FSDP2/pipelining test files from the pytorch checkout in
# GYRE_PYTORCH_SRC, default ~/.cache/gyre/pytorch-src, the expected-pass lists of
# torch_style_suite/; 77 where that checkout or expecttest is missing),
# surface (surface_test: the Backend methods beyond the plain collectives, against gloo),
# cuda (cuda_device_path_test: the device path for CUDA tensors against gloo on CPU, world
# 2 and 4 on one GPU; 77 without a GPU, on torch < 2.6, or built without the device path).
# Exit 77 (ctest: skipped) with the reason when that torch line is not installed.
set -euo pipefail
line=$1 out=$2 gyrerun=${3:-} what=${4:-backend}
here=$(cd "$(dirname "$0")" && pwd)
case $line in
  debian) py=/usr/bin/python3
          want="Debian's python3-torch (tools/setup.sh installs python3-torch libtorch-dev)" ;;
  pypi)   py=${GYRE_TORCH2_VENV:-$HOME/.cache/gyre/venv-torch2}/bin/python
          want="PyPI's torch in ${GYRE_TORCH2_VENV:-$HOME/.cache/gyre/venv-torch2} (tools/torch_venv.sh creates it)" ;;
  *) echo "usage: $0 debian|pypi OUT [GYRERUN]" >&2; exit 2 ;;
esac
if ! [ -x "$py" ] || ! "$py" -c "import torch" 2>/dev/null; then
  echo "SKIPPED: torch_backend_$line needs $want"
  exit 77
fi
if [ "$line" = debian ] && ! [ -d /usr/include/torch/csrc/distributed/c10d ]; then
  echo "SKIPPED: torch_backend_debian needs libtorch-dev (the c10d headers)"
  exit 77
fi
if [ "$line" = debian ] && [ "$what" = frameworks ]; then  # before minutes of building
  echo "SKIPPED: torch_frameworks_debian: Lightning and Accelerate need torch >= 2 (docs/frameworks.md)"
  exit 77
fi
if [ "$line" = debian ] && [ "$what" = recovery ]; then
  echo "SKIPPED: torch_recovery_debian: torch.distributed.shrink_group needs torch >= 2.15"
  exit 77
fi
if [ "$line" = debian ] && [ "$what" = styles ]; then
  echo "SKIPPED: torch_styles_debian: FSDP2, DTensor, tensor and pipeline parallelism need torch >= 2.6; Debian's is $("$py" -c 'import torch; print(torch.__version__)')"
  exit 77
fi
if [ "$line" = debian ] && [ "$what" = cuda ]; then
  echo "SKIPPED: torch_cuda_device_debian: the device path needs a CUDA build of torch >= 2.6; Debian's is $("$py" -c 'import torch; print(torch.__version__)') (CPU only)"
  exit 77
fi
mkdir -p "$out"
# ccache through its compiler links, when installed (torch's cpp_extension wants a plain
# compiler name in CXX).
[ -d /usr/lib/ccache ] && export PATH=/usr/lib/ccache:$PATH
export GYRE_CMAKE_BUILD_DIR=$out/cmake
(cd "$here/.." && "$py" setup.py -q build --build-base "$out/py" >"$out/build.log" 2>&1) || {
  grep -E "(fatal )?error: " "$out/build.log" | head -20; tail -20 "$out/build.log"
  echo "FAILED: building gyre_torch against $line's torch (full log: $out/build.log)"; exit 1; }
PYTHONPATH=$(ls -d "$out"/py/lib.*)
export PYTHONPATH
cd "$out"
case $what in
  backend)
    "$py" "$here/torch_version_check_test.py"
    "$py" "$here/store_bridge_test.py"
    "$py" "$here/collectives_test.py" --world 2,3,4
    "$py" "$here/auth_torch_test.py"
    "$py" "$here/flight_recorder_torch_test.py"
    # torch >= 2.15 only (shrink_group); 77 where the line has none.
    "$py" "$here/shrink_torch_test.py" || [ $? -eq 77 ]
    # torchft's Manager over gyre_torch.torchft.ProcessGroupGyre: torch 2 with torchft
    # (tools/torch_venv.sh installs it); 77 elsewhere. RUST_LOG: the Lighthouse's log.
    RUST_LOG=${RUST_LOG:-warn} "$py" "$here/torchft_test.py" || [ $? -eq 77 ]
    "$py" "$here/ddp_test.py" ${gyrerun:+--gyrerun "$gyrerun"} ;;
  dist_suite) "$here/dist_suite.sh" "$py" "$out/dist_suite" ;;
  features) "$py" "$here/ddp_features_test.py" --world 2,3 ;;
  frameworks) "$py" "$here/frameworks_test.py" ${gyrerun:+--gyrerun "$gyrerun"} ;;
  version) "$py" "$here/torch_version_check_test.py" ;;
  recovery) "$py" "$here/recovery_torch_test.py" ${gyrerun:+--gyrerun "$gyrerun"} ;;
  styles) "$py" "$here/styles_test.py" --world 4,2 ;;
  style_suite)
    if ! "$py" -c "import expecttest" 2>/dev/null; then
      echo "SKIPPED: torch's test utilities need expecttest for $py (tools/torch_venv.sh)"
      exit 77
    fi
    "$py" "$here/torch_style_suite.py" --backend gyre --only-expected \
      --src "${GYRE_PYTORCH_SRC:-$HOME/.cache/gyre/pytorch-src}" \
      --expect "$here/torch_style_suite" --json "$out/style_suite.json" ;;
  surface) "$py" "$here/surface_test.py" --world 2,4 ;;
  cuda) "$py" "$here/cuda_device_path_test.py" --world 2,4 ;;
  *) echo "run_suite.sh: unknown WHAT '$what'" >&2; exit 2 ;;
esac
