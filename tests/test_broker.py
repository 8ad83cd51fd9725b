"""EmbeddedBroker over real TCP, driven by confluent-kafka as an independent client."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kipconsumer.broker import API_KEYS, EmbeddedBroker, error_codes
from kipconsumer.errors import ConfigError, IllegalStateError
from kipconsumer.errors import KafkaError as KipKafkaError

pytestmark = pytest.mark.interop

QUIET = {"log_level": 0}
FAST_RECONNECT = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300}


@pytest.fixture
def own_broker() -> Iterator[EmbeddedBroker]:
    """A private 3-broker cluster for tests that inject faults."""
    with EmbeddedBroker(num_brokers=3) as b:
        yield b


def _producer(bootstrap: str, **conf: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **QUIET, **FAST_RECONNECT, **conf})


def _produce_one(p: Producer, topic: str, partition: int, value: bytes, timeout: float = 10.0) -> Any:
    """Produce one record and wait for its delivery report; return the report's error (or None)."""
    result: list[Any] = []
    p.produce(topic, value=value, partition=partition, on_delivery=lambda err, msg: result.append(err))
    deadline = time.monotonic() + timeout
    while not result and time.monotonic() < deadline:
        p.poll(0.05)
    assert result, f"no delivery report for {topic}[{partition}] within {timeout}s"
    return result[0]


def _consume(c: Consumer, n: int, timeout: float) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            got.append(m)
    return got


def _group_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            **QUIET,
            **FAST_RECONNECT,
        }
    )


# --- topics, produce, consume ----------------------------------------------------------------------
def test_topic_partitions_and_leaders_visible_in_metadata(
    broker: EmbeddedBroker, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(5)
    assert broker.bootstrap_servers.count("127.0.0.1:") == 3
    p = _producer(broker.bootstrap_servers)
    md = p.list_topics(topic, timeout=10)
    tmd = md.topics[topic]
    assert tmd.error is None
    assert sorted(tmd.partitions) == [0, 1, 2, 3, 4]
    # replication factor 1: partition p is led by broker p % num_brokers + 1 (documented)
    assert {pid: pm.leader for pid, pm in tmd.partitions.items()} == {0: 1, 1: 2, 2: 3, 3: 1, 4: 2}
    assert sorted(md.brokers) == [1, 2, 3]
    assert broker.topics[topic] == 5


def test_produce_and_consume_roundtrip(broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(3)
    p = _producer(broker.bootstrap_servers)
    sent = {(i % 3, f"v{i}".encode()) for i in range(30)}
    for i in range(30):
        p.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 3)
    assert p.flush(10) == 0

    c = _group_consumer(broker.bootstrap_servers, f"g-{topic}")
    try:
        c.subscribe([topic])
        got = _consume(c, 30, timeout=15)
        assert {(m.partition(), m.value()) for m in got} == sent
        for part in range(3):
            offsets = [m.offset() for m in got if m.partition() == part]
            assert offsets == list(range(10)), offsets
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(topic, i) for i in range(3)], timeout=10)
        assert [tp.offset for tp in committed] == [10, 10, 10]
    finally:
        c.close()


