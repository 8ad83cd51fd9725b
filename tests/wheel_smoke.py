"""Smoke test of an installed kipconsumer, run inside a fresh venv on the interpreter under test.

Run by tests/test_packaging.py and ``scripts/build_wheels.py --test`` from a directory where no
checkout is importable. Checks what a new user does first, with only the wheel (and pyarrow, when
it installs on this interpreter) installed:

- the package, its typing files and its carried librdkafka are the installed ones; the librdkafka
  mapped into the process is the one in ``kipconsumer/_native_libs/`` and confluent-kafka is not
  needed; the licence texts of that library are there;
- on an embedded broker: producer futures resolve at their offsets, a group of two consumers reads
  every record exactly once (``kipconsumer.demo``), ``to_arrow()`` batches hold every record, a
  commit reads back, the asyncio consumer and producer round-trip, a ``Pipeline`` processes every
  input, a share consumer receives every record, and Ctrl+C during ``poll()`` raises
  ``KeyboardInterrupt`` within a second;
- with ``--kafka-bootstrap`` and ``--kafka-topic`` (a topic of 3 partitions on real Apache Kafka,
  created by the caller): a produce and a consume in a group, exactly once, with a commit.

Prints ``wheel smoke: ok ...`` (what ran, and ``pyarrow none`` when it is not installed) and exits 0,
or raises.

    python wheel_smoke.py EXPECTED_VERSION [--kafka-bootstrap HOST:PORT --kafka-topic TOPIC]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import importlib.util
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any


def check_install(expected_version: str) -> tuple[str, Path]:
    import kipconsumer

    pkg = Path(kipconsumer.__file__).parent
    assert "site-packages" in str(pkg), f"kipconsumer imported from {pkg}, not from the installed wheel"
    assert kipconsumer.__version__ == importlib.metadata.version("kipconsumer") == expected_version, (
        kipconsumer.__version__, importlib.metadata.version("kipconsumer"), expected_version)
    assert (pkg / "py.typed").exists() and list(pkg.glob("*.pyi")), "py.typed / .pyi stubs missing"
    assert not list(pkg.glob("*.pyx")) and not list(pkg.glob("*.pxd")), "build sources shipped in the wheel"
    carried = sorted((pkg / "_native_libs").glob("librdkafka*.so*"))
    assert len(carried) == 1, f"the wheel carries no single librdkafka: {carried}"
    licences = (pkg / "_native_libs" / "LICENSES-librdkafka.txt").read_text()
    assert "librdkafka" in licences and "OpenSSL" in licences, "licence texts missing"
    maps = Path("/proc/self/maps").read_text().splitlines()
    mapped = {line.split()[-1] for line in maps if "librdkafka" in line}
    assert mapped == {str(carried[0])}, f"librdkafka mapped from {mapped}, not the carried {carried[0]}"
    assert "confluent_kafka" not in sys.modules
    return kipconsumer.librdkafka_version()[0], pkg


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    from kipconsumer import KafkaProducer

    with KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 1}) as producer:
        futures = [producer.send(topic, value=b"v%d" % i, partition=i % partitions) for i in range(n)]
        producer.flush(30)
    offsets = sorted((md.partition, md.offset) for md in (f.result(30) for f in futures))
    per = n // partitions
    assert offsets == sorted((p, o) for p in range(partitions) for o in range(per)), offsets[:5]


def consume_assigned(bootstrap: str, topic: str, n: int, arrow: bool) -> None:
    """assign() + poll(): every record once (as Arrow batches when pyarrow is there), a commit reads back."""
    from kipconsumer import KafkaConsumer, OffsetAndMetadata, TopicPartition

    conf = {"bootstrap.servers": bootstrap, "group.id": "smoke", "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    consumer = KafkaConsumer(conf)
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    seen: set[tuple[int, int]] = set()
    deadline = time.monotonic() + 60
    while len(seen) < n and time.monotonic() < deadline:
        records = consumer.poll(1.0)
        if arrow and len(records):
            batch = records.to_arrow()
            assert batch.num_rows == len(records)
            assert batch.column("value").to_pylist() == [r.value for r in records]
        seen.update((r.partition, r.offset) for r in records)
    assert len(seen) == n, len(seen)
    tp = TopicPartition(topic, 1)
    consumer.commit_sync({tp: OffsetAndMetadata(42)})
    committed = consumer.committed([tp])[tp]
    assert committed is not None and committed.offset == 42, committed
    consumer.close()


def consume_in_group(bootstrap: str, topic: str, n: int, group: str, timeout: float = 90.0) -> None:
    """subscribe() in a group: every record exactly once, then commit_sync() and committed() agree."""
    from kipconsumer import KafkaConsumer, TopicPartition

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    consumer = KafkaConsumer(conf)
    consumer.subscribe([topic])
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += [(r.partition, r.offset) for r in consumer.poll(1.0)]
    assert len(got) == len(set(got)) == n, (len(got), len(set(got)), n)
    consumer.commit_sync()
    committed = consumer.committed([TopicPartition(topic, p) for p in range(3)])
    assert sum(om.offset for om in committed.values() if om is not None) == n, committed
    consumer.close()


def check_asyncio(bootstrap: str) -> None:
    from kipconsumer.aio import AsyncKafkaConsumer, AsyncKafkaProducer

    async def roundtrip() -> int:
        async with AsyncKafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 1}) as p:
            mds = await asyncio.gather(*(p.send("aio", value=b"a%d" % i) for i in range(100)))
            assert len({(md.partition, md.offset) for md in mds}) == 100
        conf = {"bootstrap.servers": bootstrap, "group.id": "aio", "auto.offset.reset": "earliest",
                "enable.auto.commit": False}
        got = 0
        async with AsyncKafkaConsumer(conf) as c:
            c.subscribe(["aio"])
            deadline = time.monotonic() + 60
            while got < 100 and time.monotonic() < deadline:
                got += len(await c.poll(timeout=1.0))
            await c.commit()
        return got

    assert asyncio.run(roundtrip()) == 100


def check_pipeline(bootstrap: str) -> None:
    from kipconsumer import ConsumerRecord, TopicPartition
    from kipconsumer.streams import Pipeline

    def shout(record: ConsumerRecord) -> Any:
        yield record.key, (record.value or b"").upper()

    config = {"bootstrap.servers": bootstrap, "group.id": "smoke-pipeline", "commit.interval.ms": 200,
              "auto.offset.reset": "earliest"}
    sources = [TopicPartition("smoke", p) for p in range(3)]
    with Pipeline(config, "smoke", shout, "shouted") as pipeline:

        def done() -> bool:
            parts = pipeline.metrics()["partitions"]
            return sum(int(parts[tp]["committed"]) for tp in sources if tp in parts) >= 300

        pipeline.run(until=done, timeout=60)
        m = pipeline.metrics()
    assert m["records_processed"] == 300 and m["outputs_acked"] == 300, m


def check_share_consumer() -> None:
    from kipconsumer import KafkaProducer, KafkaShareConsumer
    from kipconsumer.broker import EmbeddedBroker

    with EmbeddedBroker(num_brokers=1) as b:
        b.configure_share_groups(auto_offset_reset="earliest", record_lock_duration_ms=1000,
                                 heartbeat_interval_ms=500)
        b.create_topic("jobs", 2)
        with KafkaProducer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0}) as p:
            for i in range(20):
                p.send("jobs", value=b"%d" % i, partition=i % 2).result(10)
        conf = {"bootstrap.servers": b.bootstrap_servers, "group.id": "sg"}
        with KafkaShareConsumer(conf) as c:
            c.subscribe(["jobs"])
            got: set[tuple[int, int]] = set()
            deadline = time.monotonic() + 60
            while len(got) < 20 and time.monotonic() < deadline:
                got.update((r.partition, r.offset) for r in c.poll(0.5))
        assert got == {(i % 2, i // 2) for i in range(20)}, sorted(got)


def check_ctrl_c_during_poll(bootstrap: str) -> float:
    """SIGINT while poll(10) waits on an empty partition: KeyboardInterrupt, within a second."""
    from kipconsumer import KafkaConsumer, TopicPartition

    signal.signal(signal.SIGINT, signal.default_int_handler)
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "ctrl-c"})
    consumer.assign([TopicPartition("empty", 0)])
    main = threading.get_ident()
    timer = threading.Timer(0.5, lambda: signal.pthread_kill(main, signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        consumer.poll(10.0)
        raise AssertionError("poll(10) returned instead of raising KeyboardInterrupt")
    except KeyboardInterrupt:
        waited = time.monotonic() - started - 0.5
    finally:
        timer.cancel()
        consumer.close()
    assert waited < 1.0, f"KeyboardInterrupt {waited:.2f} s after SIGINT"
    return waited


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("expected_version")
    ap.add_argument("--kafka-bootstrap")
    ap.add_argument("--kafka-topic")
    args = ap.parse_args(argv)

    rdk_version, _ = check_install(args.expected_version)
    arrow = importlib.util.find_spec("pyarrow") is not None
    from kipconsumer.broker import EmbeddedBroker
    from kipconsumer.demo import main as demo_main

    with EmbeddedBroker(num_brokers=1) as broker:
        for topic in ("smoke", "shouted", "aio", "empty"):
            broker.create_topic(topic, partitions=3)
        produce(broker.bootstrap_servers, "smoke", 300, 3)
        consume_assigned(broker.bootstrap_servers, "smoke", 300, arrow)
        check_asyncio(broker.bootstrap_servers)
        check_pipeline(broker.bootstrap_servers)
        waited = check_ctrl_c_during_poll(broker.bootstrap_servers)
    check_share_consumer()
    # A group of two consumers, every record exactly once (the main job's first half).
    status = demo_main(["--records", "6000", "--partitions", "4", "--consumers", "2"])
    assert status == 0, f"kipconsumer.demo exited {status}"
    ran = ["embedded", "group", "asyncio", "pipeline", "share", f"ctrl-c {waited * 1000:.0f} ms"]
    if args.kafka_bootstrap:
        produce(args.kafka_bootstrap, args.kafka_topic, 3000, 3)
        consume_in_group(args.kafka_bootstrap, args.kafka_topic, 3000, f"smoke-{os.getpid()}")
        ran.append("kafka")
    pyarrow = importlib.metadata.version("pyarrow") if arrow else "none"
    print(f"wheel smoke: ok kipconsumer {args.expected_version} librdkafka {rdk_version} "
          f"Python {sys.version.split()[0]} pyarrow {pyarrow} ran {', '.join(ran)} cwd {os.getcwd()}")


if __name__ == "__main__":
    main(sys.argv[1:])
