"""A KIP-572 stream pipeline on the embedded broker: uppercase every value of a topic into another.

Run ``python examples/pipeline.py``: it starts an EmbeddedBroker, fills ``words`` (3 partitions) with
records, runs a :class:`kipconsumer.streams.Pipeline` that writes each value uppercased to ``shouted``
until every input offset is committed, prints a summary and exits 0. See docs/tasks.md.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

from kipconsumer import ConsumerRecord, KafkaProducer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.streams import Output, Pipeline

PARTITIONS = 3
RECORDS = 3_000


def shout(record: ConsumerRecord) -> Iterator[Output]:
    """process(): one output per input, the value uppercased, the key kept."""
    yield record.key, (record.value or b"").upper()


def main() -> int:
    with EmbeddedBroker(num_brokers=3) as broker:
        broker.create_topic("words", partitions=PARTITIONS)
        broker.create_topic("shouted", partitions=PARTITIONS)
        with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers}) as producer:
            for i in range(RECORDS):
                producer.send("words", value=f"word number {i}".encode(), key=str(i),
                              partition=i % PARTITIONS)
            producer.flush(30)

        config = {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "example-pipeline",
            "session.timeout.ms": 10_000,      # consumer: how fast a dead member is noticed
            "heartbeat.interval.ms": 1_000,
            "max.poll.interval.ms": 30_000,    # consumer: longest gap between two poll() calls
            "task.timeout.ms": 20_000,         # executor: how long one partition may keep timing out
            "delivery.timeout.ms": 5_000,      # producer: when an output's send counts as timed out
            "request.timeout.ms": 2_000,
            "commit.interval.ms": 200,
        }
        started = time.monotonic()
        with Pipeline(config, "words", shout, "shouted") as pipeline:
            sources = [TopicPartition("words", p) for p in range(PARTITIONS)]

            def done() -> bool:
                parts = pipeline.metrics()["partitions"]
                return sum(int(parts[tp]["committed"]) for tp in sources if tp in parts) >= RECORDS

            pipeline.run(until=done, timeout=60)
            m = pipeline.metrics()
        elapsed = time.monotonic() - started
        print(f"processed {m['records_processed']} records, {m['outputs_acked']} outputs acknowledged, "
              f"{m['commits']} commits, {m['stalls']} stalls in {elapsed:.2f} s")
        for tp, p in sorted(m["partitions"].items()):
            print(f"  {tp.topic}-{tp.partition}: processed={p['processed']} committed={p['committed']}")
        ok = m["records_processed"] == RECORDS and m["outputs_acked"] == RECORDS
        print("OK" if ok else "INCOMPLETE")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
