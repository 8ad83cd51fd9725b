"""A Spark standalone cluster on this machine: one master and N workers, each in its own JVM.

    with StandaloneCluster(workers=2, python="/path/to/venv/bin/python") as cluster:
        spark = cluster_session(cluster, "app")      # a SparkSession on it, kipkafka registered
        ...
        cluster.kill_worker(0)                       # SIGKILL worker 0, its executor and Python workers

The JVMs are started from the installed pyspark's ``bin/spark-class``
(``org.apache.spark.deploy.master.Master`` / ``org.apache.spark.deploy.worker.Worker``) with
``SPARK_LOCAL_IP=127.0.0.1`` and ``SPARK_NO_DAEMONIZE=1``, every one in its own session (process
group), with no ``PYTHONPATH``/``PYTHONHOME`` inherited: executors run ``python`` (the executor
environment, see :mod:`kipconsumer.spark_env`), never the driver's ``sys.path``. ``start()`` returns
once every worker is registered with the master (the master's web UI serves JSON at ``/json``);
``stop()`` (and leaving the ``with`` block, an exception included, or interpreter exit) kills every
process of the cluster and their descendants, so no JVM outlives it. Each JVM also gets
``PR_SET_PDEATHSIG=SIGKILL``: a SIGKILLed test process does not leave them behind either.

pyspark is not imported by this module; :func:`cluster_session` imports it when called.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["StandaloneCluster", "ClusterError", "cluster_session", "spark_home"]

_PR_SET_PDEATHSIG = 1


class ClusterError(RuntimeError):
    """The cluster did not start (a JVM exited or a worker did not register in time)."""


def spark_home() -> Path:
    """The installed pyspark's directory (it holds ``bin/spark-class`` and ``jars/``), found
    without importing pyspark."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ClusterError("pyspark is not installed: pip install 'pyspark>=4.2'")
    home = Path(list(spec.submodule_search_locations)[0])
    if not (home / "bin" / "spark-class").exists():
        raise ClusterError(f"{home} has no bin/spark-class (a pyspark without the Spark jars?)")
    return home


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """preexec_fn: the JVM gets SIGKILL when the process that started it dies (Linux only)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _children() -> dict[int, list[int]]:
    """parent pid -> child pids, from /proc."""
    tree: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(d))
    return tree


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (PySpark's daemon puts its Python workers in a process
    group of their own, so killing the worker's group alone would miss them)."""
    tree = _children()
    out: list[int] = []
    todo = list(tree.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    log_fh: IO[bytes]
    web_port: int
    killed: bool = False


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers (``cores`` cores, ``memory`` each) on
    127.0.0.1. ``python`` is the interpreter executors run Python with (``PYSPARK_PYTHON`` of the
    JVMs; the driver must create its SparkContext with the same, see :func:`cluster_session`). Logs
    of every JVM are kept in ``<work_dir>/logs``; ``work_dir`` defaults to a temporary directory that
    ``stop()`` removes (kept when ``start()`` failed). ``env`` adds to the JVMs' environment."""

    def __init__(self, workers: int = 2, python: str | None = None, cores: int = 1, memory: str = "1g",
                 work_dir: str | os.PathLike[str] | None = None, start_timeout: float = 120.0,
                 env: Mapping[str, str] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if cores < 1:
            raise ValueError(f"cores must be >= 1, got {cores}")
        self.num_workers = workers
        self.python = python or sys.executable
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self._extra_env = dict(env or {})
        self._own_dir = work_dir is None
        self.work_dir = Path(work_dir if work_dir is not None else tempfile.mkdtemp(prefix="kip-spark-"))
        self.port = 0
        self.master_url = ""
        self.web_url = ""
        self.master: _Proc | None = None
        self.workers: list[_Proc] = []
        #: seconds from the first JVM start until every worker was registered
        self.start_seconds = 0.0

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        """The environment of the cluster's JVMs."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "SPARK_HOME", "SPARK_CONF_DIR")
               and not k.startswith(("SPARK_WORKER_", "SPARK_MASTER_"))}
        env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1",
                   PYSPARK_PYTHON=self.python, SPARK_CONF_DIR=str(self.work_dir / "conf"))
        env.update(self._extra_env)
        return env

    def start(self) -> None:
        """Starts the master and the workers; returns when every worker is registered."""
        if self.master is not None:
            raise ClusterError("cluster already started")
        atexit.register(self.stop)
        (self.work_dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.work_dir / "conf").mkdir(parents=True, exist_ok=True)  # no spark-defaults.conf from elsewhere
        t0 = time.monotonic()
        try:
            self.port, web = _free_port(), _free_port()
            self.master_url = f"spark://127.0.0.1:{self.port}"
            self.web_url = f"http://127.0.0.1:{web}"
            self.master = self._spawn("master", web, ["org.apache.spark.deploy.master.Master",
                                                      "--host", "127.0.0.1", "--port", str(self.port),
                                                      "--webui-port", str(web)])
            self._wait(lambda s: s is not None, "the master's web UI")
            for i in range(self.num_workers):
                self.workers.append(self._spawn_worker(i))
            self._wait(lambda s: s is not None and self._alive(s) == self.num_workers,
                       f"{self.num_workers} registered worker(s)")
        except BaseException:
            self._own_dir = False  # keep the JVM logs the error points to
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0

    def _spawn_worker(self, i: int) -> _Proc:
        port = _free_port()
        wdir = self.work_dir / f"worker-{i}"
        wdir.mkdir(exist_ok=True)
        return self._spawn(f"worker-{i}", port,
                           ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                            "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(wdir),
                            "--webui-port", str(port), self.master_url])

    def _spawn(self, name: str, web_port: int, args: list[str]) -> _Proc:
        log = self.work_dir / "logs" / f"{name}.log"
        fh = open(log, "ab")
        popen = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=self.env(),
                                 cwd=str(self.work_dir), stdin=subprocess.DEVNULL, stdout=fh,
                                 stderr=subprocess.STDOUT, start_new_session=True,
                                 preexec_fn=_die_with_parent)
        return _Proc(name, popen, log, fh, web_port)

    def _wait(self, ok: Any, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            for p in [self.master, *self.workers]:
                if p is not None and not p.killed and p.popen.poll() is not None:
                    raise ClusterError(f"{p.name} exited with {p.popen.returncode} while waiting for {what}; "
                                       f"log {p.log}:\n{_tail(p.log)}")
            if ok(self.status()):
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"no {what} within {self.start_timeout:.0f} s; master log "
                                   f"{self.master.log if self.master else '-'}")
            time.sleep(0.25)

    def stop(self) -> None:
        """Kills every process of the cluster (workers, their executors and Python workers, the
        master) and waits for them. Safe to call twice."""
        procs = [*self.workers, *([self.master] if self.master else [])]
        victims: list[int] = []
        for p in procs:
            victims += self._kill(p, signal.SIGKILL)
        for p in procs:
            try:
                p.popen.wait(30)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL cannot stop
                pass
            p.log_fh.close()
        _wait_gone(victims, 10.0)
        self.workers = []
        self.master = None
        atexit.unregister(self.stop)
        if self._own_dir:
            import shutil

            shutil.rmtree(self.work_dir, ignore_errors=True)

    @staticmethod
    def _kill(p: _Proc, sig: int) -> list[int]:
        """Signals the JVM's process group and every descendant; returns the descendants."""
        pid = p.popen.pid
        victims = descendants(pid) if p.popen.poll() is None else []
        try:
            os.killpg(pid, sig)  # the JVM, its executors (same group), even if the JVM was reaped
        except (ProcessLookupError, PermissionError):
            pass
        for q in victims:  # PySpark daemons and their workers (process groups of their own)
            try:
                os.kill(q, sig)
            except (ProcessLookupError, PermissionError):
                pass
        p.killed = True
        return victims

    # -- inspection and faults -----------------------------------------------------------------
    def status(self) -> dict[str, Any] | None:
        """The master's ``/json`` status (workers with their state), or None while it is not up."""
        try:
            with urllib.request.urlopen(self.web_url + "/json", timeout=2) as r:
                status: dict[str, Any] = json.load(r)
                return status
        except (OSError, ValueError):
            return None

    @staticmethod
    def _alive(status: Mapping[str, Any]) -> int:
        return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")

    def alive_workers(self) -> int:
        """Workers the master reports ALIVE."""
        s = self.status()
        return self._alive(s) if s else 0

    def worker_of(self, pid: int) -> int | None:
        """Index of the worker whose process tree holds ``pid`` (an executor or Python worker)."""
        tree = _children()
        for i, w in enumerate(self.workers):
            if w.killed:
                continue
            todo = [w.popen.pid]
            while todo:
                p = todo.pop()
                if p == pid:
                    return i
                todo.extend(tree.get(p, []))
        return None

    def pids(self) -> list[int]:
        """Every live process of the cluster: the JVMs and all their descendants."""
        out: list[int] = []
        for p in [*([self.master] if self.master else []), *self.workers]:
            if p.popen.poll() is None:
                out += [p.popen.pid, *descendants(p.popen.pid)]
        return out

    def kill_worker(self, i: int) -> list[int]:
        """SIGKILLs worker ``i`` with its executor JVM(s) and their Python workers; returns the pids
        killed. The master and the driver learn of it through the closed connections."""
        w = self.workers[i]
        pids = [w.popen.pid, *descendants(w.popen.pid)]
        victims = self._kill(w, signal.SIGKILL)
        w.popen.wait(30)
        _wait_gone(victims, 10.0)
        return pids

    def restart_worker(self, i: int) -> None:
        """Starts a new worker in place of the killed worker ``i``; returns once the master counts
        every worker ALIVE again (running applications then get an executor on it)."""
        w = self.workers[i]
        if not w.killed:
            raise ClusterError(f"worker {i} is running")
        w.log_fh.close()
        self.workers[i] = self._spawn_worker(i)
        self._wait(lambda s: s is not None and self._alive(s) == self.num_workers,
                   f"{self.num_workers} registered worker(s)")


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], timeout: float) -> None:
    """Waits until none of ``pids`` (killed processes that are not our children) still runs."""
    deadline = time.monotonic() + timeout
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_bytes()[-n:].decode(errors="replace")
    except OSError:
        return ""


