#!/usr/bin/env bash
# Creates (once) the PyPI torch venv that the torch_backend_pypi test builds gyre_torch
# against: ${GYRE_TORCH2_VENV:-~/.cache/gyre/venv-torch2}, ~3 GB of wheels, kept between
# runs (a second run only checks that it imports). GYRE_NO_TORCH2=1 skips it (the test
# then reports itself skipped). Also expecttest (pure Python, which torch's own test
# utilities import: the torch_dist_suite_* tests) for Debian's python3, into
# ~/.cache/gyre/py-debian (dist_suite.sh puts it on PYTHONPATH; the system stays as apt
# left it), and into the venv. And torchft ${GYRE_TORCHFT_VERSION:-0.2.0} (PyPI, pinned)
# into the venv, for python/tests/torchft_test.py (gyre_torch.torchft.ProcessGroupGyre);
# GYRE_NO_TORCHFT=1 leaves it out (that test then reports itself skipped).
set -euo pipefail
torchft_version=${GYRE_TORCHFT_VERSION:-0.2.0}
# The torch the suite is tested on (docs/install.md, "Tested torch versions").
torch_version=${GYRE_TORCH2_VERSION:-2.15.0}
venv=${GYRE_TORCH2_VENV:-$HOME/.cache/gyre/venv-torch2}
debian_deps=$HOME/.cache/gyre/py-debian
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import torch" 2>/dev/null &&
   ! PYTHONPATH=$debian_deps /usr/bin/python3 -c "import expecttest" 2>/dev/null; then
  echo "torch_venv: pip install --target $debian_deps expecttest" >&2
  /usr/bin/python3 -m pip install -q --target "$debian_deps" expecttest >&2
fi
[ "${GYRE_NO_TORCH2:-0}" = 1 ] && exit 0
install_torchft() {
  [ "${GYRE_NO_TORCHFT:-0}" = 1 ] && return 0
  if "$venv/bin/python" -c "import importlib.metadata as m, sys
sys.exit(m.version('torchft') != '$torchft_version')" 2>/dev/null; then
    return 0
  fi
  echo "torch_venv: pip install torchft==$torchft_version into $venv" >&2
  # A constraint keeps the venv's torch as it is.
  "$venv/bin/python" -m pip install -q "torchft==$torchft_version" \
      -c <(echo "torch==$("$venv/bin/python" -c "import torch; print(torch.__version__.split('+')[0])")") >&2 ||
    echo "torch_venv: installing torchft failed (offline?): torchft_test will skip" >&2
}
# The training frameworks that the torch_frameworks_pypi test runs on gyre
# (docs/frameworks.md), pinned to versions tested with the venv's torch, which a
# constraint keeps as it is. Skipped when already at these versions; a failed install
# (offline) only warns: the test then skips, saying why.
frameworks_pins="lightning==2.6.6 accelerate==1.16.0"
install_frameworks() {
  local py=$venv/bin/python torch_version
  # shellcheck disable=SC2086
  "$py" - $frameworks_pins <<'PY' 2>/dev/null && return 0
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))
PY
  torch_version=$("$py" -c "import torch; print(torch.__version__.split('+')[0])")
  echo "torch_venv: pip install $frameworks_pins (torch stays $torch_version)" >&2
  # shellcheck disable=SC2086
  "$py" -m pip install -q --retries 1 --timeout 30 $frameworks_pins \
      -c <(echo "torch==$torch_version") >&2 ||
    echo "torch_venv: could not install $frameworks_pins (torch_frameworks_pypi skips what is missing)" >&2
}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import torch, setuptools" 2>/dev/null; then
  "$venv/bin/python" -c "import expecttest" 2>/dev/null || "$venv/bin/pip" install -q expecttest >&2
  install_torchft
  install_frameworks
  exit 0
fi
echo "torch_venv: creating $venv (pip install torch: ~3 GB, a few minutes)" >&2
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q "torch==$torch_version" numpy setuptools wheel expecttest >&2
install_torchft
install_frameworks
