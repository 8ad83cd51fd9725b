"""Load the librdkafka shared library that the native modules link against.

The extension modules are linked against the librdkafka 2.16 that the confluent-kafka
wheel ships in ``site-packages/confluent_kafka.libs/``.  Loading it here, globally and
by absolute path, lets the dynamic linker resolve the extensions' dependency whatever
the install layout (wheel, editable checkout, build tree).
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os

_loaded: ctypes.CDLL | None = None


def librdkafka_path() -> str:
    """Absolute path of the librdkafka shared library inside confluent-kafka's wheel."""
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "kipconsumer needs confluent-kafka==2.16.1 installed: it carries the librdkafka "
            "shared library kipconsumer is linked against"
        )
    pkg_dir = next(iter(spec.submodule_search_locations))
    libs_dir = os.path.join(os.path.dirname(pkg_dir), "confluent_kafka.libs")
    libs = sorted(glob.glob(os.path.join(libs_dir, "librdkafka*.so*")))
    if not libs:
        raise ImportError(f"no librdkafka shared library found next to {pkg_dir}")
    return libs[0]


def load() -> None:
    """Load librdkafka once, with RTLD_GLOBAL, before any extension module is imported."""
    global _loaded
    if _loaded is None:
        _loaded = ctypes.CDLL(librdkafka_path(), mode=ctypes.RTLD_GLOBAL)
