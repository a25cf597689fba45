#!/usr/bin/env bash
# shellcheck disable=SC2317  # some functions run through bash -c "$(declare -f ...)"
# The whole GPU check (device kernels, collectives on device buffers) in one
# short run on a machine with an NVIDIA GPU; prints a summary table last.
#
#   tools/gpu_check.sh --prepare   on a machine with nvcc (no GPU needed): builds
#                                  build-gpu/ (Release, sm_90, no verbs) and packs the
#                                  programs the run needs, with libfmt, into
#                                  build-gpu/pack (a few MiB); where a CUDA build of torch
#                                  is at hand (GYRE_TORCH_PYTHON, default the PyPI venv
#                                  ~/.cache/gyre/venv-torch2), gyre_torch with the device
#                                  path too (build-gpu/pack/py, for that torch version)
#   tools/gpu_check.sh             on the GPU machine: runs build-gpu/pack's programs when
#                                  they start there, else builds in /tmp/gyre-gpu-build
#                                  (needs cmake, ninja, fmt, GTest, Google Benchmark)
#
# Copy the tree with build-gpu/pack to the GPU machine and run tools/gpu_check.sh there.
# Steps, each in its own process group with a time limit (a hung step is killed, group
# and all, and the next step runs):
#   env            GPU, driver, toolkit, torch
#   binaries       the pack (checked against the sources' digest) or a build there
#   test_kernels   cuda_reduce_test: every dtype/op vs the host reduction, bitwise
#   test_allreduce cuda_allreduce_test: 1-4 ranks sharing GPU 0, both stream releases
#   test_ipc       cuda_ipc_test: CUDA IPC memory, interprocess events and stream memory
#                  operations between processes, the IPC error cases
#   test_ipc_allreduce cuda_ipc_allreduce_test: the device collectives through CUDA IPC
#                  (all-reduce, all-gather, reduce-scatter, broadcast), 2-4 ranks on
#                  GPU 0, every dtype/op vs the host collectives, peer loss, abort
#   test_collectives cuda_collectives_test: all-to-all(v), send/recv, sendRecv and barrier
#                  on device buffers on both paths (CUDA IPC, and staged), 2-4 ranks on
#                  GPU 0, byte for byte vs the host collectives
#   torch_device   python/tests/cuda_device_path_test.py: gyre_torch's device path for CUDA
#                  tensors, 2 and 4 ranks on GPU 0, against gloo on CPU (the pack's
#                  gyre_torch when its torch is python3's, else torch_build builds it there)
#   bench_reduce   float32/bfloat16 sum at 256 MiB vs cudaMemcpy D2D (2 reads + 1 write)
#   bench_device   gyrerun -n 4 cuda_allreduce_bench 64 MiB: host vs device buffers
#                  staged through the host (GYRE_CUDA_IPC=0), slices 1M/4M/16M, enqueue
#                  host time
#   bench_ipc2, bench_ipc4  the same 64 MiB with the device all-reduce through CUDA IPC,
#                  2 and 4 ranks sharing GPU 0 (and 1 MiB, 4 ranks: bench_ipc4_1M)
#   torch_gloo     torch.distributed gloo on CUDA tensors, 4 ranks on cuda:0
#   torch_nccl     the same with NCCL (expected to refuse several ranks on one GPU), and
#                  torch_nccl2 with 2 ranks, beside bench_ipc2 (NCCL's version in env)
#   gyre_host      gyrerun -n 4 gyre-bench -b 1M -e 64M -f 4 (host buffers: cross-check,
#                  and the cost of slicing to the host ring)
#   device_hostfn  the device all-reduce with the host-function release (fallback path)
# The whole run stays within GPU_CHECK_BUDGET seconds (default 450); steps that no
# longer fit are reported as skipped. Full output: $OUT/gpu_check.log and the table in
# $OUT/summary.txt (OUT from the environment; else /tmp/gyre-gpu-check).
# Exit status: 0 when every step ran clean and every target was met.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PACK=$ROOT/build-gpu/pack
TARGETS="cuda_reduce_test cuda_allreduce_test cuda_ipc_test cuda_ipc_allreduce_test cuda_collectives_test cuda_reduce_bench cuda_allreduce_bench gyre-bench gyrerun gyre-store"
CMAKE_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGYRE_WITH_VERBS=OFF)

