"""ProcessGroupGyre: a torchft process group over gyre (torch 2, torchft 0.2 from PyPI).

    from torchft import Manager
    from gyre_torch.torchft import ProcessGroupGyre

    pg = ProcessGroupGyre(timeout=timedelta(seconds=10))
    manager = Manager(pg=pg, min_replica_size=1, load_state_dict=..., state_dict=...)

torchft's ``Manager`` uses it as it uses torchft's ``ProcessGroupGloo``: it calls
``configure(store_addr, replica_id, rank, world_size, ...)`` whenever the quorum
changes, every collective through it, ``errored()`` before each commit, and ``abort()``.

- ``configure`` meets the quorum's other ranks through the new store (one key each: what
  communicator each holds now) and then, the same choice on every rank:
  * keeps the communicator when the quorum has the same members as before, in the same
    order, and none of them saw an error on it;
  * shrinks it (gyre's shrink, SHRINK_ABORT) when the new members are a subset of one
    communicator's members in the same order and that communicator's store is the new
    quorum's store, so its server is alive (torchft serves a quorum's store from one of
    the replica groups at the highest step, the first of them in replica-id order for
    group rank 0: this holds when the group whose store the old quorum used survived and
    is still at the highest step): the survivors keep their connections and the dead
    are left out without their help;
  * else creates a new communicator through the new store (a restarted or new replica
    group joins this way: see "Why no grow" below). Creation is tens of milliseconds.
  ``last_configure`` says which it was and how long it took.
- ``abort()`` returns at once: gyre's abort ends every pending operation here with an
  error, without waiting for anyone, and tells the other ranks (a peer's operation that
  waits on this rank fails naming the abort; their later ones fail at once).
- ``errored()``: the error of an abort or of a failed all-reduce, or the last failure
  gyre recorded on the communicator (a peer that died, a stall past the timeout), else
  None.
- A failed all-reduce does not raise from ``wait()`` (it returns False; the future
  completes with the unreduced tensors): the failure goes to ``errored()``, so the
  Manager skips the step and reconfigures. torchft 0.2.0's DDP hook asserts when a
  Work's ``wait()`` raises, which stops the survivor of a peer killed mid-all-reduce (as
  it does with torchft's own ProcessGroupGloo). Other operations raise as usual.

Why no grow: gyre's grow lets newcomers join a communicator through *its* store, but a
restarted replica group is given the new quorum's store only, numbers newcomers in their
order of arrival where torchft numbers replicas by replica id (a restarted group need not
come last), and gyre's C API, which gyre_torch is built on, lets a newcomer join through a
gyreUniqueId only, not through a caller's store. So a group that joins gets a new
communicator, made as fast as any.

``timeout`` (default 60 s) bounds every operation (gyre's stall timeout) and the store.
"""
from __future__ import annotations

import datetime
import json
import logging
import time
from typing import List, Optional

import torch
import torch.distributed as dist

try:
    from torchft.process_group import ProcessGroupWrapper, create_store_client
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "gyre_torch.torchft needs torchft (pip install torchft==0.2.0, on torch >= 2.7)"
    ) from e

from . import _C, _create

__all__ = ["ProcessGroupGyre"]

logger = logging.getLogger(__name__)

_KEY = "gyre_torchft/member/"


def _host_port(store_addr: str) -> str:
    """The host:port of a torchft store address (host:port/prefix)."""
    return store_addr.partition("/")[0]


def plan(records: List[dict], store_host_port: str) -> tuple:
    """The configure choice every rank of a new quorum makes from the same records (one a
    rank, in rank order: the communicator it holds, its rank and size there, that
    communicator's store, whether it saw an error): ("keep", []), ("shrink", excluded
    ranks of the old communicator) or ("create", [])."""
    comms = {r.get("comm") for r in records}
    if len(comms) != 1 or None in comms:
        return ("create", [])
    old_ranks = [r["rank"] for r in records]
    old_size = records[0]["size"]
    if any(r["size"] != old_size or r["store"] != store_host_port for r in records):
        return ("create", [])
    if any(b <= a for a, b in zip(old_ranks, old_ranks[1:])) or old_ranks[-1] >= old_size:
        return ("create", [])  # not the old order
    if len(records) == old_size:
        if any(r["errored"] for r in records):
            return ("create", [])
        return ("keep", [])
    return ("shrink", sorted(set(range(old_size)) - set(old_ranks)))


class _ReportedWork(dist.Work):
    """An all-reduce's Work whose failure is reported through the group's errored()
    instead of raised: wait() returns False, the future completes with the (unreduced)
    tensors. torchft's Manager then skips the step (should_commit checks errored()), and
    torchft's DDP hook, which asserts when a Work's wait() raises (torchft 0.2.0), goes
    on."""

    def __init__(self, group: "ProcessGroupGyre", work, tensors) -> None:
        super().__init__()
        self._group, self._work, self._tensors = group, work, tensors

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        try:
            self._work.wait()
            return True
        except Exception as e:  # noqa: BLE001 - reported, not raised (see the class)
            self._group._report(e)
            return False

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def get_future(self):
        tensors, group = self._tensors, self._group

        def reported(fut):
            try:
                return fut.value()
            except Exception as e:  # noqa: BLE001 - as wait()
                group._report(e)
                return tensors

        return self._work.get_future().then(reported)


