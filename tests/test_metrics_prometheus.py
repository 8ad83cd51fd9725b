"""kipconsumer.metrics.prometheus against a real Prometheus server (Debian's ``prometheus`` package,
installed with apt-get if missing, else the tests needing it are skipped with the reason) scraping
``prometheus_client.start_http_server`` on loopback, while the clients run on the embedded broker and
their owner threads keep polling (a scrape reads ``metrics()`` from the HTTP server's thread)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from share_support import embedded_jobs

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry, generate_latest, start_http_server  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from kipconsumer import ConsumerRecord, KafkaConsumer, KafkaProducer, KafkaShareConsumer  # noqa: E402
from kipconsumer.aio import AsyncKafkaConsumer, AsyncKafkaProducer, AsyncKafkaShareConsumer  # noqa: E402
from kipconsumer.broker import EmbeddedBroker  # noqa: E402
from kipconsumer.metrics.prometheus import KipconsumerCollector  # noqa: E402
from kipconsumer.streams import Output, Pipeline  # noqa: E402

N = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prometheus_binary() -> str:
    """Debian's prometheus, installed with apt-get (root, or sudo without a password) if missing."""
    found = shutil.which("prometheus")
    if found:
        return found
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"]
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            pytest.skip("prometheus is not installed and apt-get needs root (no sudo)")
        cmd = ["sudo", "-n", *cmd]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"prometheus is not installed and `{' '.join(cmd)}` failed: {exc}")
    found = shutil.which("prometheus")
    if r.returncode != 0 or not found:
        pytest.skip(f"prometheus is not installed and `{' '.join(cmd)}` failed: {r.stderr.strip()[-400:]}")
    return found


