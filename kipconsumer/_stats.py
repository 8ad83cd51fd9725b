"""The summary of librdkafka's statistics JSON (``statistics.interval.ms``) in ``metrics()``."""

from __future__ import annotations

import json
from typing import Any


def summary(doc: str) -> dict[str, Any]:
    """The parts of one statistics document that ``metrics()["statistics"]`` shows (both clients);
    ``brokers`` is :func:`_brokers`.

    Raises ``ValueError`` for a document that is not JSON."""
    d = json.loads(doc)
    lag = 0
    for t in d.get("topics", {}).values():
        for part, pd in t.get("partitions", {}).items():
            if part != "-1" and pd.get("consumer_lag", -1) >= 0:
                lag += pd["consumer_lag"]
    return {
        "ts_ms": d.get("ts", 0) // 1000,
        "replyq": d.get("replyq", 0),
        "msg_cnt": d.get("msg_cnt", 0),
        "msg_size": d.get("msg_size", 0),
        "tx": d.get("tx", 0), "tx_bytes": d.get("tx_bytes", 0),
        "rx": d.get("rx", 0), "rx_bytes": d.get("rx_bytes", 0),
        "txmsgs": d.get("txmsgs", 0), "txmsg_bytes": d.get("txmsg_bytes", 0),
        "rxmsgs": d.get("rxmsgs", 0), "rxmsg_bytes": d.get("rxmsg_bytes", 0),
        "brokers_up": sum(1 for b in d.get("brokers", {}).values() if b.get("state") == "UP"),
        "consumer_lag": lag,
        "brokers": _brokers(d),
    }


def _brokers(d: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per broker (node id; bootstrap and coordinator pseudo-entries left out): its ``host:port``
    name, state, and the window averages of request round trip (``rtt_avg_us``) and broker throttle
    time (``throttle_avg_ms``); 0 when the window saw no request."""
    out: dict[int, dict[str, Any]] = {}
    for b in d.get("brokers", {}).values():
        node = b.get("nodeid", -1)
        if not isinstance(node, int) or node < 0 or b.get("source") not in (None, "configured", "learned"):
            continue
        out[node] = {"name": b.get("nodename", ""), "state": b.get("state", ""),
                     "rtt_avg_us": (b.get("rtt") or {}).get("avg", 0),
                     "throttle_avg_ms": (b.get("throttle") or {}).get("avg", 0)}
    return out


def share_summary(doc: str) -> dict[str, Any]:
    """:func:`summary` plus what a share consumer's statistics carry (librdkafka 2.16):
    per-partition fetch counts (``rxmsgs``, ``rxbytes``: value bytes) and the share group's state from
    ``cgrp`` (its partition assignment and rebalance count). Offsets, lag and high watermarks are not
    given for share partitions (librdkafka reports -1 / -1001) and are left out."""
    from kipconsumer.structs import TopicPartition

    out = summary(doc)
    d = json.loads(doc)
    parts: dict[TopicPartition, dict[str, int]] = {}
    for name, t in d.get("topics", {}).items():
        for part, pd in t.get("partitions", {}).items():
            if part != "-1" and (pd.get("rxmsgs", 0) or pd.get("desired")):
                parts[TopicPartition(name, int(part))] = {"fetched_records": pd.get("rxmsgs", 0),
                                                          "fetched_bytes": pd.get("rxbytes", 0)}
    out["partitions"] = parts
    cg = d.get("cgrp")
    out["group"] = None if not isinstance(cg, dict) else {
        "state": cg.get("state"), "join_state": cg.get("join_state"),
        "rebalances": cg.get("rebalance_cnt", 0), "assigned_partitions": cg.get("assignment_size", 0)}
    del out["consumer_lag"]  # no lag for share partitions
    return out
