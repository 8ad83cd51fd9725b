"""kipconsumer loads the librdkafka it carries, not confluent-kafka's (issue #36).

The checkout under test was built with ``setup.py build_ext --inplace`` (or ``pip install -e .``),
which grafts the library into ``kipconsumer/_native_libs/``. Each import runs in a fresh
interpreter, so what it maps is what ``import kipconsumer`` chose.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from build_support import carried_librdkafka
from kipconsumer import _loader

ROOT = Path(__file__).resolve().parent.parent

_REPORT = """
import kipconsumer
maps = open('/proc/self/maps').read()
rdk = sorted({line.split()[-1] for line in maps.splitlines() if 'librdkafka' in line})
print(kipconsumer.librdkafka_version()[0])
print('\\n'.join(rdk))
"""


def _import(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != _loader.OVERRIDE_ENV}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), base.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env={**base, **(env or {})}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_import_loads_the_carried_librdkafka_and_only_it() -> None:
    out = _import(_REPORT)
    assert out.returncode == 0, out.stderr
    version, *mapped = out.stdout.split()
    assert mapped == [os.path.join(_loader.CARRIED_DIR, os.path.basename(mapped[0]))], mapped
    assert not any("confluent_kafka" in m for m in mapped), mapped
    assert version == "2.16.0"  # what confluent-kafka 2.16.1's wheel holds


def test_kipconsumer_imports_and_runs_without_confluent_kafka() -> None:
    code = ("import sys; sys.modules['confluent_kafka'] = None\n"  # any import of it raises ImportError
            "import kipconsumer\n"
            "from kipconsumer.broker import EmbeddedBroker\n"
            "with EmbeddedBroker(num_brokers=1) as b:\n"
            "    b.create_topic('t', partitions=1)\n"
            "    with kipconsumer.KafkaProducer({'bootstrap.servers': b.bootstrap_servers}) as p:\n"
            "        print(p.send('t', value=b'x').result(10).offset)\n")
    out = _import(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "0"


def test_override_env_loads_that_library(tmp_path: Path) -> None:
    other = tmp_path / "librdkafka-experiment.so.1"
    shutil.copyfile(_loader.librdkafka_path(), other)
    for sibling in Path(_loader.CARRIED_DIR).glob("libkipconsumer-*.so*"):  # a bound library's allocator
        shutil.copyfile(sibling, tmp_path / sibling.name)
    out = _import(_REPORT, {_loader.OVERRIDE_ENV: str(other)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[1:] == [str(other)]


def test_override_env_naming_no_file_is_an_import_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.so.1"
    out = _import("import kipconsumer", {_loader.OVERRIDE_ENV: str(missing)})
    assert out.returncode != 0
    assert "ImportError" in out.stderr and _loader.OVERRIDE_ENV in out.stderr and str(missing) in out.stderr


def _a_wheel(tmp_path: Path, members: dict[str, bytes]) -> Path:
    wheel = tmp_path / "confluent_kafka-0-cp313-cp313-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return wheel


def _elf_library(tmp_path: Path, soname: str) -> bytes:
    """A real (empty) ELF shared library named ``soname``, compiled here."""
    src, lib = tmp_path / "empty.c", tmp_path / soname
    src.write_text("int kc_test_marker(void) { return 1; }\n")
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(lib),
                    str(src)], check=True, timeout=60)
    return lib.read_bytes()


def test_graft_copies_the_library_renamed_and_licences_and_replaces_another_graft(tmp_path: Path) -> None:
    first = _a_wheel(tmp_path, {"confluent_kafka.libs/librdkafka-aaaaaaaa.so.1":
                                _elf_library(tmp_path, "librdkafka-aaaaaaaa.so.1"),
                                "confluent_kafka-0.dist-info/licenses/LICENSE": b"Apache and OpenSSL"})
    lib = carried_librdkafka.graft(tmp_path, first)
    assert lib == tmp_path / "_native_libs" / carried_librdkafka.CARRIED_SONAME
    assert carried_librdkafka.read_soname(lib) == carried_librdkafka.CARRIED_SONAME
    assert (tmp_path / "_native_libs" / carried_librdkafka.LICENSE_NAME).read_bytes() == b"Apache and OpenSSL"
    assert first.name in (tmp_path / "_native_libs" / carried_librdkafka.SOURCE_NAME).read_text()
    assert carried_librdkafka.graft(tmp_path, first) == lib  # idempotent

    second_dir = tmp_path / "second"
    second_dir.mkdir()
    second = _a_wheel(second_dir, {"confluent_kafka.libs/librdkafka-bbbbbbbb.so.1":
                                   _elf_library(second_dir, "librdkafka-bbbbbbbb.so.1"),
                                   "confluent_kafka-0.dist-info/licenses/LICENSE": b"L"})
    assert carried_librdkafka.graft(tmp_path, second) == lib
    grafted = sorted(p.name for p in (tmp_path / "_native_libs").glob("*.so*"))
    assert grafted == [carried_librdkafka.CARRIED_SONAME]
    assert second.name in (tmp_path / "_native_libs" / carried_librdkafka.SOURCE_NAME).read_text()


def test_the_loader_and_the_graft_name_the_same_soname() -> None:
    assert _loader.CARRIED_SONAME == carried_librdkafka.CARRIED_SONAME  # the loader cannot import the build's


def test_set_soname_refuses_a_longer_name_and_a_file_that_is_no_library(tmp_path: Path) -> None:
    lib = tmp_path / "short.so"
    lib.write_bytes(_elf_library(tmp_path, "libs.so.1"))
    with pytest.raises(carried_librdkafka.CarriedLibraryError, match="longer than the 9 bytes"):
        carried_librdkafka.set_soname(lib, "libmuchlonger.so.1")
    carried_librdkafka.set_soname(lib, "libt.so")
    assert carried_librdkafka.read_soname(lib) == "libt.so"
    (tmp_path / "text.so").write_bytes(b"not an ELF file")
    with pytest.raises(carried_librdkafka.CarriedLibraryError, match="not a little-endian ELF64"):
        carried_librdkafka.read_soname(tmp_path / "text.so")


_BOTH_CLIENTS = """
import sys
first, second = sys.argv[1:3]
__import__(first); __import__(second)
import confluent_kafka, confluent_kafka.admin, kipconsumer
from kipconsumer.broker import EmbeddedBroker
with EmbeddedBroker(num_brokers=1) as b:
    b.create_topic('t', partitions=1)
    admin = confluent_kafka.admin.AdminClient({'bootstrap.servers': b.bootstrap_servers})
    assert 't' in admin.list_topics(timeout=10).topics
    p = confluent_kafka.Producer({'bootstrap.servers': b.bootstrap_servers})
    p.produce('t', b'from confluent'); assert p.flush(10) == 0
    with kipconsumer.KafkaProducer({'bootstrap.servers': b.bootstrap_servers}) as kp:
        kp.send('t', value=b'from kipconsumer').result(10)
    c = kipconsumer.KafkaConsumer({'bootstrap.servers': b.bootstrap_servers, 'auto.offset.reset': 'earliest'})
    c.assign([kipconsumer.TopicPartition('t', 0)])
    values = []
    for _ in range(100):
        values += [r.value for r in c.poll(200)]
        if len(values) == 2:
            break
    c.close()
    assert values == [b'from confluent', b'from kipconsumer'], values
