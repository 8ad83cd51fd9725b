"""The native consumer's state classes own their state (issue #29 "Structure II", issue #39 item 2).

Static checks of the Cython sources (kipconsumer/_consumer.pxd declares the classes with their
fields and methods), so that a new ``c._close.phase = ...`` or ``c._membership.rebalances += 1``
elsewhere fails here instead of in review:

- ClosePhase and MemberState are assigned only by their class's one guarded transition, ``move()``
  (and the initial state by ``__cinit__``);
- no field of a state class (Membership, CloseControl, ListenerInvoker, AsyncCommits, StableOffsets,
  AssignmentChanges) is written, or mutated in place, from outside that class, and no state object is
  aliased (an alias would escape the check).

And unit tests of the guarded transitions: ``move()`` refuses every move its table forbids with an
IllegalTransitionError naming both states, and allows the ones the consumer makes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "kipconsumer"
SOURCES = sorted([PKG / "_consumer.pyx", PKG / "_consumer.pxd", *PKG.glob("_consumer_*.pxi")])

# (field, enum, the class whose move() alone assigns it)
STATES = [("phase", "ClosePhase", "CloseControl"), ("state", "MemberState", "Membership")]

# (the attribute that holds the object, its class): NativeConsumer's slots, and Membership's listener
HOLDERS = [("_membership", "Membership"), ("_close", "CloseControl"), ("listener", "ListenerInvoker"),
           ("_commits", "AsyncCommits"), ("_lso", "StableOffsets"), ("_assignment", "AssignmentChanges")]

# methods of the builtin containers that change them in place
_MUTATORS = ("clear|update|difference_update|intersection_update|symmetric_difference_update|add|discard"
             "|remove|pop|popitem|append|extend|insert|setdefault|sort|reverse")


def _lines(path: Path) -> list[tuple[int, str, str, str]]:
    """(line number, enclosing top-level statement, enclosing method of a class, code) of each line."""
    out = []
    top = method = ""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line and not line[0].isspace() and not line.startswith("#"):
            top, method = line, ""
        elif re.match(r"    (?:cdef|cpdef|def) ", line):
            method = line.strip()
        out.append((n, top, method, line.split("#", 1)[0]))
    return out


def _assignments(field: str) -> list[tuple[Path, int, str, str]]:
    """(file, line number, enclosing top-level statement, method) of every assignment to ``<x>.<field>``."""
    pattern = re.compile(rf"\.{field}\s*=(?!=)")
    return [(path, n, top, method) for path in SOURCES for n, top, method, code in _lines(path)
            if pattern.search(code)]


def _class_fields(pxd: str, cls: str) -> set[str]:
    """The fields ``cls`` declares in the .pxd text (``cdef [readonly|public] TYPE [*]NAME``)."""
    m = re.search(rf"^cdef class {cls}\b.*:\n((?:(?:    .*|\s*)\n)*)", pxd, re.M)
    assert m, f"class {cls} not found in the .pxd"
    names = set()
    for line in m.group(1).splitlines():
        code = line.split("#", 1)[0].rstrip()
        if re.match(r"    cdef \w", code) and "(" not in code:
            names.add(re.split(r"[\s*]+", code)[-1])
    return names


def outside_writes(sources: dict[str, str], pxd: str, holders: list[tuple[str, str]]) -> list[str]:
    """``file:line`` of every write to a field of a holder's class through the holder's attribute
    (``x.<attr>.<field> = / += / [k] = / .<mutator>(``) outside that class, and of every alias of a
    holder (``y = x.<attr>``)."""
    found = []
    for attr, cls in holders:
        fields = _class_fields(pxd, cls)
        write = re.compile(rf"\.{attr}\.(\w+)(?:\s*(?:[-+*/%|&^]|<<|>>|//)?=(?!=)|\[[^\]]*\]\s*=(?!=)"
                           rf"|\.(?:{_MUTATORS})\()")
        alias = re.compile(rf"^\s*\w+\s*(?::\s*\w+\s*)?=\s*[\w.]*\.{attr}\s*$")
        for name, text in sources.items():
            top = ""
            for n, line in enumerate(text.splitlines(), 1):
                if line and not line[0].isspace() and not line.startswith("#"):
                    top = line
                code = line.split("#", 1)[0]
                if top.startswith(f"cdef class {cls}"):
                    continue
                hit = write.search(code)
                if hit and hit.group(1) in fields:
                    found.append(f"{name}:{n} writes {cls}.{hit.group(1)}: {code.strip()!r}")
                if alias.search(code):
                    found.append(f"{name}:{n} aliases {cls}: {code.strip()!r}")
    return found


@pytest.mark.parametrize(("field", "enum", "owner"), STATES)
def test_each_state_is_assigned_by_its_guarded_transition_only(field: str, enum: str, owner: str) -> None:
    found = _assignments(field)
    assert found, f"no assignment to .{field} found: the check no longer matches the sources"
    outside = [f"{p.name}:{n} (in {top!r} {method!r})" for p, n, top, method in found
               if top != f"cdef class {owner}:"
               or not method.startswith(("cpdef int move(", "def __cinit__("))]
    assert not outside, f"{enum} is assigned outside {owner}.move(): {outside}"


@pytest.mark.parametrize(("field", "enum", "owner"), STATES)
def test_only_the_owner_declares_a_field_of_the_state(field: str, enum: str, owner: str) -> None:
    pxd = (PKG / "_consumer.pxd").read_text()
    holders = [m.group(1) for m in re.finditer(r"^cdef class (\w+):((?:\n(?:    .*|\s*))*)", pxd, re.M)
               if re.search(rf"^\s+cdef (?:readonly )?{enum} \w+", m.group(2), re.M)]
    assert holders == [owner]


def test_no_field_of_a_state_class_is_written_from_outside_it() -> None:
    pxd = (PKG / "_consumer.pxd").read_text()
    for _, cls in HOLDERS:
        assert _class_fields(pxd, cls), f"no field of {cls} found: the check no longer matches the .pxd"
    found = outside_writes({p.name: p.read_text() for p in SOURCES}, pxd, HOLDERS)
    assert not found, "state written from outside its class:\n" + "\n".join(found)


def test_the_outside_write_check_finds_each_kind_of_write() -> None:
    """The check above is not vacuous: each kind of write it looks for, outside the class, is found;
    the same lines inside the class, reads, and method calls are not."""
    pxd = (PKG / "_consumer.pxd").read_text()
    bad = """cdef _f(NativeConsumer c):
    c._membership.rebalances += 1
    c._membership.stale_parts.clear()
    c._membership.subscription = set()
    c._membership.stale_parts.difference_update(tps)
    c._close.phase = CLOSE_DONE
    c._membership.listener.running -= 1
    c._commits.callbacks[key] = cb
    m = c._membership
"""
    good = """cdef class Membership:
    cdef void records_dropped(self, size_t n) noexcept:
        self.rebalances += 1
        self.stale_parts.clear()

cdef _g(NativeConsumer c):
    n = c._membership.rebalances
    c._membership.records_dropped(3)
    if c._membership.stale_parts == x:
        pass
"""
    found = outside_writes({"bad.pxi": bad, "good.pxi": good}, pxd, HOLDERS)
    assert sorted(f.split(" ", 1)[0] for f in found) == [f"bad.pxi:{n}" for n in range(2, 10)], found


# ---------------------------------------------------------------- the guarded transitions

MEMBER = ["UNJOINED", "JOINED", "LEFT", "REJOINING"]
MEMBER_LEGAL = {("UNJOINED", "JOINED"), ("JOINED", "LEFT"), ("JOINED", "REJOINING"), ("JOINED", "UNJOINED"),
                ("LEFT", "JOINED"), ("LEFT", "UNJOINED"), ("REJOINING", "JOINED"), ("REJOINING", "LEFT"),
                ("REJOINING", "UNJOINED")}
CLOSE = ["OPEN", "SETTLING", "REVOKING", "UNASSIGNED", "DONE"]
CLOSE_LEGAL = {("OPEN", "SETTLING"), ("OPEN", "REVOKING"), ("OPEN", "DONE"), ("SETTLING", "REVOKING"),
               ("SETTLING", "DONE"), ("REVOKING", "UNASSIGNED"), ("REVOKING", "DONE"), ("UNASSIGNED", "DONE")}


def _reach(kind: str, names: list[str], legal: set[tuple[str, str]], target: str) -> object:
    """A fresh state object moved to ``target`` by legal moves (breadth-first from the initial state)."""
    from kipconsumer import _consumer

    paths = {names[0]: [names[0]]}
    frontier = [names[0]]
    while frontier:
        nxt = []
        for s in frontier:
            for a, b in sorted(legal):
                if a == s and b not in paths:
                    paths[b] = [*paths[s], b]
                    nxt.append(b)
        frontier = nxt
    obj = getattr(_consumer, kind)()
    for step in paths[target][1:]:
        obj.move(names.index(step))  # type: ignore[attr-defined]
    return obj


@pytest.mark.parametrize(("kind", "attr", "machine", "names", "legal"), [
    ("Membership", "state", "MemberState", MEMBER, MEMBER_LEGAL),
    ("CloseControl", "phase", "ClosePhase", CLOSE, CLOSE_LEGAL),
])
def test_move_refuses_every_illegal_transition(kind: str, attr: str, machine: str, names: list[str],
                                               legal: set[tuple[str, str]]) -> None:
    from kipconsumer._transition import IllegalTransitionError

    for a in names:
        for b in names:
            obj = _reach(kind, names, legal, a)
            assert getattr(obj, attr) == names.index(a)
            if a == b or (a, b) in legal:
                obj.move(names.index(b))  # type: ignore[attr-defined]
                assert getattr(obj, attr) == names.index(b)
                continue
            refused = f"^{machine}: illegal transition {a} -> {b} "
            with pytest.raises(IllegalTransitionError, match=refused) as ei:
                obj.move(names.index(b))  # type: ignore[attr-defined]
            assert (ei.value.machine, ei.value.source, ei.value.target) == (machine, a, b)
            assert getattr(obj, attr) == names.index(a), "a refused move changed the state"
    obj = _reach(kind, names, legal, names[0])
    with pytest.raises(IllegalTransitionError, match=f"{names[0]} -> 99 "):
        obj.move(99)  # type: ignore[attr-defined]


# ---------------------------------------------------------------- shared by every client

CLIENT_SOURCES = sorted(p for p in PKG.glob("*") if p.suffix in (".py", ".pyx", ".pxi", ".pxd"))


def _code(path: Path) -> list[tuple[int, str]]:
    """(line number, line without its comment) of ``path``."""
    return [(n, line.split("#", 1)[0]) for n, line in enumerate(path.read_text().splitlines(), 1)]


def test_one_security_hold_for_every_client() -> None:
    """The refused-login hold (issue #39 item 2) is kipconsumer/_security_hold.py's SecurityHold alone:
    no other class of that name, no other hold duration, no write to its fields from outside it."""
    own = PKG / "_security_hold.py"
    found = []
    for path in CLIENT_SOURCES:
        if path == own:
            continue
        for n, code in _code(path):
            if re.search(r"\bclass SecurityHold\b|AUTH_HOLD\w*\s*=(?!=)|auth_failure\w*\s*=(?!=)", code):
                found.append(f"{path.name}:{n}: {code.strip()}")
            fields = r"(?:reports|auth_failure\w*|group_refused)"
            if re.search(rf"\b_?security\.{fields}(?:\s*=(?!=)|\.(?:{_MUTATORS})\()", code):
                found.append(f"{path.name}:{n}: {code.strip()}")
    assert not found, "a second security hold, or its state written outside it:\n" + "\n".join(found)
    users = [p.name for p in CLIENT_SOURCES
             if "from kipconsumer._security_hold import SecurityHold" in p.read_text()]
    assert sorted(users) == ["_consumer.pyx", "_share.pyx"], users


def test_one_owner_thread_contract_for_every_client() -> None:
    """The one-owner-thread contract is kipconsumer/_owner.pyx's OwnerThread alone: nothing else raises
    ConcurrentAccessError or keeps an owner thread's identity, and both consumers use it."""
    own = PKG / "_owner.pyx"
    found = []
    for path in CLIENT_SOURCES:
        if path == own:
            continue
        for n, code in _code(path):
            if re.search(r"(?<!class )\bConcurrentAccessError\(|self\._(?:owner|depth|method)\b", code):
                found.append(f"{path.name}:{n}: {code.strip()}")
    # the embedded broker keeps the *process* that started it (os.getpid()), not a thread
    found = [f for f in found if not f.startswith("broker.py:")]
    assert not found, "a second owner-thread contract:\n" + "\n".join(found)
    for facade, client in (("consumer.py", "KafkaConsumer"), ("share.py", "KafkaShareConsumer")):
        assert re.search(rf'OwnerThread\(\s*"{client}"', (PKG / facade).read_text()), facade
