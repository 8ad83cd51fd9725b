"""The pytest plugin (``kipconsumer.testing.pytest_plugin``) is opt-in and works where it is loaded.

Each case runs pytest in a fresh process on a user's test folder, with entry-point plugins off (as in
an environment where the plugin is registered by nothing: the wheel carries no ``pytest11`` entry
point, ``tests/test_packaging.py`` checks that).
"""

from __future__ import annotations

import os
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
