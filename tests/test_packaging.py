"""Release artifacts: the sdist and a manylinux wheel install into a clean venv and work.

Builds the sdist and, from it, the wheel for the running interpreter with ``scripts/build_wheels.py``
(zig cc for glibc 2.28, auditwheel; the whole matrix, 3.10-3.15, is ``./dev.sh wheels --test``),
installs it into a fresh venv outside the checkout (nothing but the wheel and pyarrow from PyPI: no
confluent-kafka, the wheel carries its librdkafka) and runs ``tests/wheel_smoke.py`` there from a
directory where the checkout is not importable. Then the version floor: ``KIPCONSUMER_LIBRDKAFKA``
pointing at the librdkafka of the oldest confluent-kafka of the supported range loads, and one older
still is refused at import with an ``ImportError`` naming both versions.
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

RUNNING = f"{sys.version_info[0]}.{sys.version_info[1]}"
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
def dist(release_dist: Path) -> Path:
    return release_dist


def test_every_package_of_the_tree_is_listed_for_the_wheel() -> None:
    """pyproject.toml lists the packages explicitly: a new one left out (kipconsumer/_pipeline/ when
    the Pipeline's parts moved there) would be missing from the wheel, and ``import
    kipconsumer.streams`` would fail only once installed. A static check, so it runs by default."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for init in (ROOT / "kipconsumer").rglob("__init__.py")}
    assert listed == found


@pytest.mark.slow
def test_sdist_holds_the_sources_and_wheels_only_what_runs(dist: Path) -> None:
    (sdist,) = dist.glob("kipconsumer-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    for needed in ("csrc/fetch_buffer.c", "csrc/rdk.h", "kipconsumer/_consumer.pyx", "kipconsumer/_rdk.pxd",
                   "kipconsumer/py.typed", "setup.py", "pyproject.toml", "LICENSE",
                   "build_support/carried_librdkafka.py"):
        assert any(n.endswith(needed) for n in names), needed
    assert not any(".so" in n or "_native_libs" in n for n in names), "the sdist carries no librdkafka"
    wheels = sorted(dist.glob("kipconsumer-*.whl"))
    assert len(wheels) == 1
    for wheel in wheels:
        assert wheel.name.startswith(f"kipconsumer-{__version__}-cp")
        assert "manylinux_2_28_x86_64" in wheel.name
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
        assert "kipconsumer/py.typed" in names and "kipconsumer/_consumer.pyi" in names
        assert sum(n.endswith(".so") for n in names) == 7
        assert not [n for n in names if n.endswith((".pyx", ".pxd", ".c", ".h"))]
        assert any(n.endswith("licenses/LICENSE") for n in names)
        carried = [n for n in names if n.startswith("kipconsumer/_native_libs/librdkafka")]
        assert len(carried) == 1 and carried[0].endswith(".so.1"), carried
        assert "kipconsumer/_native_libs/LICENSES-librdkafka.txt" in names
        # librdkafka allocates with the bundled jemalloc (scripts/native_bundle.py bind_wheel)
        assert carried == ["kipconsumer/_native_libs/librdkafka-kipc.so.1"], carried
        assert "kipconsumer/_native_libs/libkipconsumer-jemalloc.so.2" in names
        assert "kipconsumer/_native_libs/LICENSE.jemalloc" in names
        assert not any(n.startswith("build_support") for n in names)


def _confluent_librdkafka(venv: Path, version: str) -> str:
    """Installs confluent-kafka ``version`` (no deps) into ``venv``; the path of the librdkafka it carries."""
    _pip(venv, "--no-deps", f"confluent-kafka=={version}")
    (lib,) = venv.glob("lib/python*/site-packages/confluent_kafka.libs/librdkafka*.so*")
    return str(lib)


def _import_with(venv: Path, cwd: Path, lib: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env[_loader.OVERRIDE_ENV] = lib
    return subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import kipconsumer; print(kipconsumer.librdkafka_version()[0])"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_wheel_installs_into_a_clean_venv_and_works(dist: Path, tmp_path: Path) -> None:
    tag = "cp" + RUNNING.replace(".", "")
    (wheel,) = dist.glob(f"kipconsumer-*-{tag}-{tag}-*.whl")
    venv = tmp_path / "venv"
    python = build_wheels.find_python(RUNNING)
    assert python is not None
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    _pip(venv, f"{wheel}[arrow]")
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                               capture_output=True, text=True, check=True).stdout
    assert "confluent" not in installed.lower(), installed
    line = _smoke(venv, tmp_path)
    assert f"Python {RUNNING}." in line and "pyarrow none" not in line, line
    assert "ran embedded, group, asyncio, pipeline, share, ctrl-c" in line, line

    # the version floor, with KIPCONSUMER_LIBRDKAFKA pointing at older builds of the library
    out = _import_with(venv, tmp_path, _confluent_librdkafka(venv, OLDEST_CONFLUENT))
    assert out.returncode == 0 and out.stdout.strip() == OLDEST_CONFLUENT, out.stdout + out.stderr
    out = _import_with(venv, tmp_path, _confluent_librdkafka(venv, TOO_OLD_CONFLUENT))
    assert out.returncode != 0
    assert "ImportError" in out.stderr and f"librdkafka {TOO_OLD_CONFLUENT}" in out.stderr, out.stderr
    assert f">= {_loader.MIN_VERSION_STR}" in out.stderr, out.stderr
