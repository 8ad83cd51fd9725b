"""One benchmark client per process: `python bench/workers.py CLIENT BOOTSTRAP TOPIC PARTITIONS RECORDS`.

Each client first gets the topic's metadata (untimed, as the Java peer's partitionsFor()), then
assigns every partition from offset 0 (no group; the Java peer's assign() + seek(tp, 0)), reads
RECORDS records, touches each value, and prints one JSON line: records, seconds (from the start of
the first poll that returned records to the last record), records_per_s, cpu_s, the same from
assign() on (seconds_from_assign, cpu_s_from_assign: the prefetch a client does before its first
record is inside that window, as it is for the Java client, which fetches inside poll(); the Java
peer reports both the same way), and per-poll latency percentiles where the client polls in
batches (those include polls that wait for the broker when the client outruns the fetcher).

confluent-kafka runs twice: at its defaults (`confluent-consume500`) and like for like
(`confluent-consume500-tuned`: the librdkafka fetch settings kipconsumer emits by default, read from
kipconsumer's own config resolution, so the two run the same fetch pipeline).

The `*-latency` clients measure what the issue's latency target names, a poll of 500
buffered records: ROUNDS times, they stop polling for PAUSE_S (the client prefetches), then
time up to POLLS_PER_ROUND polls of 500, which the prefetched records serve; they print
buffered_p50_us / buffered_p99_us / buffered_max_us over all timed polls, and first_max_us /
first_p50_us over the first timed poll of each round (the first poll after a pause), and
slow_polls (timed polls over 0.5 ms) with how many of them took a page fault, blocked or were
preempted ($KIP_BENCH_LATENCY_ROUNDS=30 for more rounds).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def _summary(got: int, t0: float, cpu0: float, lat: list[float], t_assign: float,
             cpu_assign: float) -> dict[str, float]:
    end, cpu_end = time.perf_counter(), time.process_time()  # every thread, librdkafka's included
    secs = end - t0
    out: dict[str, float] = {"records": got, "seconds": secs, "records_per_s": got / secs,
                             "cpu_s": cpu_end - cpu0, "seconds_from_assign": end - t_assign,
                             "cpu_s_from_assign": cpu_end - cpu_assign}
    if lat:
        lat.sort()
        out["poll_p50_us"] = lat[len(lat) // 2] * 1e6
        out["poll_p99_us"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6
    return out


def kipconsumer_settings() -> dict[str, Any]:
    """Extra kipconsumer settings from $KIP_BENCH_KIPCONSUMER (a JSON object), for comparing
    configurations with the same harness, e.g. '{"poll.prefetch.thread": true}'."""
    raw = os.environ.get("KIP_BENCH_KIPCONSUMER", "")
    return dict(json.loads(raw)) if raw else {}


def _kipconsumer_new(bootstrap: str, topic: str) -> Any:
    """A kipconsumer consumer (no group) that has the topic's metadata: what the Java peer has
    before its clock starts (it calls partitionsFor())."""
    from kipconsumer import KafkaConsumer

    c = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "max.poll.records": 500,
            **kipconsumer_settings(),
        }
    )
    c.partitions_for(topic, timeout=30)
    return c


def _kipconsumer_assign(c: Any, topic: str, partitions: int) -> None:
    """Every partition from offset 0, as the Java peer's assign() + seek(tp, 0)."""
    from kipconsumer import TopicPartition

    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    for tp in tps:
        c.seek(tp, 0)


def _kipconsumer(bootstrap: str, topic: str, partitions: int) -> Any:
    """A kipconsumer consumer assigned every partition from offset 0 (no group)."""
    c = _kipconsumer_new(bootstrap, topic)
    _kipconsumer_assign(c, topic, partitions)
    return c


#: The librdkafka settings of kipconsumer's fetch pipeline that differ from librdkafka's defaults.
LIKE_FOR_LIKE_KEYS = ("fetch.queue.backoff.ms", "queued.max.messages.kbytes", "queued.min.messages",
                      "fetch.wait.max.ms", "fetch.max.bytes", "fetch.message.max.bytes", "fetch.min.bytes")


def like_for_like_settings(bootstrap: str) -> dict[str, str]:
    """The fetch settings kipconsumer gives librdkafka by default (max.poll.records 500), as
    kipconsumer's config resolution emits them: what confluent-kafka gets to run like for like."""
    from kipconsumer.config import consumer_settings

    rd = consumer_settings({"bootstrap.servers": bootstrap, "max.poll.records": 500}).rdkafka
    return {k: str(rd[k]) for k in LIKE_FOR_LIKE_KEYS if k in rd}


