#!/usr/bin/env python3
"""gyre_torch records the torch it was built against and, under another torch's
major.minor, refuses to load with an ImportError naming both versions and the rebuild
(without the check, _C built against another torch's C++ ABI aborts the process at
import: 'terminate called after throwing std::system_error'). Runs against the build on
PYTHONPATH (python/tests/run_suite.sh).

Also: gyre_torch.__version__ is gyre's version, GYRE_PROJECT_VERSION (CMake's
PROJECT_VERSION, which ctest sets: python/CMakeLists.txt), or, run by hand without it, the
version of the top-level CMakeLists.txt's project() line."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch

import gyre_torch
from gyre_torch import _torch_built


def import_copy(tmp, recorded):
    """Imports a copy of the built package whose record says `recorded`."""
    dst = os.path.join(tmp, recorded.replace("+", "_"), "gyre_torch")
    shutil.copytree(os.path.dirname(gyre_torch.__file__), dst,
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(os.path.join(dst, "_torch_built.py"), "w") as f:
        f.write(f"TORCH_VERSION = {recorded!r}\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(dst))
    return subprocess.run([sys.executable, "-c", "import gyre_torch; print('loaded')"],
                          env=env, capture_output=True, text=True, timeout=120)


def expected_gyre_version():
    if os.environ.get("GYRE_PROJECT_VERSION"):
        return os.environ["GYRE_PROJECT_VERSION"]
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "CMakeLists.txt")
    with open(top) as f:
        return re.search(r"project\(\s*gyre\s+VERSION\s+([0-9.]+)", f.read()).group(1)


def main():
    want = expected_gyre_version()
    assert gyre_torch.__version__ == want, \
        f"gyre_torch.__version__ is {gyre_torch.__version__!r}, gyre's version is {want!r}"
    assert _torch_built.TORCH_VERSION == torch.__version__, \
        f"the build records torch {_torch_built.TORCH_VERSION}, this is {torch.__version__}"
    major, minor = torch.__version__.split(".")[:2]
    with tempfile.TemporaryDirectory() as tmp:
        other = f"{int(major) + 1}.{minor}.0"
        r = import_copy(tmp, other)
        assert r.returncode == 1 and "loaded" not in r.stdout, (r.returncode, r.stdout, r.stderr)
        last = r.stderr.strip().splitlines()[-1]
        for want in ("ImportError", f"built against torch {other}",
                     f"imports torch {torch.__version__}", "--no-build-isolation"):
            assert want in last, f"{want!r} not in {last!r}"
        # Another patch release or local tag of the same major.minor loads.
        r = import_copy(tmp, f"{major}.{minor}.99+other")
        assert r.returncode == 0 and r.stdout.strip() == "loaded", (r.returncode, r.stderr)
    print(f"torch_version_check_test: ok (torch {torch.__version__}, "
          f"gyre_torch {gyre_torch.__version__})")


if __name__ == "__main__":
    main()
