"""Find and load the librdkafka that the native modules call, before any of them is imported.

The extension modules that call librdkafka are linked against the library kipconsumer carries in
``kipconsumer/_native_libs/`` (SONAME ``librdkafka-kipc.so.1``; grafted there when the wheel, or the
checkout, is built: ``build_support/carried_librdkafka.py``). This module loads it once, by absolute
path and **locally** (after :func:`kipconsumer._allocator.prepare` has loaded the allocator a bound
copy needs, ``scripts/native_bundle.py``), so the modules' dependency resolves to it by SONAME and no
other library in the process (confluent-kafka's extension, which carries its own librdkafka) ever
binds to its symbols; and checks that it is at least :data:`MIN_VERSION` (an older one raises
``ImportError`` naming both versions).

``$KIPCONSUMER_LIBRDKAFKA=/path/to/librdkafka.so.1`` loads another build instead (experiments). A
library with the carried SONAME (``scripts/native_bundle.py bound-copy`` writes one) is loaded
locally in its place; any other is loaded with ``RTLD_GLOBAL`` so it takes precedence over the
carried one, and then serves every librdkafka user loaded after it in the process.
"""

from __future__ import annotations

import ctypes
import glob
import os

from kipconsumer import _allocator

# Keep in sync with KC_RDK_MIN_VERSION in csrc/rdk.h.
MIN_VERSION = 0x020600FF
MIN_VERSION_STR = "2.6.0"
OVERRIDE_ENV = "KIPCONSUMER_LIBRDKAFKA"
CARRIED_SONAME = "librdkafka-kipc.so.1"  # build_support/carried_librdkafka.py's
CARRIED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native_libs")

_loaded: ctypes.CDLL | None = None
_loaded_path: str | None = None
_allocator_name: str | None = None


def librdkafka_path() -> str:
    """Absolute path of the librdkafka to load: ``$KIPCONSUMER_LIBRDKAFKA`` if set, else the carried one.

    Raises ``ImportError`` naming the path looked at when there is no library there.
    """
    override = os.environ.get(OVERRIDE_ENV)
    if override:
        if not os.path.isfile(override):
            raise ImportError(
                f"{OVERRIDE_ENV}={override!r}: no such file (unset it to load the carried librdkafka)")
        return os.path.abspath(override)
    libs = sorted(glob.glob(os.path.join(CARRIED_DIR, "librdkafka*.so*")))
    if not libs:
        raise ImportError(
            f"no librdkafka shared library in {CARRIED_DIR}: kipconsumer's wheel carries one; a source "
            "checkout gets it from `python setup.py build_ext --inplace` or `pip install -e .` (fetched "
            f"from confluent-kafka's wheel); or set {OVERRIDE_ENV}=/path/to/librdkafka.so.1"
        )
    return libs[0]


def version_str(version: int) -> str:
    """``0x020600ff`` -> ``'2.6.0'`` (librdkafka's packed version: major, minor, revision, pre)."""
    return f"{(version >> 24) & 0xFF}.{(version >> 16) & 0xFF}.{(version >> 8) & 0xFF}"


def check_version(version: int, path: str) -> None:
    """Raise ``ImportError`` if the librdkafka at ``path`` (reporting ``version``) is too old."""
    if version < MIN_VERSION:
        raise ImportError(
            f"kipconsumer needs librdkafka >= {MIN_VERSION_STR}, but {path} is librdkafka "
            f"{version_str(version)}" + (f" (from {OVERRIDE_ENV})" if os.environ.get(OVERRIDE_ENV) else "")
        )


def _has_carried_soname(path: str) -> bool:
    """Whether the library at ``path`` names itself ``CARRIED_SONAME`` (its dynamic string table says so)."""
    if os.path.dirname(path) == CARRIED_DIR:
        return True
    try:
        with open(path, "rb") as f:
            return (b"\0" + CARRIED_SONAME.encode() + b"\0") in f.read()
    except OSError:
        return False


def load() -> None:
    """Load librdkafka once (locally, unless an override names another SONAME), after checking its version."""
    global _loaded, _loaded_path
    if _loaded is not None:
        return
    path = librdkafka_path()
    _allocator.prepare(os.path.dirname(path))
    mode = ctypes.RTLD_LOCAL if _has_carried_soname(path) else ctypes.RTLD_GLOBAL
    lib = ctypes.CDLL(path, mode=mode)
    lib.rd_kafka_version.restype = ctypes.c_int
    lib.rd_kafka_version.argtypes = []
    check_version(lib.rd_kafka_version(), path)
    _loaded, _loaded_path = lib, path


def loaded_path() -> str:
    """Path of the librdkafka :func:`load` loaded."""
    load()
    assert _loaded_path is not None
    return _loaded_path


def allocator() -> str:
    """What the loaded librdkafka allocates with (:func:`kipconsumer._allocator.probe`), probed once."""
    global _allocator_name
    load()
    if _allocator_name is None:
        assert _loaded is not None
        _allocator_name = _allocator.probe(_loaded)
    return _allocator_name


def allocator_mallctl() -> int:
    """Address of the bundled jemalloc's ``mallctl`` when the loaded librdkafka allocates with it, else 0
    (glibc). The consumer's stall thread purges jemalloc's unused pages through it (csrc/stall_pause.h)."""
    if not allocator().startswith("jemalloc"):
        return 0
    assert _loaded is not None
    return _allocator.mallctl_address(_loaded)
