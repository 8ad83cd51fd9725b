"""Build the native core of kipconsumer: the Cython modules with the C core compiled in.

Needs only a C compiler (and what the build backend installs: setuptools, Cython).
librdkafka is neither a header nor a link dependency: ``csrc/rdk.h`` declares the part of
its API we call, the extensions leave those symbols undefined, and at import
``kipconsumer._loader`` loads the librdkafka of the installed confluent-kafka globally
so the dynamic linker resolves them (see docs/releasing.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent


def extensions() -> list[Extension]:
    csources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").glob("*.c"))
    headers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").glob("*.h"))
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
                depends=headers,
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
