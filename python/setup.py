"""Builds gyre_torch: gyre's static C library (CMake, from the repository around this
folder) and the torch extension gyre_torch._C against the torch this Python imports.

    pip install --no-build-isolation ./python     # --no-build-isolation: build against
                                                  # *your* torch, not a fresh download

The package's name, licence, dependencies and entry point are in pyproject.toml; its
version is gyre's, read from project(gyre VERSION ...) in the top-level CMakeLists.txt.

Environment:
  GYRE_CMAKE_BUILD_DIR  where CMake builds gyre (default python/build/gyre-cmake)
  GYRE_CMAKE_ARGS       extra CMake arguments (e.g. -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  GYRE_TORCH_CUDA       auto (default), 1 or 0: gyre's device path for CUDA tensors
                        (docs/pytorch.md, "CUDA tensors"). auto: on when this torch is a
                        CUDA build (torch.version.cuda) and a CUDA toolkit is found (nvcc
                        on PATH, or CUDA_HOME); 1: the same, an error when either is
                        missing; 0: off, CUDA tensors are staged through host memory.
                        CUDAARCHS picks the kernels' architectures (default 90).
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("gyre_torch builds against an installed torch: install torch first "
             "(apt-get install python3-torch libtorch-dev, or pip install torch), then "
             "pip install --no-build-isolation ./python")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TORCH_MAJOR = int(torch.__version__.split(".")[0])


def gyre_version():
    """X.Y.Z of project(gyre VERSION X.Y.Z ...) in the top-level CMakeLists.txt: the one
    definition, which the C library, its headers and programs use too."""
    path = os.path.join(REPO, "CMakeLists.txt")
    with open(path) as f:
        m = re.search(r"^\s*project\(\s*gyre\s+VERSION\s+(\d+\.\d+\.\d+)\b", f.read(), re.M)
    if not m:
        sys.exit(f"gyre_torch: no project(gyre VERSION X.Y.Z ...) in {path}")
    return m.group(1)


VERSION = gyre_version()


def cmake_build_dir():
    return os.environ.get("GYRE_CMAKE_BUILD_DIR", os.path.join(HERE, "build", "gyre-cmake"))


def cuda_toolkit():
    """The CUDA toolkit's nvcc: on PATH, else under CUDA_HOME (or CUDA_PATH); None if none."""
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.realpath(nvcc)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
            return os.path.join(home, "bin", "nvcc")
    return None


def want_cuda():
    """(nvcc or None, why): whether to build the device path, per GYRE_TORCH_CUDA."""
    mode = os.environ.get("GYRE_TORCH_CUDA", "auto").strip().lower()
    if mode not in ("auto", "0", "1"):
        sys.exit(f"gyre_torch: GYRE_TORCH_CUDA={mode!r}: use auto, 1 or 0")
    if mode == "0":
        return None, "GYRE_TORCH_CUDA=0"
    missing = None
    if TORCH_MAJOR < 2:
        missing = f"torch {torch.__version__} (the device path needs torch >= 2)"
    elif not getattr(torch.version, "cuda", None):
        missing = f"torch {torch.__version__} is not a CUDA build (torch.version.cuda is None)"
    nvcc = cuda_toolkit()
    if missing is None and nvcc is None:
        missing = "no CUDA toolkit (nvcc not on PATH, no CUDA_HOME)"
    if missing is not None:
        if mode == "1":
            sys.exit(f"gyre_torch: GYRE_TORCH_CUDA=1 but {missing}")
        return None, missing
    return nvcc, f"torch CUDA {torch.version.cuda}, toolkit {nvcc}"


def build_gyre(nvcc):
    """Configures and builds gyre's C API (static, position-independent) once; with nvcc,
    with the device path on the real CUDA runtime (never the fake one)."""
    build = cmake_build_dir()
    args = ["cmake", "-S", REPO, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
            "-DGYRE_BUILD_TESTS=OFF", "-DGYRE_BUILD_BENCH=OFF", "-DGYRE_BUILD_FUZZERS=OFF",
            "-DGYRE_FAKE_CUDA=OFF", "-DCMAKE_POSITION_INDEPENDENT_CODE=ON"]
    if nvcc:
        args += ["-DGYRE_WITH_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={nvcc}"]
    else:
        args += ["-DGYRE_WITH_CUDA=OFF"]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    if shutil.which("ccache") and "LAUNCHER" not in os.environ.get("GYRE_CMAKE_ARGS", ""):
        args += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    args += shlex.split(os.environ.get("GYRE_CMAKE_ARGS", ""))
    cache = os.path.join(build, "CMakeCache.txt")
    # Configured afresh when the device path's choice changed since the last build there.
    if (not os.path.exists(cache) or
            cache_value(build, "GYRE_WITH_CUDA").upper() != ("ON" if nvcc else "OFF")):
        subprocess.check_call(args)
    jobs = str(os.cpu_count() or 2)
    subprocess.check_call(["cmake", "--build", build, "--target", "gyre_c", "-j", jobs])
    libs = sorted(glob.glob(os.path.join(build, "**", "libgyre_*.a"), recursive=True))
    if not any(lib.endswith("libgyre_c.a") for lib in libs):
        sys.exit(f"gyre_torch: no libgyre_c.a under {build} after the CMake build")
    return build, libs


