#!/usr/bin/env bash
# The README's first command: install what is missing (tools/setup.sh demo), build, and
# run the main job: a 4-rank all-reduce benchmark over loopback, a short gyre-train run
# and a short DDP training on Debian's torch, backend gyre next to gloo.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo needs: the library's packages, gyre-train's, Debian's torch, ninja and
# ccache (tools/setup.sh test installs the rest, for tools/test.sh).
tools/setup.sh demo
# The programs the demo runs, not the test suite (tools/test.sh builds that). A new build
# folder is configured without the tests, whose GoogleTest the demo does not install; one
# already configured keeps what it has.
config=()
[ -f "${BUILD_DIR:-build}/build.ninja" ] || config=(-DGYRE_BUILD_TESTS=OFF)
BUILD_TARGETS="gyrerun gyre-store gyre-bench gyre-train" tools/build.sh "${config[@]}"
bin=${BUILD_DIR:-build}/bin
echo "== gyrerun -n 4 gyre-bench -b 8 -e 32M -f 4 -c 1"
"$bin/gyrerun" -n 4 "$bin/gyre-bench" -b 8 -e 32M -f 4 -c 1
if [ -x "$bin/gyre-train" ]; then
  echo "== gyrerun -n 4 gyre-train --epochs 1"
  "$bin/gyrerun" -n 4 "$bin/gyre-train" --epochs 1
fi
# PyTorch: a short DDP training on backend gyre next to the same on gloo (python/, the
# README's PyTorch section, docs/pytorch.md), where Debian's torch is installed.
if /usr/bin/python3 -c "import torch" 2>/dev/null && [ -d /usr/include/torch/csrc/distributed/c10d ]; then
  out=${BUILD_DIR:-build}/gyre_torch/demo
  mkdir -p "$out"
  [ -d /usr/lib/ccache ] && export PATH=/usr/lib/ccache:$PATH
  echo "== building gyre_torch (torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'))"
  (cd python && GYRE_CMAKE_BUILD_DIR="$PWD/../$out/cmake" /usr/bin/python3 setup.py -q build \
     --build-base "../$out/py" >"../$out/build.log" 2>&1) || {
    # The compiler's errors first: the log ends in setuptools' traceback, which hides them.
    grep -E "(fatal )?error: " "$out/build.log" | head -20; tail -5 "$out/build.log"
    echo "demo: building gyre_torch failed (full log: $out/build.log)"; exit 1; }
  export PYTHONPATH=$(ls -d "$out"/py/lib.*)
  for backend in gyre gloo; do
    echo "== DDP MLP, 4 ranks (mp.spawn), 150 steps, backend $backend"
    /usr/bin/python3 python/examples/ddp_train.py --backend "$backend" -N 4 --steps 150 \
      --train-count 38400 | /usr/bin/python3 -c \
      'import json,sys; r=json.loads(sys.stdin.read().splitlines()[-1]); print("%s: %.0f samples/s, test accuracy %.4f" % (r["backend"], r["samples_per_s"], r["test_acc"]))'
  done
fi
