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

import ast
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


# ---- per-partition state in C has one owner (issue #39 item 1) ---------------------------------------

ROOT = PKG.parent
CSRC = ROOT / "csrc"
CYTHON_SOURCES = sorted(p for p in PKG.glob("*") if p.suffix in (".pyx", ".pxi"))

# the fields of the partition state (csrc/partition_state.h, the pause is the queue's `held`), of
# the record filters' state in it (record_filters.h) and of the rebalance barrier (rebalance_barrier.h)
PARTITION_STATE_FIELDS = ("position", "stored", "paused", "held", "app_pos_trusted", "queue", "fetch_stopped",
                          "stopped_offset", "fetch_restarted", "refetch_forward", "filters")
FILTER_FIELDS = ("floor", "seek_target", "seek_seen", "seek_until_ms", "seek_retries", "seek_batch", "sought")
BARRIER_FIELDS = ("enabled", "last_rebalance_ms", "commit_refused_ms")


def partition_state_writes(sources: dict[str, str]) -> list[str]:
    """``file:line`` of every write from Cython to a field of a partition's state (through a
    ``kc_partition_t *`` variable of that file, ``kc_ps_at(...)``, ``kc_ps_find(...)`` or
    ``_assigned(...)``), to a filter or barrier field, and of every place that hands a partition's
    filter state to C itself (``&p.filters``) instead of calling a partition_state.h setter."""
    assign = r"\s*(?:[-+*/%|&^]|<<|>>|//)?=(?!=)"
    found = []
    for name, text in sources.items():
        pointers = set(re.findall(r"\bkc_partition_t\s*\*\s*(\w+)", text))
        receiver = (r"(?:\b(?:kc_ps_at|kc_ps_find|_assigned)\([^()]*(?:\([^()]*\)[^()]*)*\)"
                    r"|\bfb\.parts\[[^\]]*\]")
        if pointers:
            receiver += r"|\b(?:" + "|".join(sorted(pointers)) + r")\b"
        receiver += ")"
        patterns = [
            re.compile(rf"{receiver}\.(?:q\.)?(?:{'|'.join(PARTITION_STATE_FIELDS)})\b(?:\.\w+)?{assign}"),
            re.compile(rf"\.filters\.(?:{'|'.join(FILTER_FIELDS)}){assign}"),
            re.compile(rf"\.barrier\.(?:{'|'.join(BARRIER_FIELDS)}){assign}"),
            re.compile(r"&\s*[\w.]+\.filters\b"),
        ]
        for n, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            if any(p.search(code) for p in patterns):
                found.append(f"{name}:{n}: {code.strip()}")
    return found


def test_fetch_buffer_is_a_queue_only() -> None:
    """csrc/fetch_buffer.h includes no filter, partition-state or heartbeat header, and its partition
    struct carries no position, stored offset, trust, fetch-stop or filter state."""
    header = (CSRC / "fetch_buffer.h").read_text()
    includes = re.findall(r'^#include "([\w.]+)"', header, re.M)
    assert includes == ["rdk.h"], includes
    struct = re.search(r"typedef struct kc_fb_part \{(.*?)\} kc_fb_part_t;", header, re.S)
    assert struct, "kc_fb_part_t not found in fetch_buffer.h: the check no longer matches the header"
    body = re.sub(r"/\*.*?\*/", "", struct.group(1), flags=re.S)
    fields = set(re.findall(r"(\w+)\s*(?:,|;)", body))
    assert {"ring", "len", "bytes", "held"} <= fields, fields
    assert not fields & (set(PARTITION_STATE_FIELDS) - {"held"}), fields & set(PARTITION_STATE_FIELDS)
    source = (CSRC / "fetch_buffer.c").read_text()
    assert not re.search(r"->(?:position|stored|app_pos_trusted|filters|fetch_stopped)\b", source)


def test_partition_state_is_written_through_its_setters_only() -> None:
    found = partition_state_writes({p.name: p.read_text() for p in CYTHON_SOURCES})
    assert not found, ("partition state, filter state or the rebalance barrier written from Cython "
                       "(call a kc_ps_* / kc_barrier_* setter):\n" + "\n".join(found))


def test_partition_state_is_written_in_c_by_its_unit_only() -> None:
    """In csrc/, only partition_state.{h,c} assign a partition's state fields (record_filters.{h,c}
    keep the filter state inside it; the barrier's fields only rebalance_barrier.h)."""
    state = re.compile(r"->(?:position|stored|app_pos_trusted|fetch_stopped|stopped_offset|fetch_restarted"
                       r"|refetch_forward|queue|held)\s*=(?!=)")
    barrier = re.compile(r"(?:->|\.)(?:last_rebalance_ms|commit_refused_ms)\s*=(?!=)")
    found = []
    for path in sorted(CSRC.glob("*.[ch]")):
        text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), path.read_text(), flags=re.S)
        for n, line in enumerate(text.splitlines(), 1):
            if state.search(line) and not path.stem == "partition_state":
                found.append(f"{path.name}:{n}: {line.strip()}")
            if barrier.search(line) and path.name != "rebalance_barrier.h":
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert not found, "partition state or the barrier written outside their unit:\n" + "\n".join(found)


