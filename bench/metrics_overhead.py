"""The cost of a registered metrics exporter on the poll loop (issue #40 item 4; docs/metrics.md).

Fills a topic of the embedded broker, then reads it with a ``poll(0)`` loop three times each way:
without a collector, and with a ``KipconsumerCollector`` that holds the consumer and is scraped from
another thread every ``--scrape-ms``. Prints the CPU and wall time per ``poll()`` and per record. Not
an assertion: the exporter reads ``metrics()`` at scrape time only, so the difference is the scrapes'
own CPU on a shared machine.

    python bench/metrics_overhead.py --records 300000
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.broker import EmbeddedBroker

PARTITIONS = 12  # the mock keeps ~5 MiB a partition


def _read(bootstrap: str, topic: str, records: int, collector: object | None,
          scrape_ms: int) -> tuple[float, float, int]:
    c = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"g{time.monotonic_ns()}",
                       "max.poll.records": 100, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    stop = threading.Event()
    scraper = None
    scrapes = [0]
    if collector is not None:
        collector.register_client(c)  # type: ignore[attr-defined]

        def scrape() -> None:
            while not stop.wait(scrape_ms / 1000):
                list(collector.collect())  # type: ignore[attr-defined]
                scrapes[0] += 1

        scraper = threading.Thread(target=scrape)
        scraper.start()
    while not c.metrics()["buffered_records"]:  # the first fetch is not the loop's cost
        c.poll(0.05)
    before = c.metrics()["records_returned"]
    n, polls = before, 0
    t0, c0 = time.perf_counter(), time.thread_time()
    deadline = time.monotonic() + 120
    while n < records:
        n += len(c.poll(0))
        polls += 1
        if polls % 1000 == 0 and time.monotonic() > deadline:
            raise RuntimeError(f"only {n} of {records} records read in 120 s")
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    stop.set()
    if scraper is not None:
        scraper.join()
    c.close()
    return wall, cpu, polls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scrape-ms", type=int, default=100)
    a = ap.parse_args()
    try:
        from kipconsumer.metrics.prometheus import KipconsumerCollector
    except ImportError:  # a build before kipconsumer.metrics: the poll loop alone, for comparison
        KipconsumerCollector = None  # type: ignore[assignment,misc]  # noqa: N806

    with EmbeddedBroker(1) as b:
        b.create_topic("m", PARTITIONS)
        with KafkaProducer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 20}) as p:
            for i in range(a.records):
                p.send("m", b"x" * 100, partition=i % PARTITIONS)
            p.flush()
        rows: dict[str, list[tuple[float, float, int]]] = {"no collector": [], "collector + scrapes": []}
        for _ in range(a.repeat):  # interleaved, so machine noise hits both
            rows["no collector"].append(_read(b.bootstrap_servers, "m", a.records, None, a.scrape_ms))
            if KipconsumerCollector is not None:
                rows["collector + scrapes"].append(
                    _read(b.bootstrap_servers, "m", a.records, KipconsumerCollector(None), a.scrape_ms))
    print(f"{a.records} records of 100 B, max.poll.records=100, poll(0) loop, scrape every {a.scrape_ms} ms")
    for name, runs in rows.items():
        if not runs:
            continue
        per_rec = [cpu / a.records * 1e9 for _, cpu, _ in runs]
        wall_rec = [w / a.records * 1e9 for w, _, _ in runs]
        per_poll = [cpu / polls * 1e9 for _, cpu, polls in runs]
        runs_text = ", ".join(f"{x:.0f}" for x in per_rec)
        print(f"{name:22s} poll-thread CPU/record median {statistics.median(per_rec):5.0f} ns "
              f"(runs {runs_text}), wall/record {statistics.median(wall_rec):5.0f} ns, "
              f"CPU/poll {statistics.median(per_poll):6.0f} ns")

if __name__ == "__main__":
    main()
