"""The librdkafka kipconsumer carries: from confluent-kafka's manylinux wheel, grafted into the package.

kipconsumer's extension modules are not linked against librdkafka (``csrc/rdk.h``); at import
``kipconsumer/_loader.py`` loads the shared library that sits in ``kipconsumer/_native_libs/``.
That library (librdkafka with OpenSSL, SASL SCRAM/OAUTHBEARER/OIDC, zlib, snappy, lz4 and zstd
linked in statically) is the one in confluent-kafka's manylinux wheel of the target platform: it
does not depend on the Python version, so any wheel of :data:`CONFLUENT_VERSION` for the platform
serves every interpreter (including ones confluent-kafka ships no wheel for).

:func:`graft` puts ``librdkafka*.so*``, the wheel's licence texts (librdkafka's and those of what is
linked into it) and a ``SOURCE.txt`` naming the wheel and its sha256 into a package directory. The
wheel comes from, in order: ``$KIPCONSUMER_CONFLUENT_WHEEL`` (a wheel file: offline and cross builds),
the cache ``~/.cache/kipconsumer/librdkafka/`` (``$XDG_CACHE_HOME`` honoured), or the package index
(PyPI's simple API in its JSON form, PEP 691; ``$PIP_INDEX_URL`` honoured; the file's sha256 is checked
against the index's). Nothing here is committed to the repository or put in
the sdist: setup.py grafts at build time (``build_py``, ``build_ext --inplace``, editable installs).

Standard library only: it runs inside pip's isolated build environments, on any Python >= 3.10.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import ssl
import struct
import tempfile
import urllib.request
import zipfile
from pathlib import Path

CONFLUENT_VERSION = "2.16.1"
WHEEL_ENV = "KIPCONSUMER_CONFLUENT_WHEEL"
LIBS_DIR = "_native_libs"
LICENSE_NAME = "LICENSES-librdkafka.txt"
SOURCE_NAME = "SOURCE.txt"
#: the file name and SONAME of the carried library: not confluent-kafka's (``librdkafka-<hash>.so.1``), so a
#: confluent-kafka loaded in the same process keeps its own copy and never binds to ours (which may
#: allocate with another allocator: scripts/native_bundle.py). At most as long as the name it replaces.
CARRIED_SONAME = "librdkafka-kipc.so.1"
_INDEX = "https://pypi.org/simple"


class CarriedLibraryError(RuntimeError):
    """The carried librdkafka could not be had (no wheel for the platform, no network, a bad file)."""


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME`` (or ``~/.cache``) ``/kipconsumer/librdkafka``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kipconsumer" / "librdkafka"


def host_platform() -> str:
    """The manylinux platform tag of confluent-kafka's wheel for this machine (glibc Linux only)."""
    machine = platform.machine()
    if platform.system() != "Linux" or machine not in ("x86_64", "aarch64"):
        raise CarriedLibraryError(
            f"kipconsumer carries librdkafka for Linux x86_64 and aarch64 only, not {platform.system()} "
            f"{machine}; set {WHEEL_ENV}=/path/to/a confluent-kafka manylinux wheel for the target"
        )
    return f"manylinux_2_28_{machine}"


def _ssl_context() -> ssl.SSLContext:
    cafile = os.environ.get("SSL_CERT_FILE") or os.environ.get("PIP_CERT")
    return ssl.create_default_context(cafile=cafile if cafile and os.path.exists(cafile) else None)


def _pick(files: list[dict[str, object]], plat: str, version: str) -> dict[str, object]:
    """The release file for ``plat``: a wheel of that platform, a GIL build's preferred (same library)."""
    prefix = f"confluent_kafka-{version}-"
    wheels = [f for f in files if str(f["filename"]).startswith(prefix)
              and str(f["filename"]).endswith(f"{plat}.whl") and not f.get("yanked")]
    if not wheels:
        raise CarriedLibraryError(f"confluent-kafka {version} has no wheel for {plat} on the index")
    wheels.sort(key=lambda f: ("t-" in str(f["filename"]), str(f["filename"])))
    return wheels[0]


def fetch_wheel(plat: str, version: str = CONFLUENT_VERSION) -> Path:
    """confluent-kafka ``version``'s wheel for ``plat`` in the cache, downloaded once from the index."""
    cache = cache_dir()
    cached = sorted(cache.glob(f"confluent_kafka-{version}-*-{plat}.whl"))
    if cached:
        return cached[0]
    index = os.environ.get("PIP_INDEX_URL") or _INDEX
    request = urllib.request.Request(f"{index.rstrip('/')}/confluent-kafka/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60, context=_ssl_context()) as resp:
            project = json.load(resp)
        chosen = _pick(project["files"], plat, version)
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, suffix=".part")
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(
            str(chosen["url"]), timeout=300, context=_ssl_context()
        ) as resp:
            while chunk := resp.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except OSError as e:
        raise CarriedLibraryError(
            f"could not download confluent-kafka {version}'s {plat} wheel from {index} ({e}); it carries the "
            f"librdkafka kipconsumer loads. Download it elsewhere and set {WHEEL_ENV}=/path/to/it.whl"
        ) from e
    expected = dict(chosen["hashes"]).get("sha256")  # type: ignore[call-overload]
    if digest.hexdigest() != expected:
        os.unlink(tmp)
        raise CarriedLibraryError(
            f"{chosen['filename']}: sha256 {digest.hexdigest()} differs from the index's {expected}")
    target = cache / str(chosen["filename"])
    os.replace(tmp, target)
    return target


