#!/usr/bin/env bash
# torch's own distributed tests on backend gyre, the expected-pass subset (ctest
# torch_dist_suite_<line>, through run_suite.sh, which builds gyre_torch and sets
# PYTHONPATH):   dist_suite.sh PYTHON OUT
# Runs python/tests/torch_dist_suite/<torch major>_world<N>.txt at world sizes 2 and 3;
# fails when any listed test does not pass. Needs expecttest (torch's test utilities
# import it): tools/setup.sh installs it for Debian's python3, tools/torch_venv.sh into
# the torch-2 venv.
set -euo pipefail
py=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
major=$("$py" -c "import torch; print(torch.__version__.split('.')[0])")
# Debian's python3 finds expecttest where tools/torch_venv.sh put it.
[ -d "$HOME/.cache/gyre/py-debian" ] && export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$HOME/.cache/gyre/py-debian
list_of() { echo "$here/torch_dist_suite/torch${major}_world$1.txt"; }
if ! "$py" -c "import expecttest" 2>/dev/null; then
  echo "SKIPPED: torch's test utilities need expecttest for $py (tools/setup.sh, tools/torch_venv.sh)"
  exit 77
fi
mkdir -p "$out"
rc=0
for world in 2 3; do
  list=$(list_of "$world")
  "$py" "$here/torch_dist_suite.py" --backend gyre --world "$world" --tests "$list" \
    --expect "$list" --json "$out/gyre_world$world.json" 2>"$out/gyre_world$world.log" || {
      rc=1; tail -60 "$out/gyre_world$world.log"; }
done
exit $rc