source_digest() {
  (cd "$ROOT" && find base transport store host_kernels collectives ring cuda cuda_kernels capi bench tests tools cmake CMakeLists.txt -type f \
      \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name CMakeLists.txt \) \
      -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}

if [ "${1:-}" = "--prepare" ]; then
  set -e
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  cmake -S "$ROOT" -B "$ROOT/build-gpu" "${CMAKE_FLAGS[@]}"
  # shellcheck disable=SC2086
  cmake --build "$ROOT/build-gpu" --target $TARGETS
  rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/lib"
  for t in $TARGETS; do cp "$ROOT/build-gpu/bin/$t" "$PACK/bin/"; done
  strip --strip-unneeded "$PACK"/bin/* 2>/dev/null || true
  # Shared libraries the GPU machine's image may lack (libfmt); the rest is glibc/libstdc++.
  ldd "$PACK"/bin/* | awk '/libfmt/ {print $3}' | sort -u | xargs -r -I{} cp -L {} "$PACK/lib/"
  source_digest >"$PACK/SOURCES"
  # gyre_torch with the device path, against the CUDA torch at hand (its own CMake build).
  tpy=${GYRE_TORCH_PYTHON:-$HOME/.cache/gyre/venv-torch2/bin/python}
  if [ -x "$tpy" ] && "$tpy" -c 'import torch, sys; sys.exit(not torch.version.cuda)' 2>/dev/null; then
    (cd "$ROOT/python" && GYRE_TORCH_CUDA=1 GYRE_CMAKE_BUILD_DIR=$ROOT/build-gpu/torch-cmake \
       "$tpy" setup.py -q build --build-base "$ROOT/build-gpu/torch" >"$ROOT/build-gpu/torch.log" 2>&1) ||
      { tail -20 "$ROOT/build-gpu/torch.log"; echo "building gyre_torch failed"; exit 1; }
    mkdir -p "$PACK/py" && cp -r "$ROOT"/build-gpu/torch/lib.*/gyre_torch "$PACK/py/"
    echo "gyre_torch for torch $("$tpy" -c 'import torch; print(torch.__version__)') in $PACK/py"
  fi
  echo "packed $(du -sh "$PACK" | cut -f1) into $PACK (sources $(cat "$PACK/SOURCES")); carry build-gpu/pack"
  exit 0
fi
if [ $# -gt 0 ]; then sed -n '3,50p' "$0"; exit 2; fi

OUTDIR=${OUT:-/tmp/gyre-gpu-check}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/gpu_check.log
SUMMARY=$OUTDIR/summary.txt
WORK=$(mktemp -d /tmp/gyre-gpu-check.XXXXXX)
: >"$LOG"
BUDGET=${GPU_CHECK_BUDGET:-450}
START=$SECONDS
export PYTHONUNBUFFERED=1 GYRE_DEBUG=${GYRE_DEBUG:-WARN}
STEPS=()   # "name|status|seconds|note"
BIN=""

# Runs "$@" in a new session, killed with its whole group after $1 seconds.
run_limited() {
  local limit=$1 ticks=0
  shift
  setsid "$@" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ $ticks -ge $((limit * 10)) ]; then
      kill -TERM -- "-$pid" 2>/dev/null; sleep 3; kill -KILL -- "-$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 0.1
    ticks=$((ticks + 1))
  done
  wait "$pid"
}