def source_wheel(plat: str | None = None) -> Path:
    """The wheel to graft from: ``$KIPCONSUMER_CONFLUENT_WHEEL`` if set, else the cached/downloaded one."""
    given = os.environ.get(WHEEL_ENV)
    if given:
        path = Path(given)
        if not path.is_file():
            raise CarriedLibraryError(f"{WHEEL_ENV}={given}: no such file")
        return path
    return fetch_wheel(plat or host_platform())


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _vaddr_to_offset(data: bytes, vaddr: int) -> int:
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1 and p_vaddr <= vaddr < p_vaddr + p_filesz:  # PT_LOAD
            return int(p_offset + vaddr - p_vaddr)
    raise CarriedLibraryError(f"address {vaddr:#x} is in no loadable segment")


def _soname_location(data: bytes) -> tuple[int, int]:
    """(file offset, length) of the DT_SONAME string of a little-endian ELF64 shared library."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CarriedLibraryError("not a little-endian ELF64 shared library")
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    dynamic = None
    for i in range(phnum):
        p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 2:  # PT_DYNAMIC
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        raise CarriedLibraryError("no dynamic section")
    strtab = soname = None
    for pos in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, pos)
        if tag == 0:
            break
        if tag == 5:  # DT_STRTAB
            strtab = value
        elif tag == 14:  # DT_SONAME
            soname = value
    if strtab is None or soname is None:
        raise CarriedLibraryError("no SONAME")
    start = _vaddr_to_offset(data, strtab) + soname
    return start, data.index(b"\0", start) - start


def read_soname(lib: Path) -> str:
    """The SONAME of the ELF64 shared library ``lib``."""
    data = lib.read_bytes()
    start, length = _soname_location(data)
    return data[start:start + length].decode()


def set_soname(lib: Path, soname: str) -> None:
    """Rewrite the SONAME of ``lib`` in place; the new name may not be longer than the old one.

    The string is overwritten inside the dynamic string table (padded with NULs), so nothing moves
    and no tool beyond the standard library is needed.
    """
    data = bytearray(lib.read_bytes())
    start, length = _soname_location(bytes(data))
    new = soname.encode()
    if len(new) > length:
        raise CarriedLibraryError(f"{lib.name}: SONAME {soname!r} is longer than the {length} bytes in place")
    data[start:start + length] = new + b"\0" * (length - len(new))
    lib.write_bytes(bytes(data))


def graft(package_dir: Path, wheel: Path | None = None) -> Path:
    """Put the wheel's librdkafka and licence texts into ``package_dir/_native_libs`` (idempotent).

    The library is renamed, file and SONAME, to :data:`CARRIED_SONAME`. Returns its path. A directory
    grafted from another wheel (or by an older version of this function) is replaced.
    """
    wheel = wheel or source_wheel()
    dest = package_dir / LIBS_DIR
    stamp = f"{wheel.name} sha256={_sha256(wheel)} soname={CARRIED_SONAME}\n"
    libs = sorted(dest.glob("librdkafka*.so*"))
    if libs and (dest / SOURCE_NAME).is_file() and (dest / SOURCE_NAME).read_text() == stamp:
        return libs[0]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        lib_names = [n for n in names if n.startswith("confluent_kafka.libs/") and ".so" in n]
        licenses = [n for n in names if ".dist-info/licenses/" in n and not n.endswith("/")]
        if not any(Path(n).name.startswith("librdkafka") for n in lib_names) or not licenses:
            raise CarriedLibraryError(f"{wheel} holds no confluent_kafka.libs/librdkafka*.so* or no licence")
        tmp = Path(tempfile.mkdtemp(prefix=f".{LIBS_DIR}-", dir=package_dir))
        os.chmod(tmp, 0o755)
        try:
            for name in lib_names:
                base = Path(name).name
                target = tmp / (CARRIED_SONAME if base.startswith("librdkafka") else base)
                target.write_bytes(zf.read(name))
                os.chmod(target, 0o755)
                if target.name == CARRIED_SONAME:
                    set_soname(target, CARRIED_SONAME)
            (tmp / LICENSE_NAME).write_bytes(b"\n\n".join(zf.read(n) for n in licenses))
            (tmp / SOURCE_NAME).write_text(stamp)
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return sorted(dest.glob("librdkafka*.so*"))[0]
