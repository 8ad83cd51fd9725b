"""An asyncio service: consume, process with `await`, produce, commit (kipconsumer.aio).

    python examples/aio_service.py            # against an embedded broker it starts itself

Reads "orders", awaits a (simulated) enrichment call per record, writes "enriched" with the same
key, and commits after the outputs of each poll are acknowledged: at-least-once, every input
either committed after its output exists or re-read after a restart.
"""

from __future__ import annotations

import asyncio

from kipconsumer import KafkaProducer
from kipconsumer.aio import AsyncKafkaConsumer, AsyncKafkaProducer
from kipconsumer.broker import EmbeddedBroker


async def enrich(value: bytes) -> bytes:
    await asyncio.sleep(0)  # stands for an HTTP call, a database query, ...
    return value.upper()


async def service(bootstrap: str, stop_after: int) -> int:
    done = 0
    consumer_conf = {"bootstrap.servers": bootstrap, "group.id": "enricher", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "max.poll.records": 500}
    async with AsyncKafkaConsumer(consumer_conf) as consumer, \
            AsyncKafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        consumer.subscribe(["orders"])
        while done < stop_after:
            records = await consumer.poll(timeout=1.0)
            if not records:
                continue
            values = await asyncio.gather(*(enrich(r.value) for r in records))
            # outputs first, then the inputs' offsets: a crash in between re-reads, never loses
            await asyncio.gather(*(producer.send("enriched", key=r.key, value=v)
                                   for r, v in zip(records, values, strict=True)))
            await consumer.commit()
            done += len(records)
    return done


def main() -> None:
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.create_topic("orders", 3)
        broker.create_topic("enriched", 3)
        with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers}) as p:
            for i in range(3000):
                p.send("orders", key=b"%d" % i, value=b"order-%d" % i)
        n = asyncio.run(service(broker.bootstrap_servers, 3000))
        print(f"enriched {n} records")


if __name__ == "__main__":
    main()