# step NAME LIMIT_SECONDS COMMAND...: runs it, logs it, records status and a note.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - (SECONDS - START)))
  if [ $left -lt 15 ]; then
    STEPS+=("$name|skipped|0|over the ${BUDGET}s budget")
    return 1
  fi
  [ "$limit" -gt $((left - 5)) ] && limit=$((left - 5))
  local t0=$SECONDS rc status
  echo "==== $name (limit ${limit}s): $*" | tee -a "$LOG"
  run_limited "$limit" "$@" >"$WORK/$name.out" 2>&1
  rc=$?
  cat "$WORK/$name.out" >>"$LOG"
  tail -n 12 "$WORK/$name.out"
  grep -h '^RESULT ' "$WORK/$name.out" | sed 's/^RESULT //' >>"$WORK/results"
  if [ $rc -eq 0 ]; then status=ok; elif [ $rc -eq 124 ]; then status=TIMEOUT; else status="FAIL($rc)"; fi
  local note
  note=$(grep -hoE '\[  PASSED  \] [0-9]+ tests?|[0-9]+ FAILED TESTS?|\[  SKIPPED \] [0-9]+ tests?' \
           "$WORK/$name.out" | sed -E 's/\[ +//; s/ +\]//' | paste -sd, -)
  # On the GPU machine a skipped GPU test means CUDA did not work there: not a pass.
  if [ $rc -eq 0 ] && grep -q '^\[  SKIPPED \] [0-9]' "$WORK/$name.out"; then status=SKIPPED; fi
  STEPS+=("$name|$status|$((SECONDS - t0))|${note:-$(tail -n 1 "$WORK/$name.out" | cut -c1-70)}")
  return $rc
}

# The first value recorded for a key (device_hostfn repeats bench_device's keys).
result() { grep -ohE "(^| )$1=[^ ]*" "$WORK/results" 2>/dev/null | head -n 1 | sed 's/^ //' | cut -d= -f2-; }

env_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
  (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) | tail -n 1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")'
  echo "cpus $(nproc); $(grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null); kernel $(uname -r)"
}

pick_binaries() {
  if [ -x "$PACK/bin/cuda_reduce_test" ] &&
     LD_LIBRARY_PATH=$PACK/lib "$PACK/bin/cuda_reduce_test" --gtest_list_tests >/dev/null 2>&1; then
    local want have
    want=$(cat "$PACK/SOURCES" 2>/dev/null); have=$(source_digest)
    if [ "$want" = "$have" ]; then echo "prebuilt pack, sources match ($have)"
    else echo "WARNING prebuilt pack is STALE: built from sources $want, tree is $have"; fi
    return 0
  fi
  echo "no usable pack at $PACK: building in /tmp/gyre-gpu-build"
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  cmake -S "$ROOT" -B /tmp/gyre-gpu-build "${CMAKE_FLAGS[@]}" || return 1
  # shellcheck disable=SC2086
  cmake --build /tmp/gyre-gpu-build --target $TARGETS -j "$(nproc)"
}

step env 30 bash -c "$(declare -f env_info); env_info"
if step binaries 240 env PACK="$PACK" ROOT="$ROOT" TARGETS="$TARGETS" \
     CMAKE_FLAGS="${CMAKE_FLAGS[*]}" bash -c "$(declare -f pick_binaries source_digest);
     CMAKE_FLAGS=(\$CMAKE_FLAGS); pick_binaries"; then
  if grep -q 'prebuilt pack' "$WORK/binaries.out"; then BIN=$PACK/bin; else BIN=/tmp/gyre-gpu-build/bin; fi
fi
export LD_LIBRARY_PATH=$PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

if [ -n "$BIN" ]; then
  step test_kernels 150 "$BIN/cuda_reduce_test" --gtest_color=no
  step test_allreduce 200 "$BIN/cuda_allreduce_test" --gtest_color=no
  step test_ipc 60 "$BIN/cuda_ipc_test" --gtest_color=no
  step test_ipc_allreduce 150 "$BIN/cuda_ipc_allreduce_test" --gtest_color=no
  step test_collectives 150 "$BIN/cuda_collectives_test" --gtest_color=no
fi
# gyre_torch's device path: the pack's build where python3's torch is the one it was built
# against (gyre_torch refuses another at import), else built here first.
TORCH_PY=$PACK/py
if ! PYTHONPATH=$TORCH_PY python3 -c 'import gyre_torch, sys; sys.exit(not gyre_torch._C.device_path)' >/dev/null 2>&1; then
  TORCH_PY=$(echo /tmp/gyre-torch-build/lib.*)
  step torch_build 240 env -C "$ROOT/python" GYRE_TORCH_CUDA=1 GYRE_CMAKE_BUILD_DIR=/tmp/gyre-torch-cmake \
    python3 setup.py -q build --build-base /tmp/gyre-torch-build && TORCH_PY=$(echo /tmp/gyre-torch-build/lib.*)
