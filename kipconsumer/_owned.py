"""The one-owner-thread decorator of the client facades (``KafkaConsumer``, ``KafkaShareConsumer``).

A decorated method runs between ``self._enter(name)`` and ``self._leave()``: the facade's thread
contract (one thread at a time, ``ConcurrentAccessError`` for a second one) lives in those two.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar


class Owned(Protocol):
    """A facade with the thread contract's two hooks."""

    def _enter(self, method: str) -> None: ...

    def _leave(self) -> None: ...


_S = TypeVar("_S", bound=Owned)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def owned(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """Runs ``method`` as the object's one owner thread (``_enter`` / ``_leave``)."""
    name = method.__name__

    def call(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        self._enter(name)
        try:
            return method(self, *args, **kwargs)
        finally:
            self._leave()

    functools.update_wrapper(call, method)
    return call
