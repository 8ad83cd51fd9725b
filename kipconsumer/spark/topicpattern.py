"""A matcher for ``subscribePattern`` that takes time linear in the topic name's length, whatever the
pattern: :func:`compile_topic_pattern` turns the Python ``re`` pattern :mod:`~kipconsumer.spark.javaregex`
made into a Thompson NFA and :meth:`TopicPattern.fullmatch` runs it over every state at once (no
backtracking), so ``(a+)+b`` or ``(a|a)*c`` against a long topic name cost what ``a+b`` costs (Python's
backtracking ``re`` needs seconds to years for them; Java's matcher is instant).

It accepts exactly the topic names ``re.fullmatch(pattern, name)`` accepts, for names up to 249
characters (Kafka's limit): counted repetitions are capped at 250, which changes nothing for such
names and keeps the NFA small. Lookahead and lookbehind are evaluated per position (time quadratic in
the name's length at worst). What needs backtracking to define is refused with a ``ConfigError``
naming it: backreferences, conditionals, atomic groups and possessive quantifiers.

The pattern is parsed by Python's own ``re`` parser (``re._parser``; ``sre_parse`` before 3.11), so the
syntax and flags are exactly ``re``'s; each single-character item (a literal, a class, ``.``) is tested
with ``re`` itself, one character at a time, cached.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from typing import Any

from kipconsumer.errors import ConfigError

if sys.version_info >= (3, 11):
    from re import _constants as _c
    from re import _parser as _p
else:  # pragma: no cover - Python 3.10
    import sre_constants as _c
    import sre_parse as _p

__all__ = ["TopicPattern", "compile_topic_pattern", "MAX_STATES", "MAX_NAME"]

#: The longest topic name Kafka allows: counted repetitions above it are capped.
MAX_NAME = 249
#: NFA size limit (after expanding counted repetitions): a bigger pattern is refused.
MAX_STATES = 50_000

_CHAR, _SPLIT, _COND, _MATCH = 0, 1, 2, 3
#: (sub-NFA start state, position) -> where its matches begun there end (one fullmatch() call)
_Memo = dict[tuple[int, int], set[int]]
_CATEGORY = {"CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
             "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W"}
_ATOM_FLAGS = re.IGNORECASE | re.DOTALL | re.ASCII | re.UNICODE
_REFUSED = {"GROUPREF": "a backreference", "GROUPREF_EXISTS": "a conditional group (?(...)...)",
            "ATOMIC_GROUP": "an atomic group (?>...)", "POSSESSIVE_REPEAT": "a possessive quantifier"}


def _op(name: str) -> Any:
    return getattr(_c, name, None)


def _char(c: int) -> str:
    return f"\\U{c:08x}"


def _render_set(items: list[tuple[Any, Any]]) -> str:
    body: list[str] = []
    for op, av in items:
        if op is _c.NEGATE:
            body.insert(0, "^")
        elif op is _c.LITERAL:
            body.append(_char(av))
        elif op is _c.RANGE:
            body.append(f"{_char(av[0])}-{_char(av[1])}")
        elif op is _c.CATEGORY and str(av) in _CATEGORY:
            body.append(_CATEGORY[str(av)])
        else:
            raise ValueError(f"unexpected class item {op} {av}")
    return "[" + "".join(body) + "]"


@functools.lru_cache(maxsize=1024)
def _atom(source: str, flags: int) -> Callable[[str], bool]:
    """A one-character test with ``re``'s semantics, cached per character."""
    rx = re.compile(source, flags)
    seen: dict[str, bool] = {}

    def test(ch: str) -> bool:
        hit = seen.get(ch)
        if hit is None:
            hit = seen[ch] = rx.fullmatch(ch) is not None
        return hit

    return test