def _confluent_new(bootstrap: str, topic: str, tuned: bool = False) -> Any:
    """A confluent-kafka consumer (no group) that has the topic's metadata (as _kipconsumer_new);
    `tuned` gives it kipconsumer's fetch settings (like_for_like_settings)."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.partition.eof": False,
            "enable.auto.commit": False,
            **(like_for_like_settings(bootstrap) if tuned else {}),
        }
    )
    c.list_topics(topic, timeout=30)
    return c


def _confluent_assign(c: Any, topic: str, partitions: int) -> None:
    """Every partition from offset 0, as the Java peer's assign() + seek(tp, 0)."""
    from confluent_kafka import TopicPartition

    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])


def _confluent(bootstrap: str, topic: str, partitions: int, tuned: bool = False) -> Any:
    """A confluent-kafka consumer assigned every partition from offset 0 (no group)."""
    c = _confluent_new(bootstrap, topic, tuned)
    _confluent_assign(c, topic, partitions)
    return c


def kipconsumer_client(mode: str) -> Callable[[str, str, int, int], dict[str, float]]:
    def run(bootstrap: str, topic: str, partitions: int, want: int) -> dict[str, float]:
        if mode == "arrow":
            # An application imports pyarrow at start, not inside the timed loop. pyarrow imports numpy,
            # whose OpenBLAS thread pool busy-waits for ~0.1 s after the import: that spin (no BLAS runs
            # here) would land in the timed window of a short run and be counted as the client's CPU.
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
            import pyarrow  # noqa: F401
        c = _kipconsumer_new(bootstrap, topic)
        t_assign, cpu_assign = time.perf_counter(), time.process_time()
        _kipconsumer_assign(c, topic, partitions)
        got, t0, cpu0, lat = 0, 0.0, 0.0, []
        deadline = time.monotonic() + 120
        while got < want and time.monotonic() < deadline:
            s = time.perf_counter()
            records = c.poll(0.1)
            e = time.perf_counter()
            if not records:
                continue
            if not t0:
                t0, cpu0 = s, time.process_time()
            lat.append(e - s)
            if mode == "arrow":
                batch = records.to_arrow()
                got += batch.num_rows
            else:
                for r in records:
                    _ = r.value
                    got += 1
        out = _summary(got, t0, cpu0, lat, t_assign, cpu_assign)  # before close(), as raw C and Java
        c.close()
        return out

    return run


def confluent_client(tuned: bool) -> Callable[[str, str, int, int], dict[str, float]]:
    def run(bootstrap: str, topic: str, partitions: int, want: int) -> dict[str, float]:
        c = _confluent_new(bootstrap, topic, tuned)
        t_assign, cpu_assign = time.perf_counter(), time.process_time()
        _confluent_assign(c, topic, partitions)
        got, t0, cpu0, lat = 0, 0.0, 0.0, []
        deadline = time.monotonic() + 120
        while got < want and time.monotonic() < deadline:
            s = time.perf_counter()
            msgs = c.consume(num_messages=500, timeout=0.1)
            e = time.perf_counter()
            if not msgs:
                continue
            if not t0:
                t0, cpu0 = s, time.process_time()
            lat.append(e - s)
            for m in msgs:
                if m.error() is None:
                    _ = m.value()
                    got += 1
        out = _summary(got, t0, cpu0, lat, t_assign, cpu_assign)  # before close(), as raw C and Java
        c.close()
        return out

    return run


#: $KIP_BENCH_LATENCY_ROUNDS raises the rounds (a steadier maximum; 30 found the first poll's tail).
ROUNDS = int(os.environ.get("KIP_BENCH_LATENCY_ROUNDS", "10"))
PAUSE_S, POLLS_PER_ROUND = 1.0, 100
#: A timed poll slower than this is counted in slow_polls, with what getrusage saw around it.
SLOW_POLL_S = 0.0005