def cache_value(build, name):
    with open(os.path.join(build, "CMakeCache.txt")) as cache:
        for line in cache:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    return ""


def cudart_static(build, nvcc):
    """The toolkit's libcudart_static.a: CMake's FindCUDAToolkit's, else beside nvcc."""
    found = cache_value(build, "CUDA_cudart_static_LIBRARY")
    if found and os.path.exists(found):
        return found
    root = os.path.dirname(os.path.dirname(nvcc))
    for sub in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib"),
                os.path.join("targets", "sbsa-linux", "lib")):
        path = os.path.join(root, sub, "libcudart_static.a")
        if os.path.exists(path):
            return path
    return None


def extension():
    nvcc, why = want_cuda()
    build, libs = build_gyre(nvcc)
    device_path = False
    if nvcc:
        cudart = cudart_static(build, nvcc)
        # Without the cuda layer, capi/gyre_cuda.h's functions are cuda_none.cc's errors.
        if not any(lib.endswith("libgyre_cuda.a") for lib in libs):
            why = "gyre's CMake build found no CUDA toolkit, so it has no device path"
        elif cudart is None:
            why = f"no libcudart_static.a in the toolkit of {nvcc}"
        else:
            device_path = True
        if not device_path and os.environ.get("GYRE_TORCH_CUDA", "auto").strip() == "1":
            sys.exit(f"gyre_torch: GYRE_TORCH_CUDA=1 but {why}")
    print(f"gyre_torch: device path for CUDA tensors {'ON' if device_path else 'OFF'} ({why})")
    # gyre's layers reference each other both ways in link order: one group resolves it.
    # --exclude-libs keeps gyre's C++ symbols out of the extension's dynamic table, so they
    # never meet torch's; --as-needed drops libraries nothing uses.
    link = ["-Wl,--as-needed", "-Wl,--exclude-libs,ALL", "-Wl,--start-group", *libs,
            "-Wl,--end-group", "-lfmt", "-lpthread"]
    verbs = cache_value(build, "IBVERBS_LIBRARY")
    if verbs and not verbs.endswith("NOTFOUND"):
        link.append(verbs)
    # libcrypto (authentication, GYRE_ENCRYPT): named here, since nothing else guarantees
    # it. Debian's libtorch happens to load it; PyPI's torch does not, and the extension
    # then fails at import with an undefined EVP_* symbol.
    crypto = cache_value(build, "OPENSSL_CRYPTO_LIBRARY")
    link.append(crypto if crypto and not crypto.endswith("NOTFOUND") else "-lcrypto")
    macros = []
    if device_path:
        # The toolkit's static runtime, not a second libcudart.so beside torch's; gyre looks
        # the driver up at run time, so nothing links libcuda.so.
        link += [cudart, "-ldl", "-lrt", "-lpthread"]
        macros.append(("GYRE_TORCH_WITH_CUDA", "1"))
    std = "-std=c++20" if TORCH_MAJOR >= 2 else "-std=c++17"
    sources = sorted(glob.glob(os.path.join("gyre_torch", "csrc", "*.cpp")))
    return CppExtension(
        name="gyre_torch._C",
        sources=sources,
        # capi/gyre.h, the only gyre header the extension sees, and the base/version.h
        # CMake generates for it.
        include_dirs=[REPO, os.path.join(build, "generated")],
        define_macros=macros,
        extra_compile_args=[std, "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        extra_link_args=link,
    )


class BuildPyWithTorchVersion(build_py):
    """Writes gyre_torch/_torch_built.py beside the package: the torch the extension is
    compiled against, which gyre_torch/__init__.py checks before it loads _C (an
    extension built against another torch's C++ ABI aborts the process at import); and
    gyre_torch/_version.py: gyre's version, gyre_torch.__version__."""

    def run(self):
        super().run()
        path = os.path.join(self.build_lib, "gyre_torch", "_torch_built.py")
        with open(path, "w") as f:
            f.write(f"# written by setup.py: the torch gyre_torch._C was built against\n"
                    f"TORCH_VERSION = {torch.__version__!r}\n")
        with open(os.path.join(self.build_lib, "gyre_torch", "_version.py"), "w") as f:
            f.write(f"# written by setup.py from the top-level CMakeLists.txt's project()\n"
                    f"__version__ = {VERSION!r}\n")


# Only what pyproject.toml's [project] leaves to setup.py (its dynamic "version") and what
# has no [project] field: a field given in both is an error or ignored, by setuptools version.
setup(
    version=VERSION,
    packages=["gyre_torch"],
    # The modules and _C only, not the extension's C++ sources (a [project] table turns
    # this on by default; here, not in [tool.setuptools], which setuptools 66 calls beta).
    include_package_data=False,
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=bool(shutil.which("ninja"))),
              "build_py": BuildPyWithTorchVersion},
)