fi
step torch_device 180 env PYTHONPATH="$TORCH_PY" python3 "$ROOT/python/tests/cuda_device_path_test.py" --world 2,4
if [ -n "$BIN" ]; then
  step bench_reduce 60 "$BIN/cuda_reduce_bench" --bytes 256M --iters 20 --warmup 3
  step bench_device 120 env GYRE_CUDA_IPC=0 "$BIN/gyrerun" -n 4 "$BIN/cuda_allreduce_bench" \
    --bytes 64M --iters 20 --warmup 5 --slices 1M,4M,16M --slots 4
  # The device all-reduce through CUDA IPC (the default on one host); its figures under
  # keys of their own, beside the staged path's above.
  for spec in "2 64M ipc2" "4 64M ipc4" "4 1M ipc4_1M"; do
    read -r nr size key <<<"$spec"
    step "bench_$key" 60 "$BIN/gyrerun" -n "$nr" "$BIN/cuda_allreduce_bench" --bytes "$size" \
      --iters 20 --warmup 5 --slices 4M --host 1
    sed -n "s/^RESULT host_busbw=\([^ ]*\) device_busbw=\([^ ]*\).*enqueue_median_us=\([^ ]*\).*/${key}_host_busbw=\1 ${key}_busbw=\2 ${key}_enqueue_us=\3/p" \
      "$WORK/bench_$key.out" 2>/dev/null >>"$WORK/results"
  done
else
  STEPS+=("tests and gyre benchmarks|skipped|0|no binaries: see the binaries step")
fi
step torch_gloo 120 python3 "$ROOT/bench/torch_allreduce_bench.py" --backend gloo --nranks 4 --bytes 64M --iters 20
step torch_nccl 90 env NCCL_DEBUG=WARN python3 "$ROOT/bench/torch_allreduce_bench.py" --backend nccl --nranks 4 --bytes 64M --iters 20 --timeout 30
step torch_nccl2 60 env NCCL_DEBUG=WARN python3 "$ROOT/bench/torch_allreduce_bench.py" --backend nccl --nranks 2 --bytes 64M --iters 20 --timeout 30
sed -n 's/^RESULT torch_nccl_busbw=\([^ ]*\).*/torch_nccl2_busbw=\1/p; s/^RESULT torch_nccl_error=\(.*\)/torch_nccl2_error=\1/p' \
  "$WORK/torch_nccl2.out" 2>/dev/null >>"$WORK/results"
if [ -n "$BIN" ]; then
  # Cross-checks, last: gyre-bench's own host figure, and the fallback release's speed.
  # The host curve from 1M to 64M shows what slicing costs the host ring (each slice of
  # the device all-reduce is one host all-reduce of that size).
  step gyre_host 90 "$BIN/gyrerun" -n 4 "$BIN/gyre-bench" -b 1M -e 64M -f 4 -n 20 -w 5 -c 1
  awk '$1 == 1048576 || $1 == 4194304 || $1 == 16777216 || $1 == 67108864 {
         printf "gyre_bench_host_%dM_busbw=%s\n", $1 / 1048576, $8 }' \
    "$WORK/gyre_host.out" 2>/dev/null >>"$WORK/results"
  step device_hostfn 60 "$BIN/gyrerun" -n 4 "$BIN/cuda_allreduce_bench" --bytes 64M --iters 20 \
    --warmup 5 --slices 4M --memops 0 --host 0
  sed -n 's/^RESULT host_busbw=[^ ]* device_busbw=\([^ ]*\).*/hostfn_busbw=\1/p' \
    "$WORK/device_hostfn.out" 2>/dev/null >>"$WORK/results"
fi

