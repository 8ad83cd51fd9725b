"""The native consumer's state machines have one writer each (issue #29, "Structure II").

ClosePhase is assigned only by CloseControl's transition methods and MemberState only by
Membership's (kipconsumer/_consumer.pxd declares both classes with their methods); everything else
reads them through the classes' inline queries. A static check of the Cython sources, so that a new
``c._close.phase = ...`` elsewhere fails here instead of in review.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "kipconsumer"
SOURCES = sorted([PKG / "_consumer.pyx", PKG / "_consumer.pxd", *PKG.glob("_consumer_*.pxi")])

# (field, enum, the class whose methods alone assign it)
STATES = [("phase", "ClosePhase", "CloseControl"), ("state", "MemberState", "Membership")]


def _assignments(field: str) -> list[tuple[Path, int, str]]:
    """(file, line number, enclosing top-level statement) of every assignment to ``<x>.<field>``."""
    pattern = re.compile(rf"\.{field}\s*=(?!=)")
    found = []
    for path in SOURCES:
        top = ""
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line and not line[0].isspace() and not line.startswith("#"):
                top = line
            if pattern.search(line.split("#", 1)[0]):
                found.append((path, n, top))
    return found


@pytest.mark.parametrize(("field", "enum", "owner"), STATES)
def test_each_state_is_assigned_by_its_class_only(field: str, enum: str, owner: str) -> None:
    found = _assignments(field)
    assert found, f"no assignment to .{field} found: the check no longer matches the sources"
    outside = [f"{p.name}:{n} (in {top!r})" for p, n, top in found if top != f"cdef class {owner}:"]
    assert not outside, f"{enum} is assigned outside {owner}: {outside}"


@pytest.mark.parametrize(("field", "enum", "owner"), STATES)
def test_only_the_owner_declares_a_field_of_the_state(field: str, enum: str, owner: str) -> None:
    pxd = (PKG / "_consumer.pxd").read_text()
    holders = [m.group(1) for m in re.finditer(r"^cdef class (\w+):((?:\n(?:    .*|\s*))*)", pxd, re.M)
               if re.search(rf"^\s+cdef {enum} \w+", m.group(2), re.M)]
    assert holders == [owner]
