"""``kipconsumer.native_build_info()``: what the native layer runs on, for bug reports and checks."""

from __future__ import annotations

from kipconsumer import _loader
from kipconsumer._native import librdkafka_builtin_features, librdkafka_version


def native_build_info() -> dict[str, object]:
    """The loaded librdkafka and what it was built with.

    Keys: ``librdkafka_version`` (``"2.16.0"``), ``librdkafka_path`` (the shared object loaded),
    ``allocator`` (``"jemalloc 5.3.1-0-g81034ce (bundled)"`` when librdkafka allocates with the
    jemalloc kipconsumer ships, else ``"libc"``: checked by allocating through librdkafka, not read
    from a build flag) and ``features`` (librdkafka's ``builtin.features``, a tuple of names).
    """
    return {
        "librdkafka_version": librdkafka_version()[0],
        "librdkafka_path": _loader.loaded_path(),
        "allocator": _loader.allocator(),
        "features": librdkafka_builtin_features(),
    }