# ---- Summary -------------------------------------------------------------------------
verdict() {  # value op target -> PASS/MISS/n/a
  [ -z "$1" ] && { echo "n/a"; return; }
  awk -v v="$1" -v t="$3" -v op="$2" 'BEGIN { ok = (op == ">=") ? v >= t : (op == "<") ? v < t : v > t; print ok ? "PASS" : "MISS" }'
}
{
  echo
  echo "==== gyre GPU check summary, $(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - START))s ===="
  echo "GPU: $(head -n 1 "$WORK/env.out" 2>/dev/null)"
  printf '%-16s %-10s %5s  %s\n' step status secs note
  for s in "${STEPS[@]}"; do
    IFS='|' read -r n st sec note <<<"$s"
    printf '%-16s %-10s %5s  %s\n' "$n" "$st" "$sec" "$note"
  done
  echo "---- targets ----"
  f32=$(result reduce_f32_pct); bf16=$(result reduce_bf16_pct); copy=$(result copy_gbps)
  printf '%-44s %-28s %s\n' "reduce float32 sum, % of D2D copy (>= 90)" "${f32:-?} % (copy ${copy:-?} GB/s)" "$(verdict "$f32" '>=' 90)"
  printf '%-44s %-28s %s\n' "reduce bfloat16 sum, % of D2D copy (>= 90)" "${bf16:-?} %" "$(verdict "$bf16" '>=' 90)"
  dev=$(result device_busbw); host=$(result host_busbw); pct=$(result device_vs_host_pct)
  printf '%-44s %-28s %s\n' "4-rank 64 MiB busbw, device % of host (>= 80)" \
    "${pct:-?} % (${dev:-?} vs ${host:-?} GB/s, slice $(result device_best_slice))" "$(verdict "$pct" '>=' 80)"
  gloo=$(result torch_gloo_busbw)
  printf '%-44s %-28s %s\n' "device busbw > torch gloo on CUDA tensors" "${dev:-?} vs ${gloo:-?} GB/s" \
    "$( [ -n "$gloo" ] && verdict "$dev" '>' "$gloo" || echo n/a)"
  med=$(result enqueue_median_us); mx=$(result enqueue_max_us)
  printf '%-44s %-28s %s\n' "enqueue host time, median (< 20 us)" "${med:-?} us (max ${mx:-?} us)" "$(verdict "$med" '<' 20)"
  nccl=$(result torch_nccl_busbw)
  nccl_err=$(sed -n 's/.*torch_nccl_error="\([^"]*\)".*/\1/p' "$WORK/results" 2>/dev/null | tail -n 1)
  printf '%-44s %s\n' "torch nccl, 4 ranks on one GPU (report)" "${nccl:+busbw $nccl GB/s}${nccl_err:+refused/failed: ${nccl_err:0:90}}"
  printf '%-44s %s\n' "device IPC all-reduce busbw (report)" "2 ranks 64M: $(result ipc2_busbw) GB/s (host $(result ipc2_host_busbw)); 4 ranks 64M: $(result ipc4_busbw) (host $(result ipc4_host_busbw), staged ${dev:-?}); 4 ranks 1M: $(result ipc4_1M_busbw); enqueue $(result ipc4_enqueue_us) us"
  nccl2=$(result torch_nccl2_busbw); nccl2_err=$(result torch_nccl2_error)
  printf '%-44s %s\n' "torch nccl, 2 ranks on one GPU, beside ipc2" "${nccl2:+busbw $nccl2 GB/s vs gyre IPC $(result ipc2_busbw)}${nccl2_err:+refused/failed: ${nccl2_err:0:90}}"
  printf '%-44s %s\n' "other figures" "gyre-bench host busbw 1M/4M/16M/64M: $(result gyre_bench_host_1M_busbw)/$(result gyre_bench_host_4M_busbw)/$(result gyre_bench_host_16M_busbw)/$(result gyre_bench_host_64M_busbw); device slices 1M/4M/16M: $(result device_slice_1M_busbw)/$(result device_slice_4M_busbw)/$(result device_slice_16M_busbw), host-function release $(result hostfn_busbw) GB/s, memops $(result memops)"
} | tee "$SUMMARY" | tee -a "$LOG"
rm -rf "$WORK"
grep -qE '\| *(FAIL|TIMEOUT|SKIPPED|skipped)' <(printf '%s\n' "${STEPS[@]}") && exit 1
grep -q 'MISS' "$SUMMARY" && exit 1
exit 0