class _Builder:
    """Builds the NFA backwards: each item is compiled knowing the state that follows it."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.kind: list[int] = []
        self.arg: list[Any] = []
        self.next: list[Any] = []

    def add(self, kind: int, arg: Any = None, nxt: Any = None) -> int:
        if len(self.kind) >= MAX_STATES:
            raise ConfigError(
                f"option subscribePattern {self.pattern[:80]!r}: too large to match in linear time (more "
                f"than {MAX_STATES} NFA states once counted repetitions {{n,m}} are expanded, at most "
                f"{MAX_NAME + 1} each); write a shorter pattern")
        self.kind.append(kind)
        self.arg.append(arg)
        self.next.append(nxt)
        return len(self.kind) - 1

    def seq(self, items: Any, nxt: int, flags: int) -> int:
        for op, av in reversed(list(items)):
            nxt = self.item(op, av, nxt, flags)
        return nxt

    def refuse(self, what: str) -> ConfigError:
        return ConfigError(
            f"option subscribePattern {self.pattern[:80]!r}: {what} is not supported: kipkafka matches topic "
            "names in linear time, without backtracking, and this construct needs backtracking; write the "
            "pattern without it")

    def item(self, op: Any, av: Any, nxt: int, flags: int) -> int:
        if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
            if op is _c.LITERAL:
                source = _char(av)
            elif op is _c.NOT_LITERAL:
                source = f"[^{_char(av)}]"
            elif op is _c.ANY:
                source = "."
            else:
                source = _render_set(av)
            return self.add(_CHAR, _atom(source, flags & _ATOM_FLAGS), nxt)
        if op is _c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            return self.seq(sub, nxt, (flags | add_flags) & ~del_flags)
        if op is _c.BRANCH:
            starts = [self.seq(alt, nxt, flags) for alt in av[1]]
            return self.add(_SPLIT, starts)
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):  # lazy or greedy: the same set of full matches
            return self.repeat(av, nxt, flags)
        if op is _c.AT:
            return self.add(_COND, ("at", str(av), flags), nxt)
        if op in (_c.ASSERT, _c.ASSERT_NOT):
            direction, sub = av
            end = self.add(_MATCH)
            start = self.seq(sub, end, flags)
            width = sub.getwidth()[0] if direction < 0 else 0
            return self.add(_COND, ("look", direction, op is _c.ASSERT_NOT, start, end, width), nxt)
        for name, what in _REFUSED.items():
            if op is _op(name):
                raise self.refuse(what)
        raise self.refuse(f"the regex item {op}")

    def repeat(self, av: Any, nxt: int, flags: int) -> int:
        lo, hi, sub = av
        # A name of at most MAX_NAME characters holds at most MAX_NAME non-empty iterations; beyond
        # that only empty ones, and where one empty iteration can match, any number can: so
        # {lo,hi} with lo > MAX_NAME is {MAX_NAME + 1}, and hi > MAX_NAME is unbounded.
        if lo > MAX_NAME:
            if sub.getwidth()[0] > 0:
                return self.add(_SPLIT, [])  # needs more characters than a topic name has
            lo = MAX_NAME + 1
        if hi is _c.MAXREPEAT or hi > MAX_NAME:
            loop = self.add(_SPLIT, None)
            self.arg[loop] = [self.seq(sub, loop, flags), nxt]
            tail = loop
        else:
            tail = nxt
            for _ in range(hi - lo):
                tail = self.add(_SPLIT, [self.seq(sub, tail, flags), nxt])
        for _ in range(lo):
            tail = self.seq(sub, tail, flags)
        return tail


class TopicPattern:
    """A compiled ``subscribePattern`` (see the module docstring). ``steps`` is the work the last
    :meth:`fullmatch` did, in NFA state visits: at most (len(name) + 1) x states without lookarounds."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        try:
            parsed = _p.parse(pattern)
        except (re.error, OverflowError, RecursionError) as e:
            raise ConfigError(
                f"option subscribePattern is not a valid regex ({e}): {pattern[:80]!r}") from None
        b = _Builder(pattern)
        self._end = b.add(_MATCH)
        self._start = b.seq(parsed, self._end, parsed.state.flags)
        self._kind, self._arg, self._next = b.kind, b.arg, b.next
        self.states = len(b.kind)
        self.steps = 0

    def fullmatch(self, name: str) -> bool:
        """Whether ``re.fullmatch(pattern, name)`` would match (exact for names up to 249 characters)."""
        self.steps = 0
        memo: _Memo = {}
        return len(name) in self._ends(self._start, self._end, name, 0, len(name), memo)

    def _ends(self, start: int, end: int, name: str, pos: int, stop: int, memo: _Memo) -> set[int]:
        """The positions <= ``stop`` where a match of the sub-NFA ``start``..``end`` begun at ``pos`` ends."""
        key = (start, pos)
        if key in memo and stop <= len(name):
            found = memo[key]
            if stop == len(name):
                return found
            return {e for e in found if e <= stop}
        kind, nxt = self._kind, self._next
        out: set[int] = set()
        current = self._closure([start], name, pos, memo)
        i = pos
        while True:
            if end in current:
                out.add(i)
            if i >= stop or not current:
                break
            ch = name[i]
            step = [nxt[s] for s in current if kind[s] == _CHAR and self._arg[s](ch)]
            self.steps += len(current)
            i += 1
            current = self._closure(step, name, i, memo)
        if stop == len(name):
            memo[key] = out
        return out

    def _closure(self, states: list[int], name: str, pos: int, memo: _Memo) -> set[int]:
        """The states reachable from ``states`` at ``pos`` without reading a character."""
        kind, arg, nxt = self._kind, self._arg, self._next
        seen: set[int] = set()
        stack = list(states)
        while stack:
            s = stack.pop()
            if s in seen:
                continue
            seen.add(s)
            self.steps += 1
            k = kind[s]
            if k == _SPLIT:
                stack.extend(arg[s])
            elif k == _COND and self._holds(arg[s], name, pos, memo):
                stack.append(nxt[s])
        return {s for s in seen if kind[s] in (_CHAR, _MATCH)}

    def _holds(self, cond: tuple[Any, ...], name: str, pos: int, memo: _Memo) -> bool:
        if cond[0] == "look":
            _, direction, negative, start, end, width = cond
            if direction > 0:
                hit = bool(self._ends(start, end, name, pos, len(name), memo))
            else:
                hit = pos >= width and pos in self._ends(start, end, name, pos - width, pos, memo)
            return bool(hit != negative)
        _, at, flags = cond
        n = len(name)
        multiline = bool(flags & re.MULTILINE)
        if at == "AT_BEGINNING":
            return pos == 0 or (multiline and name[pos - 1] == "\n")
        if at == "AT_BEGINNING_STRING":
            return pos == 0
        if at == "AT_END":
            if multiline:
                return pos == n or name[pos] == "\n"
            return pos == n or (pos == n - 1 and name[pos] == "\n")
        if at == "AT_END_STRING":
            return pos == n
        if at in ("AT_BOUNDARY", "AT_NON_BOUNDARY"):
            if n == 0:
                return False  # as re: neither \b nor \B matches in an empty string
            word = _atom(r"\w", flags & _ATOM_FLAGS)
            boundary = (pos > 0 and word(name[pos - 1])) != (pos < n and word(name[pos]))
            return bool(boundary == (at == "AT_BOUNDARY"))
        raise AssertionError(f"unknown anchor {at}")  # pragma: no cover


@functools.lru_cache(maxsize=64)
def compile_topic_pattern(pattern: str) -> TopicPattern:
    """The :class:`TopicPattern` of a Python ``re`` pattern (cached: the driver matches every partition
    discovery). Raises ``ConfigError`` for an invalid pattern or a construct it refuses."""
    return TopicPattern(pattern)