class Prometheus:
    """A Prometheus server on loopback scraping one target every second."""

    def __init__(self, binary: str, workdir: Path, target_port: int) -> None:
        self.port = _free_port()
        cfg = workdir / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                       "scrape_configs:\n  - job_name: kipconsumer\n    static_configs:\n"
                       f"      - targets: ['127.0.0.1:{target_port}']\n")
        self.log = (workdir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (workdir / "prometheus.log").read_text()[-2000:]
                raise RuntimeError(f"prometheus did not start: {log}")
            time.sleep(0.2)

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(self, promql: str, ok: Callable[[list[dict[str, Any]]], bool],
                 timeout: float = 45) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            got = self.query(promql)
            if ok(got) or time.monotonic() > deadline:
                return got
            time.sleep(0.5)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


@pytest.fixture
def exporter() -> Iterator[tuple[KipconsumerCollector, CollectorRegistry, int]]:
    """A collector on its own registry, served by prometheus_client's HTTP server on loopback."""
    registry = CollectorRegistry()
    collector = KipconsumerCollector(registry)
    port = _free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    yield collector, registry, port
    server.shutdown()
    server.server_close()
    thread.join(5)


def _values(result: list[dict[str, Any]], label: str | None = None) -> dict[str, float]:
    return {(r["metric"].get(label, "") if label else ""): float(r["value"][1]) for r in result}


def _upper(record: ConsumerRecord) -> Iterator[Output]:
    yield record.key, (record.value or b"").upper()


def test_prometheus_scrapes_consumer_producer_and_pipeline_while_they_poll(
        exporter: tuple[KipconsumerCollector, CollectorRegistry, int], broker: EmbeddedBroker,
        topic_factory: Callable[..., str], unique_name: Callable[[str], str], tmp_path: Path) -> None:
    collector, _registry, port = exporter
    binary = _prometheus_binary()
    src, sink = topic_factory(3, "msrc"), topic_factory(3, "msink")
    cid, pid, pipe_id, group = unique_name("mc"), unique_name("mp"), unique_name("mpipe"), unique_name("mg")
    boot = broker.bootstrap_servers
    producer = collector.register_client(KafkaProducer({"bootstrap.servers": boot, "client.id": pid,
                                                        "statistics.interval.ms": 300, "linger.ms": 5}))
    consumer = collector.register_client(KafkaConsumer({"bootstrap.servers": boot, "client.id": cid,
                                                        "group.id": group, "auto.offset.reset": "earliest",
                                                        "statistics.interval.ms": 300}))
    pipe = collector.register_client(Pipeline({"bootstrap.servers": boot, "group.id": unique_name("mpg"),
                                               "consumer.client.id": pipe_id, "producer.client.id": pipe_id,
                                               "auto.offset.reset": "earliest", "commit.interval.ms": 100},
                                              src, _upper, sink))
    for i in range(N):
        producer.send(src, b"v%d" % i, partition=i % 3)
    producer.flush(10)
    stop = threading.Event()
    errors: list[BaseException] = []
    consumed = [0]

    def poll_loop() -> None:  # the owner thread: polls all along, scrapes run on the server's thread
        try:
            consumer.subscribe([src])
            while not stop.is_set():
                consumed[0] += len(consumer.poll(0.05))
        except BaseException as exc:  # pragma: no cover - asserted below
            errors.append(exc)

    def pipe_loop() -> None:
        try:
            pipe.run(until=stop.is_set)
        except BaseException as exc:  # pragma: no cover - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=poll_loop), threading.Thread(target=pipe_loop)]
    for t in threads:
        t.start()
    prom = Prometheus(binary, tmp_path, port)
    try:
        got = prom.wait_for(f'kipconsumer_consumer_records_total{{client_id="{cid}"}}',
                            lambda r: _values(r) == {"": float(N)})
        assert _values(got) == {"": float(N)}, (got, consumed, errors)
        assert got[0]["metric"]["group"] == group and got[0]["metric"]["job"] == "kipconsumer"
        lag = prom.wait_for(f'kipconsumer_consumer_lag_records{{client_id="{cid}"}}', lambda r: len(r) == 3)
        assert {(r["metric"]["topic"], r["metric"]["partition"]) for r in lag} == {(src, "0"), (src, "1"),
                                                                                  (src, "2")}
        assert set(_values(lag, "partition").values()) == {0.0}
        assert _values(prom.query(f'kipconsumer_consumer_rebalances_total{{client_id="{cid}"}}')) == {"": 1.0}
        assert _values(prom.query(f'kipconsumer_consumer_polls_total{{client_id="{cid}"}}'))[""] > 1
        assert _values(prom.query(f'kipconsumer_consumer_poll_seconds_total{{client_id="{cid}"}}'))[""] > 0
        fetched = prom.wait_for(f'kipconsumer_consumer_fetched_bytes_total{{client_id="{cid}"}}',
                                lambda r: bool(r) and float(r[0]["value"][1]) > 0)
        assert fetched, "no statistics-based series for the consumer"
        for name, want in (("records", N), ("records_delivered", N), ("delivery_failures", 0)):
            got = prom.query(f'kipconsumer_producer_{name}_total{{client_id="{pid}"}}')
            assert _values(got) == {"": want}, name
        rtt = prom.wait_for(f'kipconsumer_broker_rtt_seconds{{client_id="{pid}",client_type="producer"}}',
                            lambda r: len(r) == broker.num_brokers)
        assert {r["metric"]["broker"] for r in rtt} == {str(b) for b in broker.broker_ids}
        processed = prom.wait_for(f'kipconsumer_pipeline_records_processed_total{{client_id="{pipe_id}"}}',
                                  lambda r: _values(r) == {"": float(N)})
        assert _values(processed) == {"": float(N)}
        sent = prom.wait_for(f'kipconsumer_producer_records_total{{client_id="{pipe_id}"}}',
                             lambda r: _values(r) == {"": float(N)})
        assert _values(sent) == {"": float(N)}, "the pipeline's own producer is exported with it"
        # a closed client leaves the scrape: Prometheus marks its series stale
        stop.set()
        for t in threads:
            t.join(30)
        assert not errors, errors
        consumer.close()
        gone = prom.wait_for(f'kipconsumer_consumer_records_total{{client_id="{cid}"}}',
                             lambda r: not r)
        assert gone == []
        assert prom.query(f'kipconsumer_producer_records_total{{client_id="{pid}"}}'), \
            "the producer stays"
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        prom.stop()
        pipe.close()
        consumer.close()
        producer.close()


Scraped = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(port: int) -> Scraped:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _sample(scraped: Scraped, name: str, **labels: str) -> float | None:
    for (n, ls), v in scraped.items():
        if n == name and all(dict(ls).get(k) == val for k, val in labels.items()):
            return v
    return None


def test_asyncio_clients_are_exported_as_their_sync_clients(
        exporter: tuple[KipconsumerCollector, CollectorRegistry, int], broker: EmbeddedBroker,
        topic_factory: Callable[..., str], unique_name: Callable[[str], str]) -> None:
    collector, _registry, port = exporter
    topic = topic_factory(2, "maio")
    cid, pid = unique_name("maioc"), unique_name("maiop")

    async def main() -> None:
        boot = broker.bootstrap_servers
        async with AsyncKafkaProducer({"bootstrap.servers": boot, "client.id": pid}) as p, \
                AsyncKafkaConsumer({"bootstrap.servers": boot, "client.id": cid,
                                    "group.id": unique_name("maiog"), "auto.offset.reset": "earliest"}) as c:
            collector.register_client(p)
            collector.register_client(c)
            for i in range(20):
                await p.send(topic, b"%d" % i, partition=i % 2)
            c.subscribe([topic])
            n, deadline = 0, time.monotonic() + 30
            while n < 20 and time.monotonic() < deadline:
                n += len(await c.poll(0.2))
            scraped = await asyncio.to_thread(_scrape, port)  # the scrape runs on the server's thread
            assert _sample(scraped, "kipconsumer_consumer_records_total", client_id=cid) == 20
            assert _sample(scraped, "kipconsumer_producer_records_delivered_total", client_id=pid) == 20
            assert _sample(scraped, "kipconsumer_consumer_assigned_partitions", client_id=cid) == 2

    asyncio.run(main())


def test_share_consumers_are_exported(exporter: tuple[KipconsumerCollector, CollectorRegistry, int]) -> None:
    collector, _registry, port = exporter
    with embedded_jobs() as b:
        conf = {"bootstrap.servers": b.bootstrap_servers, "group.id": "sg",
                "share.acknowledgement.mode": "explicit", "statistics.interval.ms": 300}
        with KafkaShareConsumer({**conf, "client.id": "share-sync"}) as c:
            collector.register_client(c)
            c.subscribe(["jobs"])
            got, deadline = 0, time.monotonic() + 30
            while got < 20 and time.monotonic() < deadline:
                batch = c.poll(0.3)
                for r in batch:
                    c.acknowledge(r)
                got += len(batch)
            c.commit_sync()
            scraped = _scrape(port)
            labels = {"client_id": "share-sync", "group": "sg"}
            assert _sample(scraped, "kipconsumer_share_consumer_records_consumed_total", **labels) == 20
            assert _sample(scraped, "kipconsumer_share_consumer_records_acknowledged_total", **labels) == 20
            assert _sample(scraped, "kipconsumer_share_consumer_unacknowledged_records", **labels) == 0
            commits = _sample(scraped, "kipconsumer_share_consumer_acknowledgement_commits_total", **labels)
            assert commits is not None and commits >= 1

        async def aio() -> None:
            async with AsyncKafkaShareConsumer({**conf, "client.id": "share-aio"}) as ac:
                collector.register_client(ac)
                await ac.subscribe(["jobs"])
                await ac.poll(0.5)
                scraped = await asyncio.to_thread(_scrape, port)
                assert _sample(scraped, "kipconsumer_share_consumer_polls_total", client_id="share-aio") == 1

        asyncio.run(aio())


def test_dropped_and_closed_clients_leave_the_scrape(broker: EmbeddedBroker,
                                                     unique_name: Callable[[str], str]) -> None:
    registry = CollectorRegistry()
    collector = KipconsumerCollector(registry)
    dropped, closed, kept = unique_name("drop"), unique_name("closed"), unique_name("kept")
    c1 = KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "client.id": dropped})
    c2 = KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "client.id": closed})
    c3 = KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "client.id": kept})
    for c in (c1, c2, c3):
        collector.register_client(c)
    text = generate_latest(registry).decode()
    assert all(f'client_id="{n}"' in text for n in (dropped, closed, kept))
    c1.close()
    del c1
    gc.collect()
    c2.close()
    text = generate_latest(registry).decode()
    assert f'client_id="{dropped}"' not in text and f'client_id="{closed}"' not in text
    assert f'client_id="{kept}"' in text
    collector.unregister_client(c3)
    assert f'client_id="{kept}"' not in generate_latest(registry).decode()
    c3.close()
    with pytest.raises(TypeError, match="client must be a KafkaConsumer, KafkaProducer, KafkaShareConsumer"):
        collector.register_client(object())


def test_register_reuses_one_collector_per_registry_and_prefix(broker: EmbeddedBroker) -> None:
    """``prometheus.register(client, registry, prefix)`` (API.md): one collector per registry and
    prefix, the prefix starts every name, a bad prefix is a ValueError naming it."""
    from kipconsumer.metrics import prometheus

    registry = CollectorRegistry()
    with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "client.id": "reg-p"}) as p, \
            KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "client.id": "reg-q"}) as q:
        first = prometheus.register(p, registry, prefix="shop")
        assert prometheus.register(q, registry, prefix="shop") is first
        assert prometheus.register(q, registry) is not first
        text = generate_latest(registry).decode()
        assert 'shop_producer_records_total{client_id="reg-p"}' in text
        assert 'shop_producer_records_total{client_id="reg-q"}' in text
        assert 'kipconsumer_producer_records_total{client_id="reg-q"}' in text
    with pytest.raises(ValueError, match="prefix"):
        prometheus.KipconsumerCollector(None, prefix="9bad-prefix")
