"""Pipeline config rules checked at construction (issue #38 U7): a setting the chosen
``processing.guarantee`` cannot honour is a ``ConfigError`` naming it, not a failure of every send."""

from __future__ import annotations

import pytest

from kipconsumer.errors import ConfigError
from kipconsumer.streams import Pipeline, split_config

BASE = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g"}


@pytest.mark.parametrize("key", ["transactional.id", "producer.transactional.id"])
def test_at_least_once_refuses_a_transactional_id(key: str) -> None:
    match = r"transactional\.id.*needs processing\.guarantee=exactly_once_v2"
    for guarantee in ({}, {"processing.guarantee": "at_least_once"}):
        with pytest.raises(ConfigError, match=match):
            split_config({**BASE, **guarantee, key: "tx-1"})
        with pytest.raises(ConfigError, match=match):
            Pipeline({**BASE, **guarantee, key: "tx-1"}, "src", lambda r: [(None, r.value)], "sink")


@pytest.mark.parametrize("key", ["transactional.id", "producer.transactional.id"])
def test_exactly_once_keeps_a_given_transactional_id(key: str) -> None:
    cfg = split_config({**BASE, "processing.guarantee": "exactly_once_v2", key: "tx-1"})
    assert cfg.producer["transactional.id"] == "tx-1"