maps = open('/proc/self/maps').read()
print('\\n'.join(sorted({line.split()[-1] for line in maps.splitlines() if 'librdkafka' in line})))
"""


@pytest.mark.parametrize("order", [("kipconsumer", "confluent_kafka"), ("confluent_kafka", "kipconsumer")])
def test_confluent_kafka_in_the_same_process_keeps_its_own_librdkafka(order: tuple[str, str]) -> None:
    """Neither client binds to the other's librdkafka, whichever is imported first: ours may allocate
    with the bundled jemalloc, and confluent-kafka frees some of what its library returns with libc's
    free() (a crash when that library was ours)."""
    pytest.importorskip("confluent_kafka")
    env = {k: v for k, v in os.environ.items() if k != _loader.OVERRIDE_ENV}
    out = subprocess.run([sys.executable, "-c", _BOTH_CLIENTS, *order], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**env, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    mapped = out.stdout.split()
    assert len(mapped) == 2, mapped
    assert os.path.join(_loader.CARRIED_DIR, carried_librdkafka.CARRIED_SONAME) in mapped, mapped
    assert any("confluent_kafka.libs" in m for m in mapped), mapped


def test_graft_refuses_a_wheel_without_librdkafka(tmp_path: Path) -> None:
    wheel = _a_wheel(tmp_path, {"confluent_kafka/__init__.py": b""})
    with pytest.raises(carried_librdkafka.CarriedLibraryError, match="no confluent_kafka.libs/librdkafka"):
        carried_librdkafka.graft(tmp_path, wheel)
    assert not (tmp_path / "_native_libs").exists()


def test_a_build_without_a_c_compiler_says_what_is_missing(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for part in ("csrc", "kipconsumer", "build_support"):
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("*.so", "_*.c", "__pycache__"))
    for part in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / part, src / part)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(CC="/nonexistent/cc", KIPCONSUMER_EXTS="_native")
    out = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=src, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "building from source needs a C compiler" in out.stderr, out.stderr
    assert "/nonexistent/cc" in out.stderr, out.stderr


def test_the_index_file_picked_is_the_platform_wheel_of_the_version_a_gil_build_first() -> None:
    files = [{"filename": f"confluent_kafka-{v}-{tag}-manylinux_2_28_{m}.whl", "hashes": {}}
             for v in ("2.16.0", "2.16.1") for m in ("x86_64", "aarch64")
             for tag in ("cp314-cp314t", "cp310-cp310")]
    files += [{"filename": "confluent_kafka-2.16.1.tar.gz", "hashes": {}}]
    picked = carried_librdkafka._pick(files, "manylinux_2_28_aarch64", "2.16.1")
    assert picked["filename"] == "confluent_kafka-2.16.1-cp310-cp310-manylinux_2_28_aarch64.whl"
    with pytest.raises(carried_librdkafka.CarriedLibraryError, match="no wheel for musllinux_1_2_x86_64"):
        carried_librdkafka._pick(files, "musllinux_1_2_x86_64", "2.16.1")
