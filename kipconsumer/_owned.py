"""The one-owner-thread contract of the client facades (``KafkaConsumer``, ``KafkaShareConsumer``).

``OwnerThread`` (compiled, ``kipconsumer._owner``) is the contract: one thread at a time,
``ConcurrentAccessError`` for a second one, one implementation for every client; ``owned``
decorates a facade method so that it runs under the facade's ``_thread``.

``owned`` stays Python on purpose: CPython runs a pending signal handler after a call of a C function
returns, in the caller, but not when a Python function returns, so a method's result passes from the
method through this wrapper to the caller with no point where a signal's exception could drop it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from kipconsumer._owner import OwnerThread


class Owned(Protocol):
    """A facade under the thread contract."""

    _thread: OwnerThread


_S = TypeVar("_S", bound=Owned)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def owned(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """Runs ``method`` as the object's one owner thread (``self._thread``: ``enter`` before, ``leave``
    after, also when ``method`` raises).

    Every step is one C call of ``OwnerThread``, so a signal handler's exception (``KeyboardInterrupt``)
    can only be raised between them: before ``enter`` (nothing taken), between ``enter`` and the
    method, or in the method (``unwind`` gives back what ``enter`` took, whether it returned or not:
    ``level`` was read before it), or after ``leave`` returned (the call is over). In that last case
    the method's result never reaches the caller: the facade's ``_result_lost(name, result)`` hook, if
    it has one, takes back what the result handed out (a share consumer's polled records) before the
    exception propagates."""
    name = method.__name__

    def call(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        thread = self._thread
        level = thread.level()
        try:
            thread.enter(name)
            result = method(self, *args, **kwargs)
        except BaseException:
            thread.unwind(level)
            raise
        try:
            thread.leave()
        except BaseException:
            lost = getattr(self, "_result_lost", None)
            if lost is not None:
                lost(name, result)
            raise
        return result

    functools.update_wrapper(call, method)
    return call


__all__ = ["OwnerThread", "owned"]