class _ThreadUsage:
    """Counts the slow timed polls and, of those, the ones during which the polling thread took a page
    fault, blocked (a voluntary context switch: a lock, a wait) or was preempted (an involuntary one):
    a slow poll with none of the three was busy on its own CPU. getrusage() runs outside the timed
    window."""

    def __init__(self) -> None:
        import resource

        self._getrusage = resource.getrusage
        self._who = resource.RUSAGE_THREAD
        self.slow = {"slow_polls": 0, "slow_with_page_faults": 0, "slow_blocked": 0, "slow_preempted": 0}
        self._before = self._getrusage(self._who)

    def start(self) -> None:
        self._before = self._getrusage(self._who)

    def done(self, seconds: float) -> None:
        if seconds <= SLOW_POLL_S:
            return
        a, b = self._before, self._getrusage(self._who)
        self.slow["slow_polls"] += 1
        self.slow["slow_with_page_faults"] += (b.ru_minflt - a.ru_minflt + b.ru_majflt - a.ru_majflt) > 0
        self.slow["slow_blocked"] += (b.ru_nvcsw - a.ru_nvcsw) > 0
        self.slow["slow_preempted"] += (b.ru_nivcsw - a.ru_nivcsw) > 0


def _polls_per_round(want: int) -> int:
    """Timed polls per round so that every one finds 500 records (the topic holds `want`)."""
    return max(1, min(POLLS_PER_ROUND, want // (ROUNDS * 500) - 1))


def _buffered_summary(lat: list[float], got: int, per_round: int, usage: _ThreadUsage) -> dict[str, float]:
    first = sorted(lat[::per_round])  # the first timed poll of each round: right after the pause
    lat = sorted(lat)
    return {
        **usage.slow,
        "records": got,
        "polls": len(lat),
        "buffered_p50_us": lat[len(lat) // 2] * 1e6,
        "buffered_p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6,
        "buffered_max_us": lat[-1] * 1e6,
        "first_p50_us": first[len(first) // 2] * 1e6,
        "first_max_us": first[-1] * 1e6,
    }


def _settled() -> None:
    """Collects the start-up's garbage (imports, the client's construction) before the timed rounds,
    as in an application that has run for a while: otherwise the process's first full collection of
    its young generations (1-2 ms here) lands in whichever timed call allocates when it is due. Done
    for every Python client alike; the Java client's figures come from a warm second pass."""
    gc.collect()


def kipconsumer_latency(bootstrap: str, topic: str, partitions: int, want: int) -> dict[str, float]:
    c = _kipconsumer(bootstrap, topic, partitions)
    _settled()
    lat: list[float] = []
    usage = _ThreadUsage()
    got = 0
    records = None
    for _ in range(ROUNDS):
        time.sleep(PAUSE_S)
        for _ in range(_polls_per_round(want)):
            del records  # released before the timed call: the figure is poll()'s own time
            usage.start()
            s = time.perf_counter()
            records = c.poll(1.0)
            lat.append(time.perf_counter() - s)
            usage.done(lat[-1])
            for r in records:
                _ = r.value
                got += 1
            r = None
    c.close()
    return _buffered_summary(lat, got, _polls_per_round(want), usage)


def confluent_latency(bootstrap: str, topic: str, partitions: int, want: int) -> dict[str, float]:
    c = _confluent(bootstrap, topic, partitions)
    _settled()
    lat: list[float] = []
    usage = _ThreadUsage()
    got = 0
    msgs: list = []
    for _ in range(ROUNDS):
        time.sleep(PAUSE_S)
        for _ in range(_polls_per_round(want)):
            del msgs
            usage.start()
            s = time.perf_counter()
            msgs = c.consume(num_messages=500, timeout=1.0)
            lat.append(time.perf_counter() - s)
            usage.done(lat[-1])
            for m in msgs:
                if m.error() is None:
                    _ = m.value()
                    got += 1
            m = None
    c.close()
    return _buffered_summary(lat, got, _polls_per_round(want), usage)


CLIENTS: dict[str, Callable[[str, str, int, int], dict[str, float]]] = {
    "kipconsumer-iter": kipconsumer_client("iter"),
    "kipconsumer-arrow": kipconsumer_client("arrow"),
    "confluent-consume500": confluent_client(tuned=False),
    "confluent-consume500-tuned": confluent_client(tuned=True),
    "kipconsumer-latency": kipconsumer_latency,
    "confluent-latency": confluent_latency,
}

if __name__ == "__main__":
    name, bootstrap, topic, partitions, records = sys.argv[1:6]
    print(json.dumps(CLIENTS[name](bootstrap, topic, int(partitions), int(records))))
