"""Find and load the librdkafka that the native modules call, before any of them is imported.

The extension modules are not linked against librdkafka (see ``csrc/rdk.h``): their
librdkafka symbols are resolved at import against the shared library that the installed
confluent-kafka wheel ships in ``site-packages/confluent_kafka.libs/``. This module loads
that library once, by absolute path and with ``RTLD_GLOBAL``, and checks that it is at
least :data:`MIN_VERSION`; an older one raises ``ImportError`` naming both versions.
``KIPCONSUMER_LIBRDKAFKA=/path/to/librdkafka.so.1`` loads that library instead (experiments, e.g.
a copy bound to the bundled jemalloc by ``scripts/native_bundle.py``: :mod:`kipconsumer._allocator`).
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os

from kipconsumer import _allocator

# Keep in sync with KC_RDK_MIN_VERSION in csrc/rdk.h and the confluent-kafka range in pyproject.toml.
MIN_VERSION = 0x020600FF
MIN_VERSION_STR = "2.6.0"
_REQUIREMENT = "confluent-kafka>=2.6.0,<3"

ENV_OVERRIDE = "KIPCONSUMER_LIBRDKAFKA"

_loaded: ctypes.CDLL | None = None
_loaded_path: str | None = None
_allocator_name: str | None = None


def librdkafka_path() -> str:
    """Absolute path of the librdkafka to load: ``$KIPCONSUMER_LIBRDKAFKA``, else confluent-kafka's."""
    override = os.environ.get(ENV_OVERRIDE)
    if override:
        if not os.path.isfile(override):
            raise ImportError(
                f"{ENV_OVERRIDE}={override!r}: no such file (unset it to use the default librdkafka)"
            )
        return os.path.abspath(override)
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"kipconsumer needs {_REQUIREMENT!r} installed: its wheel carries the librdkafka "
            "shared library kipconsumer runs on (pip install kipconsumer installs it)"
        )
    pkg_dir = next(iter(spec.submodule_search_locations))
    libs_dir = os.path.join(os.path.dirname(pkg_dir), "confluent_kafka.libs")
    libs = sorted(glob.glob(os.path.join(libs_dir, "librdkafka*.so*")))
    if not libs:
        raise ImportError(
            f"no librdkafka shared library in {libs_dir}: kipconsumer needs confluent-kafka installed "
            f"from its manylinux wheel ({_REQUIREMENT!r}), not built against a system librdkafka"
        )
    return libs[0]


def version_str(version: int) -> str:
    """``0x020600ff`` -> ``'2.6.0'`` (librdkafka's packed version: major, minor, revision, pre)."""
    return f"{(version >> 24) & 0xFF}.{(version >> 16) & 0xFF}.{(version >> 8) & 0xFF}"


def check_version(version: int, path: str) -> None:
    """Raise ``ImportError`` if the librdkafka at ``path`` (reporting ``version``) is too old."""
    if version < MIN_VERSION:
        raise ImportError(
            f"kipconsumer needs librdkafka >= {MIN_VERSION_STR}, but the confluent-kafka installed "
            f"loads librdkafka {version_str(version)} ({path}); upgrade it: pip install '{_REQUIREMENT}'"
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
