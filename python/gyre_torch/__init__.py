"""gyre as a torch.distributed backend.

    torch.distributed.init_process_group(backend="gyre", init_method="env://")

torch >= 2 finds the backend through the ``torch.distributed.backends`` entry point
this package installs (no import needed); torch 1.13 (Debian 12's python3-torch) needs
``import gyre_torch`` once before ``init_process_group``. Importing registers the backend
(idempotent); ``register()`` does it explicitly.

The backend bootstraps through the store torch gives it (the PrefixStore over torch's
TCPStore or FileStore): gyre opens no port of its own on MASTER_PORT. The group's
``timeout`` becomes gyre's operation timeout. GYRE_* variables (docs/configuration.md)
are read when a group is created. ``__version__`` is gyre's version (the C library's).
"""
import datetime
import os
import re

import torch
import torch.distributed as dist

try:
    from ._version import __version__  # written by setup.py at build time
except ImportError:  # a source tree on the path, not a build
    __version__ = "unknown"


def _check_torch_version():
    """ImportError, naming both versions, where this build's torch (setup.py records it)
    is another major.minor than the one imported: _C against another torch's C++ ABI
    fails at load, or aborts the process outright."""
    try:
        from ._torch_built import TORCH_VERSION as built
    except ImportError:  # a source tree on the path, not a build: nothing recorded
        return

    def major_minor(version):
        m = re.match(r"(\d+)\.(\d+)", version)
        return m.groups() if m else version
    if major_minor(built) != major_minor(torch.__version__):
        raise ImportError(
            f"gyre_torch was built against torch {built}, but this Python imports torch "
            f"{torch.__version__} ({torch.__file__}): rebuild gyre_torch against this torch, "
            "e.g. pip install --no-build-isolation --force-reinstall ./python")


_check_torch_version()

from . import _C  # noqa: E402

__all__ = ["register", "failed_rank", "BACKEND_NAME", "__version__"]

BACKEND_NAME = "gyre"


def _route_host(store):
    """The host whose route picks the interface gyre listens on: MASTER_ADDR when set
    (torchrun, torch.distributed.launch, env://), else the host of torch's TCPStore
    (init_method="tcp://..."), else "" (gyre's default, MASTER_ADDR or 127.0.0.1)."""
    host = os.environ.get("MASTER_ADDR", "")
    if host:
        return host
    inner = store
    for _ in range(8):  # PrefixStores nest (one per device and group on torch 2)
        nxt = getattr(inner, "underlying_store", None)
        if nxt is None:
            break
        inner = nxt
    return str(getattr(inner, "host", "") or "")


def _create(store, rank, size, timeout):
    if isinstance(timeout, datetime.timedelta):
        timeout_ms = int(timeout.total_seconds() * 1000)
    else:
        timeout_ms = int(timeout)
    return _C.create_backend(store, rank, size, max(timeout_ms, 0), _route_host(store))


def failed_rank(group=None):
    """The rank (of ``group``, default the world) that the group's first failure named as
    its cause: a peer that died, closed, stalled or aborted; -1 when there was none, or
    it was this rank's own. Every survivor of one failure gets the same rank, so it is
    what they pass to ``torch.distributed.shrink_group([rank])`` (torch >= 2.15)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if _C.torch_version_major >= 2:
        backend = pg._get_backend(torch.device("cpu"))
    else:
        backend = pg
    return _C.failed_rank(backend)


def register():
    """Registers backend "gyre" with torch.distributed (once per process)."""
    backend = dist.Backend
    if "GYRE" in getattr(backend, "_plugins", {}):
        return
    if _C.torch_version_major >= 2:
        # CUDA tensors run on gyre's device path where the extension was built with it
        # (_C.device_path), else they are staged through host memory (docs/pytorch.md,
        # "CUDA tensors").
        backend.register_backend(BACKEND_NAME, _create, devices=["cpu", "cuda"])
    else:
        backend.register_backend(BACKEND_NAME, _create)


register()
