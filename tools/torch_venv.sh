#!/usr/bin/env bash
# Creates (once) the PyPI torch venv that the torch_backend_pypi test builds gyre_torch
# against: ${GYRE_TORCH2_VENV:-~/.cache/gyre/venv-torch2}, ~3 GB of wheels, kept between
# runs (a second run only checks that it imports). GYRE_NO_TORCH2=1 skips it (the test
# then reports itself skipped).
set -euo pipefail
venv=${GYRE_TORCH2_VENV:-$HOME/.cache/gyre/venv-torch2}
[ "${GYRE_NO_TORCH2:-0}" = 1 ] && exit 0
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import torch, setuptools" 2>/dev/null; then
  exit 0
fi
echo "torch_venv: creating $venv (pip install torch: ~3 GB, a few minutes)" >&2
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q torch numpy setuptools wheel >&2
