"""The sdist and wheel build, and the wheel installs into a clean virtualenv and imports."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_sdist_and_wheel_install_into_a_clean_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "-o", str(dist), str(ROOT)],
                   check=True, capture_output=True, timeout=900)
    sdists = list(dist.glob("kipconsumer-*.tar.gz"))
    wheels = list(dist.glob("kipconsumer-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1
    with tarfile.open(sdists[0]) as tar:
        names = tar.getnames()
    for needed in ("csrc/fetch_buffer.c", "csrc/consumer_core.h", "kipconsumer/_consumer.pyx",
                   "kipconsumer/_rdk.pxd", "kipconsumer/py.typed", "setup.py", "pyproject.toml"):
        assert any(n.endswith(needed) for n in names), needed

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheels[0])], check=True,
                   capture_output=True, timeout=600)
    probe = ("import kipconsumer, kipconsumer.broker, kipconsumer.consumer;"
             "print(kipconsumer.librdkafka_version()[0])")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd="/", check=True,
                         capture_output=True, text=True, timeout=120)
    major, minor = (int(x) for x in out.stdout.strip().split(".")[:2])
    assert (major, minor) >= (2, 16)
