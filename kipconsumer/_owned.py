"""The one-owner-thread contract of the client facades (``KafkaConsumer``, ``KafkaShareConsumer``).

``OwnerThread`` is the contract (one thread at a time, ``ConcurrentAccessError`` for a second one),
one implementation for every client; ``owned`` decorates a facade method so that it runs between
``self._enter(name)`` and ``self._leave()``, the facade's hooks around its ``OwnerThread``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from threading import get_ident
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from kipconsumer.errors import ConcurrentAccessError, IllegalStateError


class Owned(Protocol):
    """A facade with the thread contract's two hooks."""

    def _enter(self, method: str) -> None: ...

    def _leave(self) -> None: ...


_S = TypeVar("_S", bound=Owned)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def owned(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """Runs ``method`` as the object's one owner thread (``_enter`` / ``_leave``).

    A signal handler's exception (``KeyboardInterrupt``) raised while leaving, after ``method``
    returned, means its result never reaches the caller: the facade's ``_result_lost(name, result)``
    hook, if it has one, takes back what the result handed out (a share consumer's polled records)
    before the exception propagates. Nothing runs a signal handler between this function's return
    and the caller's use of the result (CPython checks for pending signals on calls, not on returns)."""
    name = method.__name__

    def call(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        self._enter(name)
        try:
            result = method(self, *args, **kwargs)
        except BaseException:
            self._leave()
            raise
        try:
            self._leave()
        except BaseException:
            lost = getattr(self, "_result_lost", None)
            if lost is not None:
                lost(name, result)
            raise
        return result

    functools.update_wrapper(call, method)
    return call


class OwnerThread:
    """The one-owner-thread contract every client facade shares (``KafkaConsumer``,
    ``KafkaShareConsumer``): one thread at a time is in a call; that thread may call again from
    inside (a callback), any other thread gets ``ConcurrentAccessError`` at once, naming both threads
    and the call in progress, and the call in progress goes on. Once a thread closes the client
    (``closer`` set), a new call is refused with ``IllegalStateError`` (``refusal``, formatted with the
    method's name).

    ``lock`` (reentrant: a signal handler may run while this thread holds it) guards the fields;
    ``guard``, a Condition on it, is notified when the owner lets go (``release``), for a ``close()``
    of another thread waiting for the call. Take the lock with ``with owner.lock`` only, never
    ``with owner.guard``: Condition.__enter__ is Python code, and a signal's exception raised there
    after the acquire would leave the lock held for good. What a facade refuses on top inside its own
    calls (a call from its callbacks) is its ``admit`` hook's.
    """

    __slots__ = ("client", "refusal", "lock", "guard", "owner", "depth", "method", "closer")

    def __init__(self, client: str, refusal: str) -> None:
        self.client = client
        self.refusal = refusal
        self.reset()

    def reset(self) -> None:
        """No owner, no closer and fresh locks: also in a child made by ``fork()``, where the locks
        may have been held by a thread of the parent, which does not exist there."""
        self.lock = threading.RLock()
        self.guard = threading.Condition(self.lock)
        self.owner: int | None = None
        self.depth = 0
        self.method = ""
        self.closer: int | None = None  # the thread closing the client (set by the facade's close())

    def enter(self, method: str, admit: Callable[[str], None] | None = None) -> bool:
        """Makes the calling thread the owner for ``method`` (True), or counts one more level of the
        owner's own call (False: a call from a callback inside it; ``admit(method)`` may refuse it by
        raising). Another thread owning it: ``ConcurrentAccessError``; a thread closing it:
        ``IllegalStateError``."""
        me = get_ident()
        with self.lock:
            if self.owner == me:
                if admit is not None:
                    admit(method)
                self.depth += 1
                return False
            if self.owner is not None:
                raise ConcurrentAccessError(
                    f"{self.client} is not safe for multi-threaded access: {method}() was called from "
                    f"thread {me} while thread {self.owner} is in {self.method}(). Use the consumer from "
                    f"one thread at a time; only wakeup(), close() and metrics() may be called from any "
                    f"thread.")
            if self.closer is not None:
                raise IllegalStateError(self.refusal.format(method=method))
            self.owner, self.depth, self.method = me, 1, method
            return True

    def own(self, method: str) -> None:
        """Makes the calling thread the owner for ``method`` without the checks: for the closing
        thread's own ``close()``, once the owner let go. Hold ``lock``."""
        self.owner, self.depth, self.method = get_ident(), 1, method

    def leave(self) -> bool:
        """Ends one level of the owner's call; True when its outermost call ended: the thread is still
        the owner until ``release()`` (the facade may finish something first). Hold ``lock``."""
        self.depth -= 1
        return not self.depth

    def release(self, notify: bool = True) -> None:
        """No owner any more; ``notify``: wakes the threads waiting on ``guard``. Hold ``lock``."""
        self.owner, self.depth = None, 0
        if notify:
            self.guard.notify_all()

    def is_owner(self) -> bool:
        """True on the thread in a call."""
        return self.owner == get_ident()
