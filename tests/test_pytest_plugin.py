"""The pytest plugin (``kipconsumer.testing.pytest_plugin``) is opt-in and works where it is loaded.

Installing kipconsumer registers no plugin: the package's metadata (the ``.dist-info`` the wheel
carries, built here by setuptools from pyproject.toml) has no ``pytest11`` entry point. The other cases
run pytest in a fresh process on a user's test folder, with entry-point plugins off (as in an
environment where nothing registers the plugin).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

USER_TEST = '''
def test_uses_the_plugin(embedded_broker, request):
    embedded_broker.create_topic("plugin-topic", partitions=2)
    assert embedded_broker.bootstrap_servers.startswith("127.0.0.1:")
    assert request.config.getoption("--kafka-brokers") == 2
'''


def _pytest(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """pytest in a fresh process on ``folder`` (the session's own ``$KIP_GROUP_PROTOCOL`` left out)."""
    run_env = {k: v for k, v in os.environ.items() if k != "KIP_GROUP_PROTOCOL"}
    run_env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **(env or {}))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=folder, env=run_env, capture_output=True, text=True, timeout=120)


def test_installing_registers_no_pytest_plugin(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "tests", "bench", "docs", "examples", "*.so", "*.egg-info",
        "__pycache__", ".*_cache"))
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    made = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta; "
         "build_meta.prepare_metadata_for_build_wheel(sys.argv[1])", str(out)],
        cwd=src, env=env, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    (dist_info,) = out.glob("kipconsumer-*.dist-info")
    assert (dist_info / "METADATA").is_file(), made.stdout[-3000:]
    entry_points = dist_info / "entry_points.txt"
    text = entry_points.read_text() if entry_points.exists() else ""
    assert "pytest11" not in text, f"the wheel would register a pytest plugin for everyone: {text}"


@pytest.fixture
def user_project(tmp_path: Path) -> Path:
    (tmp_path / "test_user.py").write_text(USER_TEST)
    return tmp_path


def test_loaded_with_p(user_project: Path) -> None:
    out = _pytest(user_project, "-p", "kipconsumer.testing.pytest_plugin", "--kafka-brokers", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed" in out.stdout


def test_loaded_with_pytest_plugins_in_a_conftest(user_project: Path) -> None:
    (user_project / "conftest.py").write_text('pytest_plugins = ["kipconsumer.testing.pytest_plugin"]\n')
    out = _pytest(user_project, "--kafka-brokers", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed" in out.stdout


def test_not_loaded_unless_asked(user_project: Path) -> None:
    out = _pytest(user_project)
    assert out.returncode != 0
    assert "fixture 'embedded_broker' not found" in out.stdout, out.stdout + out.stderr


PROTOCOL_TEST = '''
import pytest
from kipconsumer import KafkaConsumer
from kipconsumer.errors import ConfigError

EXPECTED = "{expected}"


def conf(**extra):
    return {{"bootstrap.servers": "127.0.0.1:9", **extra}}


def test_a_member_follows_the_session():
    with KafkaConsumer(conf(**{{"group.id": "g"}})) as c:
        assert c.settings.rdkafka.get("group.protocol", "classic") == EXPECTED


def test_a_config_that_says_keeps_it():
    said = {{"group.id": "g", "group.protocol": "classic", "session.timeout.ms": 6000}}
    with KafkaConsumer(conf(**said)) as c:
        assert c.settings.rdkafka.get("group.protocol", "classic") == "classic"


def test_without_a_group_nothing_changes():
    with KafkaConsumer(conf()) as c:
        assert "group.protocol" not in c.settings.rdkafka


def test_a_classic_only_key_is_refused_under_consumer():
    if EXPECTED == "consumer":
        with pytest.raises(ConfigError, match="session.timeout.ms"):
            KafkaConsumer(conf(**{{"group.id": "g", "session.timeout.ms": 6000}}))


def test_a_pipeline_follows_the_session():
    from kipconsumer.config import split_config

    cfg = split_config(conf(**{{"group.id": "g"}}))
    if EXPECTED == "consumer":  # the broker assigns: no cooperative-sticky default, no ConfigError
        assert "partition.assignment.strategy" not in cfg.consumer
    else:
        assert cfg.consumer["partition.assignment.strategy"] == "cooperative-sticky"


@pytest.mark.classic_only(reason="checks the JoinGroup")
def test_classic_only():
    assert EXPECTED == "classic"
'''


@pytest.mark.parametrize(("args", "env", "expected"), [
    ((), None, "classic"),
    (("--group-protocol", "consumer"), None, "consumer"),
    ((), "consumer", "consumer"),
    (("--group-protocol", "classic"), "consumer", "classic"),  # the option wins
])
def test_group_protocol_switch(tmp_path: Path, args: tuple[str, ...], env: str | None, expected: str) -> None:
    """``--group-protocol`` / ``$KIP_GROUP_PROTOCOL``: every consumer with a ``group.id`` whose config does
    not set ``group.protocol`` uses the session's; ``classic_only`` tests are skipped with the reason."""
    (tmp_path / "test_protocol.py").write_text(PROTOCOL_TEST.format(expected=expected))
    extra = {"KIP_GROUP_PROTOCOL": env} if env else {}
    out = _pytest(tmp_path, "-p", "kipconsumer.testing.pytest_plugin", "-rs", *args, env=extra)
    assert out.returncode == 0, out.stdout + out.stderr
    if expected == "consumer":
        assert "5 passed, 1 skipped" in out.stdout, out.stdout
        assert "classic group protocol only: checks the JoinGroup" in out.stdout, out.stdout
    else:
        assert "6 passed" in out.stdout, out.stdout


def test_a_bad_group_protocol_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "test_protocol.py").write_text("def test_x():\n    pass\n")
    out = _pytest(tmp_path, "-p", "kipconsumer.testing.pytest_plugin", env={"KIP_GROUP_PROTOCOL": "eager"})
    assert out.returncode != 0
    assert "KIP_GROUP_PROTOCOL" in out.stdout + out.stderr and "classic|consumer" in out.stdout + out.stderr
    out = _pytest(tmp_path, "-p", "kipconsumer.testing.pytest_plugin", "--group-protocol", "eager")
    assert out.returncode != 0 and "classic" in out.stderr and "consumer" in out.stderr, out.stderr