def cluster_session(cluster: StandaloneCluster, app_name: str = "kipkafka",
                    extra: Mapping[str, str] | None = None, executor_memory: str = "512m",
                    wait_executors: float = 120.0) -> SparkSession:
    """A SparkSession on ``cluster`` (``kipkafka`` registered) whose executors run Python with
    ``cluster.python``; returns once one executor per worker is registered with the driver."""
    from pyspark.sql import SparkSession

    from kipconsumer.spark import register

    b = (SparkSession.builder.master(cluster.master_url).appName(app_name)
         .config("spark.pyspark.python", cluster.python)
         .config("spark.pyspark.driver.python", sys.executable)
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.memory", "1g")
         .config("spark.executor.memory", executor_memory)
         .config("spark.executor.cores", str(cluster.cores))
         .config("spark.sql.shuffle.partitions", str(cluster.num_workers))
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.streaming.stopActiveRunOnRestart", "true"))
    for k, v in (extra or {}).items():
        b = b.config(k, v)
    # SparkContext takes the workers' interpreter from PYSPARK_PYTHON (spark.pyspark.python is only
    # read by spark-submit's launcher); set it for the context's creation only
    saved = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = cluster.python
    try:
        spark = b.getOrCreate()
    finally:
        if saved is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = saved
    if spark.sparkContext.pythonExec != cluster.python:
        raise ClusterError(f"a SparkContext running Python {spark.sparkContext.pythonExec} exists already; "
                           "stop it first")
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    deadline = time.monotonic() + wait_executors
    while executor_count(spark) < cluster.num_workers:
        if time.monotonic() > deadline:
            spark.stop()
            raise ClusterError(f"only {executor_count(spark)} of {cluster.num_workers} executors registered "
                               f"within {wait_executors:.0f} s")
        time.sleep(0.2)
    return spark


def executor_count(spark: SparkSession) -> int:
    """Executors registered with the driver now (the driver itself not counted)."""
    sc = spark.sparkContext
    n: int = sc._jsc.sc().getExecutorMemoryStatus().size()
    return n - 1
