"""Find and load the librdkafka that the native modules call, before any of them is imported.

The extension modules are not linked against librdkafka (see ``csrc/rdk.h``): their
librdkafka symbols are resolved at import against the shared library that the installed
confluent-kafka wheel ships in ``site-packages/confluent_kafka.libs/``. This module loads
that library once, by absolute path and with ``RTLD_GLOBAL``, and checks that it is at
least :data:`MIN_VERSION`; an older one raises ``ImportError`` naming both versions.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os

# Keep in sync with KC_RDK_MIN_VERSION in csrc/rdk.h and the confluent-kafka range in pyproject.toml.
MIN_VERSION = 0x020600FF
MIN_VERSION_STR = "2.6.0"
_REQUIREMENT = "confluent-kafka>=2.6.0,<3"

_loaded: ctypes.CDLL | None = None


def librdkafka_path() -> str:
    """Absolute path of the librdkafka shared library inside the installed confluent-kafka."""
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
    global _loaded
    if _loaded is not None:
        return
    path = librdkafka_path()
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    lib.rd_kafka_version.restype = ctypes.c_int
    lib.rd_kafka_version.argtypes = []
    check_version(lib.rd_kafka_version(), path)
    _loaded = lib
