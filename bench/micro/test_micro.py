"""pytest-benchmark micro-benchmarks of kipconsumer's native pieces, no external broker.

    .venv/bin/python -m pytest bench/micro -q -p no:cacheprovider [--benchmark-only] [--benchmark-json OUT]

Record materialization and to_arrow() need real librdkafka messages: one EmbeddedBroker (in this
process) per session, one topic of 500 records (16 B keys, 100 B values, 4 partitions); one poll()
fetches a batch of 500 that every benchmark then reuses (iterating or converting a ConsumerRecords
does not consume it). Futures completion: send() of 2000 records to the same EmbeddedBroker and flush(),
every future checked. The fetch-buffer drain (kc_fb_drain) and the Arrow build (kc_arrow_build_ex) are
plain C: bench/micro/fetch_buffer_bench.c and arrow_batch_bench.c are compiled (skipped without a C
compiler) and their figures stored in the benchmark's extra_info; the timed quantity there is one whole
run of the C program.
Not part of the test suite (testpaths = tests); no timing is asserted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytest_benchmark")

from kipconsumer import KafkaConsumer, TopicPartition  # noqa: E402
from kipconsumer.broker import EmbeddedBroker  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
N = 500


@pytest.fixture(scope="session")
def micro_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(num_brokers=1) as b:
        yield b


@pytest.fixture(scope="session")
def batch(micro_broker: EmbeddedBroker) -> Iterator[Any]:
    from confluent_kafka import Producer

    topic = f"micro-{os.getpid()}"
    micro_broker.create_topic(topic, partitions=4)
    p = Producer({"bootstrap.servers": micro_broker.bootstrap_servers, "linger.ms": 5})
    for i in range(N):
        p.produce(topic, key=b"k%015d" % i, value=b"v" * 100, partition=i % 4)
    assert p.flush(30) == 0
    c = KafkaConsumer(
        {
            "bootstrap.servers": micro_broker.bootstrap_servers,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "max.poll.records": N,
        }
    )
    c.assign([TopicPartition(topic, i) for i in range(4)])
    got = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        recs = c.poll(0.5)
        if len(recs) == N:
            got = recs
            break
        if len(recs):  # not one full batch yet: start over from the beginning
            for i in range(4):
                c.seek(TopicPartition(topic, i), 0)
    if got is None:
        pytest.skip("could not fetch one full batch of 500 records from the EmbeddedBroker")
    yield got
    c.close()


def test_iterate_values(benchmark: Any, batch: Any) -> None:
    def run() -> int:
        n = 0
        for r in batch:
            _ = r.value
            n += 1
        return n

    assert benchmark(run) == N


def test_iterate_all_fields(benchmark: Any, batch: Any) -> None:
    def run() -> int:
        n = 0
        for r in batch:
            _ = (r.topic, r.partition, r.offset, r.key, r.value, r.timestamp)
            n += 1
        return n

    assert benchmark(run) == N


def test_records_by_partition(benchmark: Any, batch: Any) -> None:
    def run() -> int:
        return sum(len(batch.records(tp)) for tp in batch.partitions())

    assert benchmark(run) == N


def test_to_arrow(benchmark: Any, batch: Any) -> None:
    pytest.importorskip("pyarrow")
    rb = benchmark(batch.to_arrow)
    assert rb.num_rows == N


def test_futures_completion(benchmark: Any, micro_broker: EmbeddedBroker) -> None:
    from kipconsumer.producer import KafkaProducer

    topic = f"micro-produce-{os.getpid()}"
    micro_broker.create_topic(topic, partitions=4)
    p = KafkaProducer({"bootstrap.servers": micro_broker.bootstrap_servers, "linger.ms": 1})
    p.send(topic, b"warm-up").result(30)
    payload = b"x" * 100

    def run() -> int:
        futs = [p.send(topic, payload) for _ in range(2000)]
        p.flush(60)
        return sum(1 for f in futs if f.exception(0) is None)

    try:
        assert benchmark.pedantic(run, rounds=5, iterations=1) == 2000
    finally:
        p.close()


def _build_c(src: str, tmp: Path, extra: list[str]) -> Path:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip(f"C compiler {cc!r} not on PATH")
    from kipconsumer._loader import librdkafka_path

    lib = librdkafka_path()
    exe = tmp / Path(src).stem
    subprocess.check_call(
        [
            cc,
            "-std=gnu11",
            "-Wall",
            "-O2",
            f"-I{ROOT / 'csrc'}",
            str(HERE / src),
            *extra,
            "-o",
            str(exe),
            f"-L{os.path.dirname(lib)}",
            f"-l:{os.path.basename(lib)}",
            f"-Wl,-rpath,{os.path.dirname(lib)}",
            "-pthread",
        ]
    )
    return exe


def test_c_fetch_buffer_drain(benchmark: Any, tmp_path: Path) -> None:
    exe = _build_c("fetch_buffer_bench.c", tmp_path, [str(ROOT / "csrc" / "fetch_buffer.c")])
    out: list[str] = []

    def run() -> None:
        out.append(
            subprocess.run(
                [str(exe), "12", "500", "500000", "3"], check=True, capture_output=True, text=True
            ).stdout
        )

    benchmark.pedantic(run, rounds=3, iterations=1)
    rows = [json.loads(ln) for ln in out[-1].splitlines() if ln.startswith("{")]
    assert len(rows) == 4
    for r in rows:
        benchmark.extra_info[f"{r['shape']}-{r['mode']}-drain_ns_per_record"] = r[
            "drain_ns_per_record_median"
        ]
        benchmark.extra_info[f"{r['shape']}-{r['mode']}-drain_us_per_poll"] = r["drain_us_per_poll_median"]


def test_c_arrow_build(benchmark: Any, tmp_path: Path) -> None:
    exe = _build_c("arrow_batch_bench.c", tmp_path, [str(ROOT / "csrc" / "arrow_batch.c")])
    out: list[str] = []

    def run() -> None:
        out.append(
            subprocess.run(
                [str(exe), "500", "100", "2000"], check=True, capture_output=True, text=True
            ).stdout
        )

    benchmark.pedantic(run, rounds=3, iterations=1)
    lines = [ln for ln in out[-1].splitlines() if "us/batch" in ln]
    assert lines
    for ln in lines:
        benchmark.extra_info[ln.split(":")[0]] = ln.split(":", 1)[1].strip()
