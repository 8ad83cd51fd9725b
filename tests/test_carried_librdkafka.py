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


def test_graft_copies_the_library_and_licences_and_replaces_another_graft(tmp_path: Path) -> None:
    first = _a_wheel(tmp_path, {"confluent_kafka.libs/librdkafka-aaaa.so.1": b"ELF-a",
                                "confluent_kafka-0.dist-info/licenses/LICENSE": b"Apache and OpenSSL"})
    lib = carried_librdkafka.graft(tmp_path, first)
    assert lib == tmp_path / "_native_libs" / "librdkafka-aaaa.so.1" and lib.read_bytes() == b"ELF-a"
    assert (tmp_path / "_native_libs" / carried_librdkafka.LICENSE_NAME).read_bytes() == b"Apache and OpenSSL"
    assert first.name in (tmp_path / "_native_libs" / carried_librdkafka.SOURCE_NAME).read_text()
    assert carried_librdkafka.graft(tmp_path, first) == lib  # idempotent

    second_dir = tmp_path / "second"
    second_dir.mkdir()
    second = _a_wheel(second_dir, {"confluent_kafka.libs/librdkafka-bbbb.so.1": b"ELF-b",
                                   "confluent_kafka-0.dist-info/licenses/LICENSE": b"L"})
    assert carried_librdkafka.graft(tmp_path, second).name == "librdkafka-bbbb.so.1"
    assert sorted(p.name for p in (tmp_path / "_native_libs").glob("*.so*")) == ["librdkafka-bbbb.so.1"]


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
