"""Which allocator the loaded librdkafka runs on, and loading the bundled jemalloc beside it.

A librdkafka bound by ``scripts/native_bundle.py`` imports its allocation functions from
``libkipconsumer-jemalloc.so.2`` (jemalloc with ``kcje_``-prefixed symbols plus
``csrc/alloc/bound_alloc.c``) instead of libc; the rest of the process keeps its own malloc.
:func:`prepare` loads that library from the directory of the carried libraries before librdkafka
is loaded; :func:`probe` checks, by allocating through librdkafka, which allocator it really uses.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Any

SONAME_PREFIX = "libkipconsumer-jemalloc"
_PROBE_BYTES = 1 << 20


def prepare(lib_dir: str) -> str | None:
    """Load the bundled jemalloc found in ``lib_dir`` (if any) so a bound librdkafka there binds to it.

    A bound librdkafka also finds it through its ``$ORIGIN`` run path; loading it first by absolute
    path covers copies whose run path a repair tool rewrote. Returns its path, or ``None``.
    """
    found = sorted(glob.glob(os.path.join(lib_dir, f"{SONAME_PREFIX}*.so*")))
    if not found:
        return None
    ctypes.CDLL(found[0])
    return found[0]


def _mallctl_u64(mallctl: Any, name: bytes) -> int:
    val = ctypes.c_uint64(0)
    size = ctypes.c_size_t(ctypes.sizeof(val))
    if mallctl(name, ctypes.byref(val), ctypes.byref(size), None, ctypes.c_size_t(0)) != 0:
        raise OSError(f"mallctl({name.decode()}) failed")
    return val.value


def probe(rdk: ctypes.CDLL) -> str:
    """``"jemalloc <version> (bundled)"`` if ``rdk`` allocates with the bundled jemalloc, else ``"libc"``.

    Allocates 1 MiB with ``rd_kafka_mem_malloc`` (librdkafka's own ``malloc``) and reads jemalloc's
    per-thread allocation counter around it, so a library that carries the dependency but whose
    imports were not renamed reports ``"libc"``.
    """
    try:
        mallctl = rdk.kcje_mallctl  # dlsym on librdkafka's handle also searches what it needs
    except AttributeError:
        return "libc"
    mallctl.restype = ctypes.c_int
    mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    rdk.rd_kafka_mem_malloc.restype = ctypes.c_void_p
    rdk.rd_kafka_mem_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    rdk.rd_kafka_mem_free.restype = None
    rdk.rd_kafka_mem_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    before = _mallctl_u64(mallctl, b"thread.allocated")
    ptr = rdk.rd_kafka_mem_malloc(None, _PROBE_BYTES)
    after = _mallctl_u64(mallctl, b"thread.allocated")
    rdk.rd_kafka_mem_free(None, ptr)
    if after - before < _PROBE_BYTES:
        return "libc"
    version = ctypes.c_char_p()
    size = ctypes.c_size_t(ctypes.sizeof(version))
    mallctl(b"version", ctypes.byref(version), ctypes.byref(size), None, ctypes.c_size_t(0))
    return f"jemalloc {(version.value or b'?').decode()} (bundled)"


def mallctl_address(rdk: ctypes.CDLL) -> int:
    """Address of the bundled jemalloc's ``mallctl`` as ``rdk`` (a bound librdkafka) resolves it, or 0."""
    try:
        fn = rdk.kcje_mallctl
    except AttributeError:
        return 0
    return ctypes.cast(fn, ctypes.c_void_p).value or 0
