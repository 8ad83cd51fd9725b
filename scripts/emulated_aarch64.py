"""Run the wheel smoke test of kipconsumer's aarch64 wheels under emulation (qemu-user) on x86_64.

    python scripts/build_wheels.py --arch aarch64 --test [--python 3.13 ...]

Each aarch64 CPython runs from a Debian arm64 root (:data:`ROOT_SUITE`) made once from Debian's
packages (:func:`ensure_root`) and cached under ``~/.cache/kipconsumer/roots/``, through
``qemu-aarch64-static`` (binfmt_misc with the ``F`` flag: the emulator is found outside the chroot).
For each wheel: a fresh venv of the emulated interpreter (``--without-pip``), the wheel file (and its
dependencies, and pyarrow if PyPI has an aarch64 wheel of it for the version) installed into it by this
machine's pip for the target platform and ABI, then ``tests/wheel_smoke.py`` under emulation from a
directory where no checkout is importable. The root's network is the host's (loopback included: a
Kafka on the host is reachable); its ``/proc`` and ``/dev`` are mounted in a private mount namespace
(``unshare --mount``), so nothing stays mounted when a run ends. Needs root, apt-get, qemu-user-static
and binfmt-support (Debian packages; ``./dev.sh wheels --arch aarch64`` installs them).

CPython versions with no Debian arm64 interpreter (:data:`NO_INTERPRETER`) are built but not run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOTS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kipconsumer" / "roots"
# The Debian suite whose arm64 root holds python3.X (and python3.X-venv).
ROOT_SUITE = {"3.11": "bookworm", "3.13": "sid", "3.14": "sid", "3.15": "sid"}
NO_INTERPRETER = {
    "3.10": "no current Debian suite (sid, trixie, bookworm) ships an arm64 python3.10",
    "3.12": "no current Debian suite ships an arm64 python3.12 (trixie went from 3.11 to 3.13)",
}
APT_PACKAGES = "qemu-user-static binfmt-support"
BINFMT = Path("/proc/sys/fs/binfmt_misc")
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
SMOKE_DIR = "/opt/kipconsumer-smoke"  # inside the root


class EmulationError(RuntimeError):
    """The emulated test could not run or failed; the message names the step."""


@dataclass
class SmokeResult:
    """What one emulated smoke run did, with the duration of each step in seconds."""

    version: str
    wheel: str
    steps: dict[str, float]
    pyarrow: bool
    last_line: str


def _run(cmd: Sequence[str], timeout: float, what: str, env: dict[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(list(cmd), text=True, capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        raise EmulationError(f"{what}: timed out after {timeout:.0f} s: {' '.join(cmd)}") from e
    if proc.returncode != 0:
        raise EmulationError(f"{what}: failed ({proc.returncode}): {' '.join(cmd)}\n"
                             f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc.stdout


def ensure_binfmt() -> None:
    """aarch64 ELF files run through qemu-aarch64-static (binfmt_misc mounted, the handler enabled)."""
    if os.geteuid() != 0:
        raise EmulationError("emulated tests need root (binfmt_misc, chroot, mounts)")
    for tool in ("qemu-aarch64-static", "apt-get", "dpkg-deb", "unshare", "chroot"):
        if shutil.which(tool) is None:
            raise EmulationError(f"{tool} not found: apt-get install {APT_PACKAGES}")
    if not (BINFMT / "register").exists():
        _run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], 30, "mount binfmt_misc")
    handler = BINFMT / "qemu-aarch64"
    if not handler.exists() and shutil.which("update-binfmts"):
        _run(["update-binfmts", "--enable", "qemu-aarch64"], 30, "update-binfmts --enable qemu-aarch64")
    if not handler.exists() or "enabled" not in handler.read_text():
        raise EmulationError(f"no enabled binfmt handler {handler} (apt-get install {APT_PACKAGES})")
    if "F" not in next((ln for ln in handler.read_text().splitlines() if ln.startswith("flags:")), ""):
        raise EmulationError(f"{handler} lacks the F flag: a chroot could not find qemu-aarch64-static")


def root_packages(suite: str) -> list[str]:
    """What a root of ``suite`` needs: its interpreters with their venv module, and a shell."""
    versions = sorted(v for v, s in ROOT_SUITE.items() if s == suite)
    return [p for v in versions for p in (f"python{v}", f"python{v}-venv")] + ["dash", "coreutils"]


def ensure_root(suite: str, log: list[str]) -> Path:
    """The arm64 Debian ``suite`` root under :data:`ROOTS`, made when missing.

    The root is :func:`root_packages` and everything they depend on, unpacked on this machine with
    ``dpkg-deb -x`` (a merged-/usr layout; no maintainer script runs): about two minutes, where
    ``debootstrap --foreign`` and its second stage under qemu took over 45 minutes here. Nothing in a
    smoke run needs what the skipped scripts make (users, alternatives, byte-compiled stdlib: Python
    writes its .pyc files on first use)."""
    import cross_aarch64

    root = ROOTS / f"{suite}-arm64-unpacked"
    marker = root / ".kipconsumer-root"
    if marker.is_file() and marker.read_text().split() == root_packages(suite):
        return root
    started = time.monotonic()
    opts = cross_aarch64.apt_options([suite], suite)
    debs = ROOTS / f"{suite}-arm64-debs"
    shutil.rmtree(debs, ignore_errors=True)
    (debs / "partial").mkdir(parents=True)
    _run(["apt-get", *opts, f"-oDir::Cache::archives={debs}", "--download-only", "-y", "install",
          *root_packages(suite)], 1800, f"download the {suite} arm64 packages")
    partial = ROOTS / f"{suite}-arm64-unpacked.partial"
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "usr").mkdir(parents=True)
    for top in ("bin", "lib", "sbin"):
        (partial / top).symlink_to(f"usr/{top}")
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(partial)], 300, f"unpack {deb.name}")
    for d in ("proc", "dev", "root", "tmp"):
        (partial / d).mkdir(exist_ok=True)
    (partial / "tmp").chmod(0o1777)
    shutil.rmtree(debs)
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    marker.write_text(" ".join(root_packages(suite)) + "\n")
    log.append(f"made the {suite} arm64 root in {time.monotonic() - started:.0f} s")
    return root


def in_root(root: Path, argv: Sequence[str], timeout: float, what: str, cwd: str = "/") -> str:
    """Run ``argv`` inside ``root`` (chroot, emulated) with /proc and /dev mounted in a private mount
    namespace, so the mounts go away with the process. The environment is a clean one, with this
    machine's CA bundle for pip (it may trust a proxy that the root's ca-certificates does not)."""
    shutil.copyfile("/etc/resolv.conf", root / "etc" / "resolv.conf")  # pip reaches PyPI from the root
    cafile = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or HOST_CA_BUNDLE
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/root", "LANG": "C.UTF-8",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_DEFAULT_TIMEOUT": "180"}
    if os.path.isfile(cafile):
        bundle = root / SMOKE_DIR.lstrip("/") / "ca-bundle.crt"
        bundle.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cafile, bundle)
        inside = f"{SMOKE_DIR}/ca-bundle.crt"
        env.update(PIP_CERT=inside, SSL_CERT_FILE=inside)
    proxies = ("http_proxy", "https_proxy", "no_proxy")
    env.update({k: v for k, v in os.environ.items() if k.lower() in proxies})
    command = shlex.quote(f"cd {cwd} && exec {shlex.join(argv)}")
    inner = (f"mount -t proc proc {shlex.quote(str(root / 'proc'))} && "
             f"mount --rbind /dev {shlex.quote(str(root / 'dev'))} && "
             f"exec chroot {shlex.quote(str(root))} /bin/sh -c {command}")
    unshare = ["unshare", "--mount", "--propagation", "private", "--"]
    return _run([*unshare, "/bin/sh", "-c", inner], timeout, what, env)


def smoke(version: str, wheel: Path, smoke_script: Path, expected_version: str,
          smoke_args: Sequence[str] = ()) -> SmokeResult:
    """Install ``wheel`` into a fresh venv of the emulated CPython ``version`` and run the smoke test
    (``smoke_script EXPECTED_VERSION *smoke_args``)."""
    if version not in ROOT_SUITE:
        raise EmulationError(f"Python {version}: {NO_INTERPRETER.get(version, 'no arm64 root configured')}")
    log: list[str] = []
    steps: dict[str, float] = {}
    started = time.monotonic()
    root = ensure_root(ROOT_SUITE[version], log)
    steps["root"] = time.monotonic() - started
    ensure_binfmt()
    base = f"{SMOKE_DIR}/{version}"  # one directory per version: runs of two versions may overlap
    work = root / base.lstrip("/")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    venv = f"{base}/venv"
    shutil.copy(smoke_script, work / "wheel_smoke.py")
    run_dir = f"{base}/run"  # no checkout there: kipconsumer can only come from the venv
    (work / "run").mkdir()

    def step(name: str, argv: Sequence[str], timeout: float, cwd: str = "/") -> str:
        t0 = time.monotonic()
        out = in_root(root, argv, timeout, f"Python {version} aarch64: {name}", cwd)
        steps[name] = time.monotonic() - t0
        return out

    py = f"{venv}/bin/python"
    step("venv", [f"/usr/bin/python{version}", "-m", "venv", "--without-pip", venv], 900)
    site = root / venv.lstrip("/") / "lib" / f"python{version}" / "site-packages"
    if not site.is_dir():
        raise EmulationError(f"Python {version} aarch64: the venv has no {site}")

    def pip_install(name: str, *what: str) -> None:
        # This machine's pip installs for the emulated interpreter (--platform/--python-version/--abi: pip
        # checks the wheels' tags against the target's), without compiling .pyc files: the emulated
        # pip took over 6 minutes for ensurepip alone. Python compiles what the smoke imports.
        t0 = time.monotonic()
        tag = version.replace(".", "")
        _run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
              "--target", str(site), "--platform", cross_platform, "--python-version", version,
              "--implementation", "cp", "--abi", f"cp{tag}", "--only-binary", ":all:", *what],
             1800, f"Python {version} aarch64: {name}")
        steps[name] = time.monotonic() - t0

    cross_platform = "manylinux_2_28_aarch64"
    pip_install("pip install wheel", str(wheel))
    try:
        pip_install("pip install pyarrow", "pyarrow")
        pyarrow = True
    except EmulationError:
        pyarrow = False
    out = step("smoke", [py, f"{base}/wheel_smoke.py", expected_version, *smoke_args], 1800, cwd=run_dir)
    lines = out.strip().splitlines()
    return SmokeResult(version, wheel.name, steps, pyarrow, lines[-1] if lines else "")
