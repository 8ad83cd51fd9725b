"""Release artifacts: the sdist and the manylinux wheels install into clean venvs and work.

Builds the sdist and, from it, the wheels for the oldest and the newest supported CPython with
``scripts/build_wheels.py`` (zig cc for glibc 2.28, auditwheel), installs each into a fresh venv
outside the checkout (nothing but the wheel and its dependencies from PyPI) and runs
``tests/wheel_smoke.py`` there from a directory where the checkout is not importable. The oldest
interpreter's venv runs it again on the oldest confluent-kafka of the supported range, and one
older still must be refused at import with an ``ImportError`` naming both versions.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import build_wheels  # noqa: E402

from kipconsumer import _loader  # noqa: E402
from kipconsumer._version import __version__  # noqa: E402

OLDEST, NEWEST = build_wheels.DEFAULT_PYTHONS[0], build_wheels.DEFAULT_PYTHONS[-1]
OLDEST_CONFLUENT = _loader.MIN_VERSION_STR  # confluent-kafka X.Y.Z carries librdkafka X.Y.Z
TOO_OLD_CONFLUENT = "2.4.0"


def _pip(venv: Path, *args: str) -> None:
    # without PYTHONPATH: a checkout on it (with the egg-info `build --sdist` leaves) makes pip think
    # kipconsumer is installed already and skip the wheel
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args],
                   check=True, capture_output=True, timeout=900, env=env)


def _smoke(venv: Path, cwd: Path) -> str:
    script = cwd / "wheel_smoke.py"
    script.write_text((ROOT / "tests" / "wheel_smoke.py").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = subprocess.run([str(venv / "bin" / "python"), str(script), __version__], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = [v for v in (OLDEST, NEWEST) if build_wheels.find_python(v) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"no interpreter for Python {missing} on this CI machine")
        pytest.skip(f"no interpreter for Python {missing} (pyenv or PATH)")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "build_wheels.py"), "--python", OLDEST,
                    "--python", NEWEST, "--out", str(out)], check=True, capture_output=True, timeout=1200)
    return out


@pytest.mark.slow
def test_sdist_holds_the_sources_and_wheels_only_what_runs(dist: Path) -> None:
    (sdist,) = dist.glob("kipconsumer-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    for needed in ("csrc/fetch_buffer.c", "csrc/rdk.h", "kipconsumer/_consumer.pyx", "kipconsumer/_rdk.pxd",
                   "kipconsumer/py.typed", "setup.py", "pyproject.toml", "LICENSE"):
        assert any(n.endswith(needed) for n in names), needed
    assert not any(n.endswith(".so") for n in names)
    wheels = sorted(dist.glob("kipconsumer-*.whl"))
    assert len(wheels) == 2
    for wheel in wheels:
        assert wheel.name.startswith(f"kipconsumer-{__version__}-cp")
        assert "manylinux_2_28_x86_64" in wheel.name
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
        assert "kipconsumer/py.typed" in names and "kipconsumer/_consumer.pyi" in names
        assert sum(n.endswith(".so") for n in names) == 6
        assert not [n for n in names if n.endswith((".pyx", ".pxd", ".c", ".h"))]
        assert any(n.endswith("licenses/LICENSE") for n in names)


@pytest.mark.slow
@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_wheel_installs_into_a_clean_venv_and_works(dist: Path, version: str, tmp_path: Path) -> None:
    tag = "cp" + version.replace(".", "")
    (wheel,) = dist.glob(f"kipconsumer-*-{tag}-{tag}-*.whl")
    venv = tmp_path / "venv"
    python = build_wheels.find_python(version)
    assert python is not None
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    _pip(venv, f"{wheel}[arrow]")
    line = _smoke(venv, tmp_path)
    assert f"Python {version}." in line, line

    if version == OLDEST:
        _pip(venv, f"confluent-kafka=={OLDEST_CONFLUENT}")
        line = _smoke(venv, tmp_path)
        assert f"confluent-kafka {OLDEST_CONFLUENT}" in line, line
        assert f"librdkafka {OLDEST_CONFLUENT}" in line, line

        _pip(venv, "--no-deps", f"confluent-kafka=={TOO_OLD_CONFLUENT}")
        out = subprocess.run([str(venv / "bin" / "python"), "-c", "import kipconsumer"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode != 0
        assert "ImportError" in out.stderr and f"librdkafka {TOO_OLD_CONFLUENT}" in out.stderr, out.stderr
        assert f">= {_loader.MIN_VERSION_STR}" in out.stderr, out.stderr
