"""The producer's units reach the core only through its narrow interface (issue #39 item 2).

The units included by kipconsumer/_producer.pyx (TxnCalls, TopicCache, StatsFeed, the records, futures
and delivery files) get the ProducerCore as a handle and use only the interface kipconsumer/_producer.pxd
declares for them: ``p``, ``max_block_ms``, ``is_open()``, ``enter()``/``leave()``, ``check_signals()``
and ``security_exc()``; never a private member (``core._state``, ``core._active``, ``core._stats``, ...).
A static check of the Cython sources, so that a new reach into the core fails here instead of in review.
"""

from __future__ import annotations

import re
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "kipconsumer"
UNITS = sorted(PKG.glob("_producer_*.pxi"))

# the interface the units may use (declared on ProducerCore without a leading underscore)
INTERFACE = {"p", "max_block_ms", "is_open", "enter", "leave", "check_signals", "security_exc"}


def core_uses(sources: dict[str, str]) -> list[tuple[str, int, str]]:
    """(file, line, member) of every ``<name>.<member>`` where ``<name>`` is a ProducerCore parameter
    or variable of the unit (``ProducerCore core``, ``cdef ProducerCore c``)."""
    found = []
    for name, text in sources.items():
        handles = set(re.findall(r"\bProducerCore\s+(\w+)", text))
        for n, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            for handle in handles:
                found += [(name, n, m) for m in re.findall(rf"\b{handle}\.(\w+)", code)]
    return found


def test_the_units_use_only_the_cores_narrow_interface() -> None:
    found = core_uses({p.name: p.read_text() for p in UNITS})
    assert found, "no use of the core found in the units: the check no longer matches the sources"
    outside = [f"{f}:{n} core.{m}" for f, n, m in found if m not in INTERFACE]
    assert not outside, "the producer's units reach past the core's interface:\n" + "\n".join(outside)


def test_the_interface_is_declared_public_on_the_core() -> None:
    pxd = (PKG / "_producer.pxd").read_text()
    body = re.search(r"^cdef class ProducerCore:\n((?:(?:    .*|\s*)\n)*)", pxd, re.M)
    assert body
    declaration = r"^    cdef (?:inline )?(?:readonly )?[\w *]+?\b(\w+)\s*(?:\(|#|$)"
    declared = set(re.findall(declaration, body.group(1), re.M))
    assert INTERFACE <= declared, INTERFACE - declared


def test_the_check_finds_a_reach_into_a_private_member() -> None:
    src = """cdef class Unit:
    cdef f(self, ProducerCore core):
        if core._state != PRODUCER_OPEN:
            core.enter("x")
        cdef ProducerCore other = core
        other._active += 1
"""
    found = core_uses({"unit.pxi": src})
    assert [(n, m) for _, n, m in found if m not in INTERFACE] == [(3, "_state"), (6, "_active")]
