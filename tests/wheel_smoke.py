"""Smoke test of an installed kipconsumer (run by tests/test_wheels.py inside a fresh venv).

Runs from a directory where no checkout is importable and checks what a new user does first:
the package and its typing files are the installed ones, the version matches the wheel, the
embedded broker starts, producer futures resolve, a group of two consumers reads every record
exactly once (``kipconsumer.demo``), ``to_arrow()`` builds a batch and a commit is read back.
Prints ``wheel smoke: ok ...`` and exits 0, or raises.

    python wheel_smoke.py EXPECTED_VERSION
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path


def main(expected_version: str) -> None:
    import kipconsumer
    from kipconsumer import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
    from kipconsumer.broker import EmbeddedBroker
    from kipconsumer.demo import main as demo_main

    pkg = Path(kipconsumer.__file__).parent
    assert "site-packages" in str(pkg), f"kipconsumer imported from {pkg}, not from the installed wheel"
    assert kipconsumer.__version__ == importlib.metadata.version("kipconsumer") == expected_version, (
        kipconsumer.__version__, importlib.metadata.version("kipconsumer"), expected_version)
    assert (pkg / "py.typed").exists() and list(pkg.glob("*.pyi")), "py.typed / .pyi stubs missing"
    assert not list(pkg.glob("*.pyx")) and not list(pkg.glob("*.pxd")), "build sources shipped in the wheel"
    rdk_version, _ = kipconsumer.librdkafka_version()

    with EmbeddedBroker(num_brokers=1) as broker:
        broker.create_topic("smoke", partitions=3)
        with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 1}) as producer:
            futures = [producer.send("smoke", value=b"v%d" % i, partition=i % 3) for i in range(300)]
            producer.flush()
        offsets = sorted((md.partition, md.offset) for md in (f.result(10) for f in futures))
        assert offsets == sorted((p, o) for p in range(3) for o in range(100)), offsets[:5]

        conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": "smoke",
                "auto.offset.reset": "earliest", "enable.auto.commit": False}
        consumer = KafkaConsumer(conf)
        consumer.assign([TopicPartition("smoke", p) for p in range(3)])
        rows = 0
        for _ in range(50):
            records = consumer.poll(1.0)
            if len(records):
                batch = records.to_arrow()
                assert batch.num_rows == len(records)
                rows += batch.num_rows
            if rows >= 300:
                break
        assert rows == 300, rows
        tp = TopicPartition("smoke", 1)
        consumer.commit_sync({tp: OffsetAndMetadata(42)})
        committed = consumer.committed([tp])[tp]
        assert committed is not None and committed.offset == 42, committed
        consumer.close()

    # A group of two consumers, every record exactly once (the main job's first half).
    status = demo_main(["--records", "6000", "--partitions", "4", "--consumers", "2"])
    assert status == 0, f"kipconsumer.demo exited {status}"
    print(f"wheel smoke: ok kipconsumer {kipconsumer.__version__} librdkafka {rdk_version} "
          f"confluent-kafka {importlib.metadata.version('confluent-kafka')} Python {sys.version.split()[0]} "
          f"cwd {os.getcwd()}")


if __name__ == "__main__":
    main(sys.argv[1])
