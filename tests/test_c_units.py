"""Build and run the C unit tests in tests/c/ (see tests/c/README.md).

Each ``tests/c/test_*.c`` is compiled together with every ``csrc/*.c`` (a superset of
what any extension links, see setup.py ``c_sources_for``) into a stand-alone program linked against
the librdkafka shared library kipconsumer carries (``_loader.librdkafka_path()``), then run directly and, when
valgrind is installed, under ``valgrind --error-exitcode=1 --leak-check=full``.
A program passes when it exits 0 and its last line is ``N passed, 0 failed``.
Binaries are built in a pytest temporary directory, never in the checkout.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
C_DIR = ROOT / "tests" / "c"
C_TESTS = sorted(C_DIR.glob("test_*.c"))
CFLAGS = ["-std=gnu11", "-Wall", "-O2", "-g"]
RESULT_RE = re.compile(r"^(\d+) passed, (\d+) failed\s*$")


def _librdkafka_path() -> str:
    try:
        from kipconsumer import _loader
    except ImportError:
        # The package imports its extension modules; if those are not built (or are being
        # rebuilt by someone else), load the stand-alone loader module by path instead.
        spec = importlib.util.spec_from_file_location("_kc_loader", ROOT / "kipconsumer" / "_loader.py")
        assert spec is not None and spec.loader is not None
        _loader = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_loader)
    return _loader.librdkafka_path()


def _compile(src: Path, out_dir: Path) -> Path:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip(f"C compiler {cc!r} not on PATH")
    lib = _librdkafka_path()
    lib_dir, lib_name = os.path.dirname(lib), os.path.basename(lib)
    exe = out_dir / src.stem
    cmd = [
        cc,
        *CFLAGS,
        f"-I{CSRC}",
        # Harmless for pure-C sources; lets a csrc file that includes Python.h compile.
        f"-I{sysconfig.get_paths()['include']}",
        str(src),
        *(str(p) for p in sorted(CSRC.glob("*.c"))),
        "-o",
        str(exe),
        f"-L{lib_dir}",
        f"-l:{lib_name}",
        f"-Wl,-rpath,{lib_dir}",
        "-pthread",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"compile failed: {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    if proc.stderr.strip():
        print(f"compiler output for {src.name}:\n{proc.stderr}", file=sys.stderr)
    return exe


@pytest.fixture(scope="session")
def c_binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Lazily built test binaries, one per tests/c/test_*.c, shared by the session."""
    return {}


def _binary(c_binaries: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, src: Path) -> Path:
    if src.name not in c_binaries:
        c_binaries[src.name] = _compile(src, tmp_path_factory.mktemp("c_" + src.stem))
    return c_binaries[src.name]


def _check_result(proc: subprocess.CompletedProcess[str], what: str) -> None:
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    detail = f"{what} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-20000:]}"
    assert proc.returncode == 0, detail
    assert lines, detail
    m = RESULT_RE.match(lines[-1])
    assert m is not None, f"last line is not 'N passed, M failed'\n{detail}"
    assert m.group(2) == "0" and "0 failed" in lines[-1], detail
    assert int(m.group(1)) > 0, detail


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


@pytest.mark.parametrize("src", C_TESTS, ids=_ids(C_TESTS))
def test_c_unit(src: Path, c_binaries: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> None:
    exe = _binary(c_binaries, tmp_path_factory, src)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, cwd=exe.parent)
    _check_result(proc, exe.name)


@pytest.mark.parametrize("src", C_TESTS, ids=_ids(C_TESTS))
def test_c_unit_valgrind(
    src: Path, c_binaries: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        reason = "valgrind not on PATH: memory checks of the C unit tests skipped"
        print(reason)
        pytest.skip(reason)
    exe = _binary(c_binaries, tmp_path_factory, src)
    cmd = [valgrind, "--error-exitcode=1", "--leak-check=full", "--quiet",
           f"--suppressions={C_DIR / 'valgrind.supp'}", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=exe.parent)
    _check_result(proc, f"valgrind {exe.name}")
