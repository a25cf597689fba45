#!/usr/bin/env bash
# ctest's torch_pip_install_<line>: what a user does, offline.
#   pip_install_test.sh debian|pypi OUT [GYRE_CMAKE_BUILD_DIR]
# 1. Copies the repository (its git files) to OUT/src, so that pip's in-tree build leaves
#    the source tree alone, and runs `pip install --no-build-isolation --no-index
#    OUT/src/python` (no network: the build uses the torch, setuptools and wheel that are
#    installed; --no-build-isolation is the README's command, so it builds against *that*
#    torch):
#    debian: into a venv made with --system-site-packages over Debian's python3-torch;
#    pypi:   with the cached torch-2 venv's pip, --target OUT/site (a throwaway venv over
#            a venv would not see the first venv's torch; --target avoids copying 5 GB).
# 2. Runs a script that calls init_process_group("gyre") at world size 2 (mp.spawn) and
#    checks an all_reduce, a broadcast and an all_gather exactly, from a folder outside the
#    source tree: on torch 2 the script does NOT import gyre_torch (torch loads it through
#    the package's torch.distributed.backends entry point, and the script checks that it
#    came from the installed copy); on torch 1.13 it imports gyre_torch once (documented).
# 3. The wheel (docs/install.md): `pip wheel --no-build-isolation --no-deps` with the same
#    pip into OUT/wheel, installed into a NEW venv that sees the same torch, and step 2's
#    script run again from it (gyre_torch must load from that venv):
#    debian: a venv made with --system-site-packages over Debian's python3-torch;
#    pypi:   a venv made by the torch-2 venv's python (so on its base interpreter), whose
#            site-packages has a .pth naming the torch-2 venv's: the same torch, without
#            copying it.
# Exit 77 (ctest: skipped) when that torch line is not installed.
set -euo pipefail
line=$1
mkdir -p "$2" && out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
case $line in
  debian) py=/usr/bin/python3 ;;
  pypi)   py=${GYRE_TORCH2_VENV:-$HOME/.cache/gyre/venv-torch2}/bin/python ;;
  *) echo "usage: $0 debian|pypi OUT" >&2; exit 2 ;;
esac
if ! [ -x "$py" ] || ! "$py" -c "import torch" 2>/dev/null; then
  echo "SKIPPED: torch_pip_install_$line: no torch for $py (tools/setup.sh, tools/torch_venv.sh)"
  exit 77
fi
if [ "$line" = debian ] && ! "$py" -c "import venv, ensurepip" 2>/dev/null; then
  echo "SKIPPED: torch_pip_install_debian needs python3-venv (tools/setup.sh installs it)"
  exit 77
fi
rm -rf "$out/src" "$out/site" "$out/venv" "$out/run" "$out/wheel" "$out/wheel-venv"
mkdir -p "$out/src" "$out/run"
if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$repo" && git ls-files -co --exclude-standard -z | xargs -0 tar -cf - --) |
    tar -C "$out/src" -xf -
else
  tar -C "$repo" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$out/src" -xf -
fi
[ -d /usr/lib/ccache ] && export PATH=/usr/lib/ccache:$PATH
# gyre's C library: setup.py builds it with CMake into GYRE_CMAKE_BUILD_DIR; the ctest
# passes torch_backend_<line>'s (the same sources; setup.py only configures when the
# folder has no CMake cache), so the test rebuilds only the extension.
GYRE_CMAKE_BUILD_DIR=${3:-$out/cmake}
mkdir -p "$GYRE_CMAKE_BUILD_DIR" && GYRE_CMAKE_BUILD_DIR=$(cd "$GYRE_CMAKE_BUILD_DIR" && pwd)
export GYRE_CMAKE_BUILD_DIR
pipargs=(install --no-build-isolation --no-index --no-deps -q "$out/src/python")
if [ "$line" = debian ]; then
  "$py" -m venv --system-site-packages "$out/venv"
  target_py=$out/venv/bin/python
  build_py=$target_py
  "$target_py" -m pip "${pipargs[@]}" >"$out/pip.log" 2>&1 || {
    tail -40 "$out/pip.log"; echo "FAILED: pip install into a venv over Debian's torch"; exit 1; }
  unset PYTHONPATH
else
  "$py" -m pip "${pipargs[@]}" --target "$out/site" >"$out/pip.log" 2>&1 || {
    tail -40 "$out/pip.log"; echo "FAILED: pip install --target with the torch-2 venv's pip"; exit 1; }
  target_py=$py
  build_py=$py
  export PYTHONPATH=$out/site
fi
cd "$out/run"
"$target_py" "$here/pip_install_check.py" --expect-under "$out"

echo "== pip wheel, installed into a new venv"
unset PYTHONPATH
"$build_py" -m pip wheel --no-build-isolation --no-index --no-deps -q -w "$out/wheel" \
    "$out/src/python" >"$out/wheel.log" 2>&1 || {
  tail -40 "$out/wheel.log"; echo "FAILED: pip wheel --no-build-isolation ($line)"; exit 1; }
wheels=("$out"/wheel/gyre_torch-*.whl)
[ ${#wheels[@]} = 1 ] && [ -f "${wheels[0]}" ] || { echo "FAILED: pip wheel made ${wheels[*]}"; exit 1; }
if [ "$line" = debian ]; then
  "$py" -m venv --system-site-packages "$out/wheel-venv"
else
  "$py" -m venv "$out/wheel-venv"
  "$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
    >"$("$out/wheel-venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/torch-venv.pth"
fi
wheel_py=$out/wheel-venv/bin/python
"$wheel_py" -m pip install --no-index --no-deps -q "${wheels[0]}" >"$out/wheel-install.log" 2>&1 || {
  tail -40 "$out/wheel-install.log"; echo "FAILED: pip install $(basename "${wheels[0]}") into a new venv"; exit 1; }
echo "$(basename "${wheels[0]}") into $out/wheel-venv (torch $("$wheel_py" -c 'import torch; print(torch.__version__)'))"
"$wheel_py" "$here/pip_install_check.py" --expect-under "$out/wheel-venv"