def test_the_partition_state_write_check_finds_each_kind_of_write() -> None:
    """The check above is not vacuous: the writes the consumer made before the setters are found;
    reads, setter calls and writes to other structs (a metrics copy) are not."""
    writes = {
        "p.position = offset",
        "p.stored = p.position",
        "kc_ps_at(&c.core.fb, i).refetch_forward = 1",
        "c.core.fb.parts[i].refetch_forward = 1",
        "_assigned(c, tp).paused = paused",
        "p.filters.floor = q.elems[i].offset",
        "c.core.barrier.last_rebalance_ms = start_us // 1000",
        "c.core.barrier.commit_refused_ms = kc_now_ms()",
        "kc_seek_guard_start(&p.filters, offset)",
        "p.app_pos_trusted += 1",
    }
    fine = {
        "if p.position == KC_POSITION_UNKNOWN or p.position == p.stored:",
        "parts[i].position = p.position",
        "m.paused += 1",
        "kc_ps_seek(&c.core.fb, p, offset)",
        "kc_barrier_commit_refused(&c.core.barrier, kc_now_ms())",
        "lst.elems[0].offset = offset",
        "cdef int64_t target = p.filters.sought",
    }
    for line in writes | fine:
        text = "cdef f(kc_partition_t *p):\n    " + line + "\n"
        assert bool(partition_state_writes({"x.pyx": text})) == (line in writes), line


def _c_sources_for(module: str) -> list[str]:
    """setup.py's c_sources_for(kipconsumer/<module>.pyx), without running setup()."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    keep = [node for node in tree.body
            if (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets)
                and {t.id for t in node.targets if isinstance(t, ast.Name)}
                <= {"ROOT", "CSRC", "PKG", "_EXTERN_H", "_CIMPORT", "_INCLUDE_PXI", "_INCLUDE_H"})
            or (isinstance(node, ast.FunctionDef) and node.name == "c_sources_for")]
    namespace: dict[str, object] = {"__file__": str(ROOT / "setup.py"), "re": re, "Path": Path}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "setup.py", "exec"), namespace)
    c_sources_for = namespace["c_sources_for"]
    assert callable(c_sources_for)
    return list(c_sources_for(PKG / f"{module}.pyx"))


def test_share_consumer_links_no_filter_heartbeat_or_partition_state_code() -> None:
    """The share consumer drains the same fetch buffer but keeps no positions, filters or barrier:
    its extension compiles none of that C (setup.py derives each extension's sources)."""
    share = _c_sources_for("_share")
    assert "csrc/fetch_buffer.c" in share, share
    unwanted = {"csrc/record_filters.c", "csrc/heartbeat_monitor.c", "csrc/partition_state.c",
                "csrc/consumer_core.c", "csrc/prefetch_thread.c"}
    assert not unwanted & set(share), sorted(unwanted & set(share))
    consumer = _c_sources_for("_consumer")
    assert {"csrc/fetch_buffer.c", "csrc/partition_state.c", "csrc/record_filters.c"} <= set(consumer)


def test_rejoining_asks_the_barrier_rule() -> None:
    """The rejoin rule lives in csrc/rebalance_barrier.h alone: the Cython layer neither reads the
    barrier's fields nor the heartbeat monitor's error (it calls kc_consumer_rejoining)."""
    found = [f"{p.name}:{n}: {code.strip()}" for p in CYTHON_SOURCES if p.name.startswith("_consumer")
             for n, code in _code(p) if re.search(r"\.barrier\.\w|\.last_error\b", code)]
    assert not found, found
    close = (PKG / "_consumer_close.pxi").read_text()
    body = re.search(r"^cdef bint _rejoining\(.*?(?=^\S)", close, re.M | re.S)
    assert body and "kc_consumer_rejoining(" in body.group(0), "_rejoining no longer calls the C rule"


def _consumer_names_in(unit: str) -> list[str]:
    """What csrc/<unit>.{h,c} (comments aside) name of the consumer: its headers, kc_consumer_
    functions and types."""
    calls_consumer = r'#include "consumer_\w+\.h"|\bkc_consumer_\w+|\bstruct kc_consumer\b'
    return [f"{name}: {found}" for name in (f"{unit}.h", f"{unit}.c")
            for found in re.findall(calls_consumer,
                                    re.sub(r"/\*.*?\*/", "", (CSRC / name).read_text(), flags=re.S))]


def test_prefetch_thread_and_consumer_core_do_not_call_each_other() -> None:
    """The prefetch thread gets its refill as a callback (kc_prefetch_source_t): prefetch_thread.{h,c}
    include no consumer header and name no kc_consumer_ function or type, so the calls go one way
    (consumer_core.c starts and stops the thread). The eventfd helpers are csrc/event_fd.{h,c}'s:
    no other unit creates, signals or drains an eventfd itself."""
    assert not _consumer_names_in("prefetch_thread")
    for path in sorted(CSRC.glob("*.[ch]")):
        if path.stem == "event_fd":
            continue
        text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
        found = re.findall(r"\beventfd\s*\(|<sys/eventfd\.h>|\bkc_drain_eventfd\b", text)
        assert not found, f"{path.name}: {found} (use csrc/event_fd.h)"


def test_stall_thread_and_consumer_core_do_not_call_each_other() -> None:
    """The stall thread (poll.stall.fetch.pause.ms) gets the consumer's parts it pauses and looks at,
    and the release of the fetch queue as a callback, in a kc_stall_source_t that consumer_core.c
    builds (kc_consumer_stall_start): stall_pause.{h,c} include no consumer header and name no
    kc_consumer_ function or type, as the prefetch thread."""
    assert not _consumer_names_in("stall_pause")
