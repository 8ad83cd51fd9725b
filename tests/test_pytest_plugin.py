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


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)


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