def test_create_topic_twice(broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(2)
    with pytest.raises(KipKafkaError) as ei:
        broker.create_topic(topic, 2)
    assert ei.value.code == "TOPIC_ALREADY_EXISTS"
    broker.create_topic(topic, 2, exist_ok=True)


# --- fault injection -------------------------------------------------------------------------------
def test_set_down_makes_partitions_unreachable_and_set_up_restores(own_broker: EmbeddedBroker) -> None:
    own_broker.create_topic("down", 3)  # partition 0 -> broker 1, partition 1 -> broker 2
    p = _producer(own_broker.bootstrap_servers, **{"message.timeout.ms": 2000})
    assert _produce_one(p, "down", 0, b"before") is None

    own_broker.set_down(1)
    t0 = time.monotonic()
    err = _produce_one(p, "down", 0, b"while-down")
    assert err is not None and err.code() == KafkaError._MSG_TIMED_OUT, err
    assert time.monotonic() - t0 >= 1.5
    assert _produce_one(p, "down", 1, b"other-broker") is None  # broker 2 is unaffected

    own_broker.set_up(1)
    assert _produce_one(p, "down", 0, b"after", timeout=15) is None
    assert own_broker.topics == {"down": 3}


def test_set_rtt_delays_round_trip(own_broker: EmbeddedBroker) -> None:
    own_broker.create_topic("slow", 1)  # led by broker 1
    p = _producer(own_broker.bootstrap_servers)
    assert _produce_one(p, "slow", 0, b"warm-up") is None

    def round_trip() -> float:
        t0 = time.monotonic()
        assert _produce_one(p, "slow", 0, b"x") is None
        return time.monotonic() - t0

    baseline = round_trip()
    own_broker.set_rtt(1, 800)
    delayed = round_trip()
    own_broker.set_rtt(1, 0)
    restored = round_trip()
    assert baseline < 0.4, baseline
    assert delayed >= 0.75, delayed
    assert restored < 0.4, restored


def test_push_request_errors_fail_next_requests(own_broker: EmbeddedBroker) -> None:
    own_broker.create_topic("errs", 1)
    no_retry = _producer(own_broker.bootstrap_servers, retries=0)
    assert _produce_one(no_retry, "errs", 0, b"warm-up") is None

    own_broker.push_request_errors("Produce", "NOT_ENOUGH_REPLICAS", 20)  # name or code
    first = _produce_one(no_retry, "errs", 0, b"a")
    second = _produce_one(no_retry, "errs", 0, b"b")
    third = _produce_one(no_retry, "errs", 0, b"c")
    assert first is not None and first.code() == KafkaError.NOT_ENOUGH_REPLICAS
    assert second is not None and second.code() == KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert third is None  # the error stack is used up

    # a retrying client rides over injected retriable errors
    retrying = _producer(own_broker.bootstrap_servers, **{"retry.backoff.ms": 10})
    assert _produce_one(retrying, "errs", 0, b"warm-up") is None
    own_broker.push_request_errors(API_KEYS["Produce"], *["NOT_ENOUGH_REPLICAS"] * 3)
    assert _produce_one(retrying, "errs", 0, b"retried") is None

    # cleared errors are not returned
    own_broker.push_request_errors("produce", "REQUEST_TIMED_OUT", "REQUEST_TIMED_OUT")
    own_broker.clear_request_errors("Produce")
    assert _produce_one(no_retry, "errs", 0, b"d") is None


def test_set_coordinator_moves_the_group(own_broker: EmbeddedBroker) -> None:
    own_broker.create_topic("coord", 1)  # led by broker 1
    p = _producer(own_broker.bootstrap_servers)
    for i in range(6):
        p.produce("coord", value=str(i).encode(), partition=0)
    assert p.flush(10) == 0

    # The coordinator is taken where we say: with it on a down broker the group cannot join.
    own_broker.set_coordinator("cg", broker_id=2)
    own_broker.set_down(2)
    c = _group_consumer(own_broker.bootstrap_servers, "cg")
    try:
        c.subscribe(["coord"])
        assert _consume(c, 1, timeout=2.5) == []
        own_broker.set_coordinator("cg", broker_id=3)
        got = _consume(c, 6, timeout=15)
        assert [m.value() for m in got] == [str(i).encode() for i in range(6)]
        c.commit(asynchronous=False)

        # moving it again while the member is in the group does not break it
        own_broker.set_up(2)
        own_broker.set_coordinator("cg", broker_id=2)
        for i in range(6, 9):
            p.produce("coord", value=str(i).encode(), partition=0)
        assert p.flush(10) == 0
        got = _consume(c, 3, timeout=15)
        assert [m.value() for m in got] == [b"6", b"7", b"8"]
        c.commit(asynchronous=False)
        assert c.committed([TopicPartition("coord", 0)], timeout=10)[0].offset == 9
    finally:
        c.close()


# --- argument checking -----------------------------------------------------------------------------
def test_unknown_names_raise_config_error(broker: EmbeddedBroker) -> None:
    with pytest.raises(ConfigError, match="api: unknown Kafka request name 'Heartbeet'") as ei:
        broker.push_request_errors("Heartbeet", "REBALANCE_IN_PROGRESS")
    assert "Heartbeat" in str(ei.value) and "JoinGroup" in str(ei.value)
    with pytest.raises(ConfigError, match=r"errors\[1\]: unknown Kafka error name 'NOT_AN_ERROR'") as ei:
        broker.push_request_errors("Heartbeat", "REBALANCE_IN_PROGRESS", "NOT_AN_ERROR")
    assert "UNKNOWN_MEMBER_ID" in str(ei.value)
    with pytest.raises(ConfigError, match="errors: give at least one"):
        broker.push_request_errors("Heartbeat")
    with pytest.raises(ConfigError, match="api"):
        broker.clear_request_errors(1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="error"):
        broker.set_topic_error("x", "BOGUS")
    assert isinstance(ConfigError("x"), ValueError)


def test_error_and_api_tables() -> None:
    codes = error_codes()
    assert codes["REBALANCE_IN_PROGRESS"] == 27
    assert codes["NOT_COORDINATOR"] == 16
    assert codes["UNKNOWN_MEMBER_ID"] == 25
    assert codes["REQUEST_TIMED_OUT"] == 7
    assert codes["NOT_LEADER_FOR_PARTITION"] == codes["NOT_LEADER_OR_FOLLOWER"] == 6
    assert codes["_TRANSPORT"] == KafkaError._TRANSPORT
    assert "_MSG_TIMED_OUT" not in codes  # client-side errors cannot be returned by a broker
    assert (API_KEYS["Produce"], API_KEYS["Fetch"], API_KEYS["Metadata"]) == (0, 1, 3)
    assert (API_KEYS["OffsetCommit"], API_KEYS["FindCoordinator"], API_KEYS["JoinGroup"]) == (8, 10, 11)
    assert (API_KEYS["Heartbeat"], API_KEYS["LeaveGroup"], API_KEYS["SyncGroup"]) == (12, 13, 14)


def test_bad_arguments_name_the_argument(broker: EmbeddedBroker) -> None:
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: broker.set_down(0), "broker_id"),
        (lambda: broker.set_up(4), "broker_id"),
        (lambda: broker.set_rtt(1, -5), "rtt_ms"),
        (lambda: broker.set_rtt(7, 5), "broker_id"),
        (lambda: broker.create_topic("neg", partitions=-1), "partitions"),
        (lambda: broker.create_topic("rf", partitions=1, replication_factor=4), "replication_factor"),
        (lambda: broker.create_topic("bad name!"), "name"),
        (lambda: broker.set_coordinator("g", broker_id=9), "broker_id"),
        (lambda: broker.set_coordinator("", broker_id=1), "group_id"),
        (lambda: broker.set_leader("never-created", 0, 1), "topic"),
        (lambda: EmbeddedBroker(0), "num_brokers"),
        (lambda: EmbeddedBroker(1, initial_rebalance_delay_ms=-1), "initial_rebalance_delay_ms"),
    ]
    for call, arg in cases:
        with pytest.raises(ConfigError, match=f"^{arg}:"):
            call()


