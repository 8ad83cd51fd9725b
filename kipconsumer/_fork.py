"""Fork safety: clients created before ``os.fork()`` are foreign in the child.

librdkafka's threads do not survive a fork: in the child, a client's handle is a copy whose threads
are gone and whose locks may be held by threads that no longer exist. Using it, or destroying it
(``close()``, garbage collection, the exit-time finalizers), crashes or hangs the child.

Contract: every live client registers itself here (a weak registry). In a child process, right after
the fork, each of them is told it is foreign (``_mark_foreign(pid)``): it swaps its native handle for a
:class:`ForeignHandle`, whose every use raises ``IllegalStateError`` ("created in process N"), and hands
the real one to :func:`leak`, which keeps it alive for the life of the child so that no destructor of
librdkafka ever runs there. The parent's clients are untouched. Create new clients in the child.

Below the clients, the native objects that own librdkafka state (handles, batches of records, share
batches, the embedded broker's mock cluster) record the process that created them and, in any other,
leak that state on deallocation instead of destroying it (``_process.pxd``): whatever a child's
garbage collector finds, also objects this registry never saw (a batch of a consumer closed before
the fork), is freed without touching the parent's librdkafka.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from typing import Any, Protocol

from kipconsumer.errors import IllegalStateError

__all__ = ["ForeignHandle", "leak", "register", "foreign_error"]


class _Forkable(Protocol):
    def _mark_foreign(self, pid: int) -> None: ...


_live: weakref.WeakSet[Any] = weakref.WeakSet()
_pid = os.getpid()  # the process the registered clients were created in
_leaked: list[object] = []


def foreign_error(kind: str, pid: int) -> IllegalStateError:
    return IllegalStateError(
        f"this {kind} was created in process {pid} and cannot be used in process {os.getpid()} (a child "
        f"made by fork()): librdkafka's threads do not survive a fork. Create a new {kind} in the child; "
        f"the inherited one is left alone (not closed) there.")


class ForeignHandle:
    """Stands for a native handle inherited through ``fork()``: any attribute use raises
    ``IllegalStateError``; ``closed`` is True (nothing may be done with it here)."""

    closed = True

    def __init__(self, kind: str, pid: int) -> None:
        self._kind = kind
        self._pid = pid

    def __getattr__(self, name: str) -> Any:
        raise foreign_error(self.__dict__.get("_kind", "client"), self.__dict__.get("_pid", 0))

    def __repr__(self) -> str:
        return f"<foreign {self._kind} of process {self._pid}>"


def register(client: _Forkable) -> None:
    """Registers a live client (weakly): a fork marks it foreign in the child."""
    _live.add(client)


def leak(obj: object) -> None:
    """Keeps ``obj`` alive until the process ends (its destructor never runs, not even at exit)."""
    _leaked.append(obj)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def _after_fork_in_child() -> None:
    global _pid
    parent, _pid = _pid, os.getpid()
    clients = list(_live)
    _live.clear()
    for client in clients:
        try:
            client._mark_foreign(parent)
        except Exception:  # pragma: no cover - never let a fork fail because of a client
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
