"""Build the native core of kipconsumer.

librdkafka is taken from the confluent-kafka wheel (``confluent_kafka.libs/``), which
ships the newest librdkafka available here (2.16) with the full C API, mock cluster
included.  Headers come from the system's ``librdkafka-dev`` package; symbols newer
than those headers are declared in ``csrc/rdk.h``.  At import time
``kipconsumer._loader`` preloads the same shared library so the extension modules
resolve against it wherever they are installed (wheel or editable).
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent


def _find_librdkafka() -> tuple[str, str]:
    """Return (directory, file name) of the librdkafka shared library in confluent-kafka."""
    import importlib.util

    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            "kipconsumer build: confluent-kafka is required at build time (it carries "
            "librdkafka 2.16). Install it first: pip install 'confluent-kafka==2.16.1'"
        )
    pkg_dir = Path(next(iter(spec.submodule_search_locations)))
    libs = sorted(glob.glob(str(pkg_dir.parent / "confluent_kafka.libs" / "librdkafka*.so*")))
    if not libs:
        sys.exit(f"kipconsumer build: no librdkafka*.so in {pkg_dir.parent / 'confluent_kafka.libs'}")
    return os.path.dirname(libs[0]), os.path.basename(libs[0])


def _check_headers() -> None:
    if not os.path.exists("/usr/include/librdkafka/rdkafka_mock.h"):
        sys.exit(
            "kipconsumer build: librdkafka headers not found; install them with "
            "'apt-get install -y librdkafka-dev' (the README's set-up does this)."
        )


def extensions() -> list[Extension]:
    _check_headers()
    lib_dir, lib_name = _find_librdkafka()
    csources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").glob("*.c"))
    debug = os.environ.get("KIPCONSUMER_DEBUG_BUILD") == "1"
    cflags = ["-O0", "-g", "-fno-omit-frame-pointer"] if debug else ["-O2", "-g0"]
    sanitize = os.environ.get("KIPCONSUMER_SANITIZE", "")
    if sanitize:
        cflags += [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer"]
    # KIPCONSUMER_EXTS=_consumer,_records builds only those modules (faster iteration).
    only = {n for n in os.environ.get("KIPCONSUMER_EXTS", "").split(",") if n}
    exts = []
    for pyx in sorted((ROOT / "kipconsumer").glob("_*.pyx")):
        if only and pyx.stem not in only:
            continue
        name = "kipconsumer." + pyx.stem
        exts.append(
            Extension(
                name,
                sources=[str(pyx.relative_to(ROOT))] + csources,
                include_dirs=["csrc"],
                library_dirs=[lib_dir],
                libraries=[":" + lib_name],
                runtime_library_dirs=["$ORIGIN/../confluent_kafka.libs", lib_dir],
                extra_compile_args=cflags + ["-std=gnu11", "-Wall", "-Wno-unused-function"],
                extra_link_args=[f"-fsanitize={sanitize}"] if sanitize else [],
            )
        )
    return cythonize(
        exts,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
        quiet=True,
    )


setup(ext_modules=extensions())