class ProcessGroupGyre(ProcessGroupWrapper):
    """A reconfigurable gyre process group for torchft (see the module's docstring).

    Args:
        timeout: bounds every operation and the store (default 60 s).
        reuse: False makes every configure create a new communicator (for comparison).
    """

    def __init__(self, timeout: datetime.timedelta = datetime.timedelta(seconds=60),
                 reuse: bool = True) -> None:
        if _C.torch_version_major < 2:
            raise RuntimeError("gyre_torch.torchft.ProcessGroupGyre needs torch >= 2 "
                               f"(this is torch {torch.__version__})")
        super().__init__(timeout=timeout)
        self._reuse = reuse
        self._errored: Optional[Exception] = None
        self._backend = None
        self._comm_id: Optional[str] = None  # the store_addr of the configure that made it
        self._comm_store: Optional[str] = None  # host:port its store is served on
        # (how: "create" | "shrink" | "keep", seconds, quorum_id) of the last configure.
        self.last_configure: Optional[tuple] = None

    def getBackendName(self) -> str:
        return "torchft-gyre"

    # ---- configure ------------------------------------------------------------------

    def configure(self, store_addr: str, replica_id: str, rank: int, world_size: int,
                  quorum_id: Optional[int] = None, group_rank: Optional[int] = None,
                  group_world_size: Optional[int] = None,
                  global_ranks: Optional[List[int]] = None) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"ProcessGroupGyre.configure: rank {rank} is outside "
                             f"[0, {world_size})")
        start = time.monotonic()
        self._replica_id, self._quorum_id, self._rank = replica_id, quorum_id, rank
        self._group_rank, self._group_world_size = group_rank, group_world_size
        self._global_ranks = global_ranks
        store = create_store_client(store_addr, timeout=self._timeout)
        how, excluded = "create", []
        if self._reuse:
            how, excluded = self._agree(store, store_addr, rank, world_size)
        if how == "keep":
            self._errored = None
        elif how == "shrink":
            try:
                backend = _C.shrink(self._backend, excluded)
            except Exception:
                self.abort()  # the next configure creates, whatever the others hold
                raise
            old = self._pg
            self._install(store, backend, store_addr, self._comm_store)
            del old  # revoked by the shrink
        else:
            self.abort(errored=False)
            backend = _create(store, rank, world_size, self._timeout)
            self._install(store, backend, store_addr, _host_port(store_addr))
        if self.size() != world_size or self._backend.rank() != rank:
            raise RuntimeError(f"ProcessGroupGyre.configure ({how}): rank "
                               f"{self._backend.rank()} of {self.size()}, expected {rank} "
                               f"of {world_size}")
        self.last_configure = (how, time.monotonic() - start, quorum_id)
        logger.info("ProcessGroupGyre: quorum %s, rank %d of %d: %s%s in %.1f ms",
                    quorum_id, rank, world_size, how,
                    f" without {excluded}" if excluded else "",
                    1000 * self.last_configure[1])

    def _agree(self, store, store_addr: str, rank: int, world_size: int) -> tuple:
        """Publishes what this rank holds under the new store, reads the others' and
        returns plan() over them (the same on every rank)."""
        mine = {"comm": None}
        if self._backend is not None and _C.supports_shrinking:
            mine = {"comm": self._comm_id, "rank": self._backend.rank(),
                    "size": self._backend.size(), "store": self._comm_store,
                    "errored": self.errored() is not None}
        store.set(f"{_KEY}{rank}", json.dumps(mine))
        keys = [f"{_KEY}{r}" for r in range(world_size)]
        records = [json.loads(v) for v in store.multi_get(keys)]
        logger.debug("ProcessGroupGyre: members' communicators %s", records)
        return plan(records, _host_port(store_addr))

    def _install(self, store, backend, comm_id: str, comm_store: str) -> None:
        pg = dist.ProcessGroup(store, backend.rank(), backend.size())
        pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
        backend._set_sequence_number_for_group()
        pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM,
                             backend)
        if torch.cuda.is_available():  # staged through host memory (docs/pytorch.md)
            pg._register_backend(torch.device("cuda"),
                                 dist.ProcessGroup.BackendType.CUSTOM, backend)
        self._pg, self._backend = pg, backend
        self._comm_id, self._comm_store = comm_id, comm_store
        self._errored = None

    # ---- errors -----------------------------------------------------------------------

    def abort(self, errored: bool = True) -> None:
        """Ends the group's pending and later operations at once (they fail) and tells
        the other ranks; returns without waiting. The next configure creates a new
        communicator."""
        backend = self._backend
        if backend is not None:
            _C.abort(backend)
            if errored:
                self._errored = RuntimeError(
                    f"ProcessGroupGyre: aborted (quorum {self._quorum_id})")
        self._backend = None
        self._comm_id = self._comm_store = None
        super().abort(errored=errored)

    def shutdown(self) -> None:
        backend = self._backend
        if backend is not None:
            _C.abort(backend)  # nothing should be pending; if something is, end it
        self._backend = None
        self._comm_id = self._comm_store = None
        super().shutdown()

    def _report(self, e: Exception) -> None:
        if self._errored is None:
            self._errored = e

    def allreduce(self, tensors: List[torch.Tensor], opts: object):
        return _ReportedWork(self, super().allreduce(tensors, opts), tensors)

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: object):
        return _ReportedWork(self, super().allreduce_coalesced(tensors, opts), tensors)

    def errored(self) -> Optional[Exception]:
        if self._errored is not None:
            return self._errored
        backend = self._backend
        if backend is not None:
            message = _C.last_error(backend)
            if message:
                return RuntimeError(f"ProcessGroupGyre (quorum {self._quorum_id}): "
                                    f"{message}")
        return None

    def failed_rank(self) -> int:
        """The rank (of the current quorum's group) the group's first failure named, or
        -1 (gyre_torch.failed_rank)."""
        return _C.failed_rank(self._backend) if self._backend is not None else -1

    def __repr__(self) -> str:
        return f"ProcessGroupGyre(pg={self._pg})"
