"""Find and load the librdkafka that the native modules call, before any of them is imported.

The extension modules are not linked against librdkafka (see ``csrc/rdk.h``): their
librdkafka symbols are resolved at import against the shared library kipconsumer carries in
``kipconsumer/_native_libs/`` (grafted there when the wheel, or the editable checkout, is built:
``build_support/carried_librdkafka.py``). ``$KIPCONSUMER_LIBRDKAFKA=/path/to/librdkafka.so.1``
loads another build instead (experiments). This module loads the library once, by absolute path
and with ``RTLD_GLOBAL`` (after :func:`kipconsumer._allocator.prepare` has loaded the allocator a
bound copy needs, ``scripts/native_bundle.py``), and checks that it is at least :data:`MIN_VERSION`;
an older one raises ``ImportError`` naming both versions.
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


def load() -> None:
    """Load librdkafka once, globally, after checking its version."""
    global _loaded, _loaded_path
    if _loaded is not None:
        return
    path = librdkafka_path()
    _allocator.prepare(os.path.dirname(path))
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
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