def test_set_leader_and_lifecycle() -> None:
    b = EmbeddedBroker(num_brokers=2)
    assert not b.running
    with b as entered:
        assert entered is b and b.running
        b.create_topic("led", 2)
        with pytest.raises(ConfigError, match="partition"):
            b.set_leader("led", 2, 1)
        b.set_leader("led", 0, 2)
        p = _producer(b.bootstrap_servers)
        md = p.list_topics("led", timeout=10)
        assert md.topics["led"].partitions[0].leader == 2
    assert not b.running
    b.stop()  # idempotent
    with pytest.raises(IllegalStateError, match="stopped"):
        _ = b.bootstrap_servers
    with pytest.raises(IllegalStateError):
        b.create_topic("late")
    with pytest.raises(IllegalStateError):
        b.start()


# --- standalone process ----------------------------------------------------------------------------
def _readline(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no output from the broker process within {timeout}s"
    return proc.stdout.readline()


def test_standalone_process() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kipconsumer.broker",
            "--brokers",
            "2",
            "--topic",
            "events:4",
            "--topic",
            "other:2:2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        first = _readline(proc, timeout=15).decode()
        assert first.startswith("BOOTSTRAP=127.0.0.1:"), first
        bootstrap = first.strip().split("=", 1)[1]
        assert len(bootstrap.split(",")) == 2

        p = _producer(bootstrap)
        md = p.list_topics(timeout=10)
        assert len(md.topics["events"].partitions) == 4
        assert len(md.topics["other"].partitions) == 2
        assert _produce_one(p, "events", 3, b"hello") is None
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "standalone", **QUIET})
        c.assign([TopicPartition("events", 3, 0)])
        got = _consume(c, 1, timeout=10)
        c.close()
        assert [m.value() for m in got] == [b"hello"]

        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
        assert time.monotonic() - t0 < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_standalone_rejects_bad_topic_spec() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "kipconsumer.broker", "--topic", "events:six"],
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert b"--topic" in r.stderr and b"events:six" in r.stderr
    assert b"BOOTSTRAP=" not in r.stdout


