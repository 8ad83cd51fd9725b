"""The cross-built ``manylinux_2_28_aarch64`` wheels (scripts/cross_aarch64.py) hold aarch64 code that links.

- the pyconfig.h delta used for CPython versions without Debian arm64 headers switches exactly the
  macros it names, and refuses a header it does not describe;
- (slow) one wheel is cross-built from the sdist: its tag, its module names, every ELF file is AArch64
  (the modules and the carried librdkafka), and every librdkafka function the modules leave undefined
  is exported by the carried aarch64 librdkafka (what the dynamic linker resolves them against);
- (opt-in, ``KIPCONSUMER_EMULATED_TESTS=1``: the arm64 root takes tens of minutes to make the first
  time) the wheel is installed into a venv of Debian's arm64 CPython under qemu-user and
  ``tests/wheel_smoke.py`` runs there.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import cross_aarch64  # noqa: E402

# read, not imported: these tests check foreign-architecture files and need no built checkout
__version__ = runpy.run_path(str(ROOT / "kipconsumer" / "_version.py"))["__version__"]

EM_AARCH64 = 183
VERSION = "3.13"  # Debian sid's arm64 headers and interpreter


def test_pyconfig_delta_switches_exactly_the_named_macros() -> None:
    header = Path(sysconfig.get_paths()["include"]) / "pyconfig.h"
    if not header.is_file():
        pytest.skip(f"no pyconfig.h at {header}")
    before = header.read_text()
    after = cross_aarch64.apply_pyconfig_delta(before)
    changed = {line for line in after.splitlines()} - {line for line in before.splitlines()}
    assert changed <= {
        "/* #undef HAVE_GCC_ASM_FOR_X64 */", "/* #undef HAVE_GCC_ASM_FOR_X87 */",
        "#define HAVE_USABLE_WCHAR_T 1", "#define PY_SUPPORT_TIER 2"}, changed
    assert "/* #undef HAVE_GCC_ASM_FOR_X64 */" in after and "#define HAVE_USABLE_WCHAR_T 1" in after
    assert len(after.splitlines()) == len(before.splitlines())
    with pytest.raises(cross_aarch64.CrossBuildError, match="HAVE_USABLE_WCHAR_T"):
        cross_aarch64.apply_pyconfig_delta(re.sub(r".*HAVE_USABLE_WCHAR_T.*\n", "", before))


def _elf_machine(data: bytes) -> int:
    assert data[:4] == b"\x7fELF" and data[5] == 1, "not a little-endian ELF file"
    return int.from_bytes(data[18:20], "little")


def _dynamic_symbols(path: Path, undefined: bool) -> set[str]:
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(path)], check=True, capture_output=True,
                         text=True).stdout
    names = set()
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 8 and cols[0].endswith(":") and cols[4] in ("GLOBAL", "WEAK"):
            if (cols[6] == "UND") == undefined:
                names.add(cols[7].split("@")[0])
    return names


def _needed_libraries(path: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", "-W", str(path)], check=True, capture_output=True,
                         text=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


#: compiled modules that call no librdkafka function (the thread contract: kipconsumer/_owner.pyx)
WITHOUT_LIBRDKAFKA = frozenset({"_owner"})

@pytest.fixture(scope="module")
def aarch64_dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist-aarch64")
    cmd = [sys.executable, str(ROOT / "scripts" / "build_wheels.py"), "--arch", "aarch64",
           "--python", VERSION,
           "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_cross_built_wheel_is_aarch64_and_links_against_its_carried_librdkafka(
        aarch64_dist: Path, tmp_path: Path) -> None:
    (wheel,) = aarch64_dist.glob("kipconsumer-*.whl")
    tag = f"cp{VERSION.replace('.', '')}"
    assert wheel.name.startswith(f"kipconsumer-{__version__}-{tag}-{tag}-")
    assert "manylinux_2_28_aarch64" in wheel.name
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "wheel")
    modules = sorted((tmp_path / "wheel" / "kipconsumer").glob("_*.so"))
    expected = sorted(p.stem for p in (ROOT / "kipconsumer").glob("_*.pyx"))
    assert [m.name.split(".")[0] for m in modules] == expected
    assert all(m.name.endswith(cross_aarch64.ext_suffix(VERSION)) for m in modules), modules
    elves = [p for p in (tmp_path / "wheel").rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]
    assert {p.name: _elf_machine(p.read_bytes()) for p in elves} == {p.name: EM_AARCH64 for p in elves}
    assert not list((tmp_path / "wheel").rglob("*.pyx")) and not list((tmp_path / "wheel").rglob("*.c"))

    carried = sorted((tmp_path / "wheel" / "kipconsumer" / "_native_libs").glob("librdkafka*.so*"))
    assert len(carried) == 1, carried
    librdkafka = carried[0]
    assert librdkafka.name == "librdkafka-kipc.so.1"
    assert "kc_alloc_free" in _dynamic_symbols(librdkafka, undefined=True), "not bound to jemalloc"
    assert (librdkafka.parent / "libkipconsumer-jemalloc.so.2").is_file()
    exported = _dynamic_symbols(librdkafka, undefined=False)
    for module in modules:
        needed = {s for s in _dynamic_symbols(module, undefined=True) if s.startswith("rd_kafka")}
        libraries = _needed_libraries(module)
        if module.name.split(".")[0] in WITHOUT_LIBRDKAFKA:
            assert not needed, (module.name, sorted(needed))
            assert librdkafka.name not in libraries, module.name
            continue
        assert needed, f"{module.name} calls no rd_kafka_* function?"
        assert needed <= exported, (module.name, sorted(needed - exported))
        assert librdkafka.name in libraries, (module.name, libraries)  # linked: no other librdkafka binds


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("KIPCONSUMER_EMULATED_TESTS") != "1",
                    reason="opt-in: KIPCONSUMER_EMULATED_TESTS=1 (qemu-user, an arm64 Debian root)")
def test_aarch64_wheel_passes_the_smoke_test_under_emulation(aarch64_dist: Path) -> None:
    import emulated_aarch64

    (wheel,) = aarch64_dist.glob("kipconsumer-*.whl")
    result = emulated_aarch64.smoke(VERSION, wheel, ROOT / "tests" / "wheel_smoke.py", __version__)
    assert result.last_line.startswith("wheel smoke: ok"), result
    assert "Python 3.13" in result.last_line, result.last_line
