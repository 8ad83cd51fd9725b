"""Build the native core of kipconsumer: the Cython modules with the C core compiled in.

Needs only a C compiler and Python's headers (and what the build backend installs: setuptools,
Cython). librdkafka's headers are not needed: ``csrc/rdk.h`` declares the part of its API we call.
Each extension that calls it is linked against the librdkafka the package carries in
``kipconsumer/_native_libs/`` (``DT_NEEDED`` of its SONAME ``librdkafka-kipc.so.1``, found through
the run path ``$ORIGIN/_native_libs``), so its symbols resolve to that library and to no other
librdkafka in the process (confluent-kafka's, say), and no other resolves to ours. Every build that
produces something importable (``build_py``, so wheels; ``build_ext``; editable installs) grafts that
library there first, from confluent-kafka's manylinux wheel (``build_support/carried_librdkafka.py``;
see docs/releasing.md).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import sysconfig
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # build_support/, next to this file in the checkout and the sdist
from build_support.carried_librdkafka import CARRIED_SONAME, LIBS_DIR, CarriedLibraryError, graft  # noqa: E402

CSRC = ROOT / "csrc"
PKG = ROOT / "kipconsumer"
_EXTERN_H = re.compile(r'cdef extern from "([\w.]+\.h)"')
_CIMPORT = re.compile(r"^\s*from kipconsumer\.(\w+) cimport", re.M)
_INCLUDE_PXI = re.compile(r'^include "([\w.]+)"', re.M)
_INCLUDE_H = re.compile(r'^#include "([\w.]+\.h)"', re.M)


def c_sources_for(pyx: Path) -> list[str]:
    """The csrc/*.c files a Cython module needs: the csrc headers it (or its own .pxd, a .pxi it
    includes, or a kipconsumer .pxd it cimports) declares with `cdef extern from "x.h"`, each with
    its x.c, closed over the `#include "y.h"` of those headers and sources. Each extension links only
    the C it uses."""
    seen_cy: set[Path] = set()
    todo = [pyx, pyx.with_suffix(".pxd")]  # a module's own .pxd is read without a cimport
    headers: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen_cy or not path.exists():
            continue
        seen_cy.add(path)
        text = path.read_text()
        headers.update(_EXTERN_H.findall(text))
        todo += [PKG / f"{name}.pxd" for name in _CIMPORT.findall(text)]
        todo += [path.parent / name for name in _INCLUDE_PXI.findall(text)]
    sources: set[Path] = set()
    todo_c = [CSRC / h for h in headers]
    seen_c: set[Path] = set()
    while todo_c:
        path = todo_c.pop()
        if path in seen_c or not path.exists():
            continue
        seen_c.add(path)
        todo_c += [CSRC / h for h in _INCLUDE_H.findall(path.read_text())]
        if path.suffix == ".h" and path.with_suffix(".c").exists():
            sources.add(path.with_suffix(".c"))
            todo_c.append(path.with_suffix(".c"))
    return sorted(str(p.relative_to(ROOT)) for p in sources)


def librdkafka_link_args() -> list[str]:
    """Link against the carried librdkafka (only a module that calls it records the dependency)."""
    libs = PKG / LIBS_DIR
    return [f"-L{libs}", f"-Wl,-rpath-link,{libs}", "-Wl,--as-needed", f"-l:{CARRIED_SONAME}",
            "-Wl,--no-as-needed", f"-Wl,-rpath,$ORIGIN/{LIBS_DIR}"]


def extensions() -> list[Extension]:
    headers = sorted(str(p.relative_to(ROOT)) for p in CSRC.glob("*.h"))
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
                sources=[str(pyx.relative_to(ROOT))] + c_sources_for(pyx),
                include_dirs=["csrc"],
                depends=headers,
                extra_compile_args=cflags + ["-std=gnu11", "-Wall", "-Wno-unused-function"],
                extra_link_args=([f"-fsanitize={sanitize}"] if sanitize else []) + librdkafka_link_args(),
            )
        )
    return cythonize(
        exts,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
        quiet=True,
    )


def graft_librdkafka() -> None:
    """kipconsumer/_native_libs/ holds the carried librdkafka (fetched once, cached)."""
    try:
        graft(PKG)
    except CarriedLibraryError as e:
        raise SystemExit(f"kipconsumer build: {e}") from None


def check_compiler(compiler_so: list[str]) -> None:
    """A clear error instead of a compiler's traceback when the sdist cannot be compiled here."""
    missing = []
    if not compiler_so or shutil.which(compiler_so[0]) is None:
        missing.append(f"a C compiler ({compiler_so[0] if compiler_so else 'none configured'!r} not found; "
                       "e.g. apt-get install gcc, or set CC)")
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        missing.append(f"Python's C headers (no Python.h in {include}; e.g. apt-get install python3-dev)")
    if missing:
        raise SystemExit(
            "kipconsumer build: building from source needs " + " and ".join(missing)
            + f"; or install a kipconsumer wheel for Python {sys.version_info[0]}.{sys.version_info[1]}"
        )


class BuildPy(build_py):
    def run(self) -> None:
        graft_librdkafka()
        super().run()


class BuildExt(build_ext):
    def run(self) -> None:
        graft_librdkafka()  # the extensions link against it
        super().run()

    def build_extensions(self) -> None:
        check_compiler(list(getattr(self.compiler, "compiler_so", None) or []))
        super().build_extensions()


setup(ext_modules=extensions(), cmdclass={"build_py": BuildPy, "build_ext": BuildExt})