_LIMIT_SCRIPT = """
import sys
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import ConfigError

def refused(call, arg, allowed):
    try:
        call()
    except ValueError as e:
        assert isinstance(e, ConfigError) and str(e).startswith(arg + ":") and allowed in str(e), e
        return
    raise AssertionError(f"accepted: {arg}")

with EmbeddedBroker(1) as b:
    refused(lambda: b.create_topic("huge", 2**31 - 1), "partitions", "1..100000")
    refused(lambda: b.create_topic("huge", 100_001), "partitions", "1..100000")
    refused(lambda: b.create_topic("nl\\n"), "name", "[A-Za-z0-9._-]")
    refused(lambda: b.set_topic_error("a\\x00b", "NO_ERROR"), "topic", "[A-Za-z0-9._-]")
    refused(lambda: b.set_coordinator("g\\x00h", 1), "group_id", "NUL")
    refused(lambda: b.set_rtt(1, 2**31), "rtt_ms", "0..2147483647")
    b.create_topic("big", 100_000)
refused(lambda: EmbeddedBroker(2**31 - 1), "num_brokers", "1..1000")
refused(lambda: EmbeddedBroker(1, initial_rebalance_delay_ms=2**31), "initial_rebalance_delay_ms",
        "0..2147483647")
print("OK")
"""


def test_argument_limits_refused_without_aborting() -> None:
    """Values the mock cannot take (it aborted the interpreter on 2**31 - 1 partitions or more
    brokers than free file descriptors) raise ConfigError (a ValueError) naming the argument."""
    r = subprocess.run([sys.executable, "-c", _LIMIT_SCRIPT], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "OK" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--brokers", "100000"], "--brokers: must be in 1..1000"),
        (["--topic", "t:2147483647"], "expected an int in 1..100000"),
        (["--initial-rebalance-delay-ms", "2147483648"], "--initial-rebalance-delay-ms"),
    ],
)
def test_standalone_rejects_out_of_range_arguments(args: list[str], needle: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "kipconsumer.broker", *args], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert needle in r.stderr and "BOOTSTRAP=" not in r.stdout


def test_more_brokers_than_free_file_descriptors_is_refused() -> None:
    """The mock aborted the process when it ran out of descriptors for the brokers' listeners."""
    import resource

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    r = subprocess.run(
        [sys.executable, "-m", "kipconsumer.broker", "--brokers", "500"],
        capture_output=True, text=True, timeout=30, preexec_fn=low_limit,
    )
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "free file descriptors" in r.stderr and "BOOTSTRAP=" not in r.stdout
