"""The native core under AddressSanitizer + UndefinedBehaviorSanitizer (slow; opt-in: -m slow runs it).

1. ``tests/c/test_*.c`` compiled with every ``csrc/*.c`` and ``-fsanitize=address,undefined`` (leak
   detection on): every C unit test passes with no sanitizer report.
2. The extension modules built with ``KIPCONSUMER_SANITIZE=address,undefined`` into a temporary build
   directory (``setup.py build_ext -b TMP -t TMP``, never in place; serialised with ``build.sh``'s lock),
   then a consume/produce workload run in a subprocess with ``LD_PRELOAD`` of libasan,
   ``ASAN_OPTIONS=detect_leaks=0`` (CPython itself leaks at exit) and ``PYTHONPATH`` pointing at the
   temporary build: it must finish and print no AddressSanitizer or UBSan report.

Set ``KIP_SANITIZER_BUILD=/path`` to reuse an existing sanitizer build directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import test_c_units  # tests/ is on sys.path (rootdir conftest)

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

REPORT_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                  "SUMMARY: UndefinedBehaviorSanitizer")


def _gcc_lib(name: str) -> str | None:
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        return None
    out = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return out if out and os.path.isabs(out) and os.path.exists(out) else None


def _reports(text: str) -> list[str]:
    return [line for line in text.splitlines() if any(m in line for m in REPORT_MARKERS)]


@pytest.mark.parametrize("src", test_c_units.C_TESTS, ids=[p.stem for p in test_c_units.C_TESTS])
def test_c_units_under_asan_ubsan(src: Path, tmp_path: Path) -> None:
    if _gcc_lib("libasan.so") is None:
        pytest.skip("libasan not available")
    old = list(test_c_units.CFLAGS)
    test_c_units.CFLAGS[:] = ["-std=gnu11", "-Wall", "-O1", "-g", "-fno-omit-frame-pointer",
                              "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    try:
        exe = test_c_units._compile(src, tmp_path)
    finally:
        test_c_units.CFLAGS[:] = old
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert not _reports(out), out[-6000:]
    assert proc.returncode == 0, out[-4000:]
    last = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1]
    m = test_c_units.RESULT_RE.match(last)
    assert m and m.group(2) == "0", last


WORKLOAD = textwrap.dedent('''
    import time
    import kipconsumer
    assert "asan" in kipconsumer.__file__, kipconsumer.__file__
    from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
    from kipconsumer.broker import EmbeddedBroker
    from kipconsumer.errors import KafkaError

    with EmbeddedBroker(num_brokers=2) as b:
        b.create_topic("san", 4)
        b.create_topic("small", 1)
        with KafkaProducer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 2}) as p:
            futs = [p.send("san", value=b"v" * (i % 300), key=None if i % 7 == 0 else f"k{i}",
                           headers=[("h", b"x"), ("n", None)] if i % 3 == 0 else None)
                    for i in range(6000)]
            p.flush(60)
            assert all(f.result(0).offset >= 0 for f in futs)
            try:
                p.send("san", b"v", partition=99)
            except KafkaError:
                pass
        kept = None
        with KafkaConsumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "san-g",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False,
                            "max.poll.records": 100, "session.timeout.ms": 6000}) as c:
            c.subscribe(["san"])
            seen = 0
            deadline = time.monotonic() + 60
            while seen < 6000 and time.monotonic() < deadline:
                recs = c.poll(0.5)
                for r in recs:
                    _ = (r.key, r.value, r.headers, r.timestamp, r.topic)
                seen += len(recs)
                if len(recs) and kept is None:
                    kept = recs
                    try:
                        kept.to_arrow(headers=True)  # also csrc/arrow_headers.c
                    except ImportError:
                        pass
                if seen and seen % 1000 < 100:
                    c.commit_sync()
                    tp = TopicPartition("san", 0)
                    if tp in c.assignment():
                        c.pause([tp])
                        seen += len(c.poll(0))
                        c.resume([tp])
            assert seen >= 6000, seen
            c.commit_async()
            tp = sorted(c.assignment())[0]
            c.seek(tp, 0)
            c.poll(0.5)
            c.committed(sorted(c.assignment()))
            c.end_offsets(sorted(c.assignment()))
        # a batch kept after close() stays readable
        assert len([r.value for r in kept]) == len(kept)
        del kept
        # manual assignment, several open/close cycles
        for i in range(5):
            with KafkaConsumer({"bootstrap.servers": b.bootstrap_servers,
                                "auto.offset.reset": "earliest"}) as c:
                c.assign([TopicPartition("san", i % 4)])
                c.poll(0.3)
                c.wakeup()
                try:
                    c.poll(0.1)
                except KafkaError:
                    pass
    print("WORKLOAD OK", flush=True)
''')


def _build(tmp: Path) -> Path:
    given = os.environ.get("KIP_SANITIZER_BUILD")
    if given:
        return Path(given)
    lib = tmp / "asan" / "lib"
    env = dict(os.environ, KIPCONSUMER_SANITIZE="address,undefined", KIPCONSUMER_DEBUG_BUILD="1")
    env.pop("KIPCONSUMER_EXTS", None)
    # setup.py's extensions, built by a Distribution that does not read pyproject.toml (the build
    # needs only the extension list; metadata validation depends on the setuptools version)
    out, tmpdir = str(lib), str(tmp / "asan" / "tmp")
    script = textwrap.dedent(f"""
        import os, sys, setuptools
        from setuptools.dist import Distribution
        def fake_setup(**kw):
            d = Distribution(dict(kw, name="kipconsumer", script_name="setup.py",
                                  script_args=["build_ext", "-q", "-b", {out!r}, "-t", {tmpdir!r}]))
            d.parse_command_line()
            d.run_commands()
        setuptools.setup = fake_setup
        sys.argv = ["setup.py"]
        exec(compile(open("setup.py").read(), "setup.py", "exec"),
             {{"__file__": os.path.abspath("setup.py"), "__name__": "__main__"}})
    """)
    cmd = ["flock", "/tmp/kipconsumer-build.lock", sys.executable, "-c", script]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return lib


@pytest.fixture(scope="module")
def asan_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The sanitizer build (once per module) and the environment that runs Python on it."""
    asan = _gcc_lib("libasan.so")
    if asan is None:
        pytest.skip("libasan not available")
    lib = _build(tmp_path_factory.mktemp("san"))
    pkg = lib / "kipconsumer"
    sos = list(pkg.glob("_consumer*.so"))
    assert sos, f"no sanitizer build in {pkg}"
    assert b"libasan.so" in sos[0].read_bytes(), "the build is not linked with AddressSanitizer"
    for py in (ROOT / "kipconsumer").glob("*.py"):  # the pure-Python package next to the .so files
        shutil.copy2(py, pkg / py.name)
    # and the librdkafka the checkout carries (kipconsumer/_native_libs/, grafted by the checkout's build)
    shutil.copytree(ROOT / "kipconsumer" / "_native_libs", pkg / "_native_libs", dirs_exist_ok=True)
    env = dict(os.environ, LD_PRELOAD=asan, PYTHONPATH=str(lib), PYTHONMALLOC="malloc",
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:detect_odr_violation=0",
               UBSAN_OPTIONS="print_stacktrace=1")
    return lib, env


def test_concurrency_fuzzer_under_asan(asan_build: tuple[Path, dict[str, str]]) -> None:
    """tests/fuzz_concurrency.py on the sanitizer build: threads, re-entrant callbacks, SIGINTs."""
    import test_fuzz

    lib, env = asan_build
    script = lib.parent / "fuzz_concurrency.py"
    shutil.copy2(ROOT / "tests" / "fuzz_concurrency.py", script)
    summary, out = test_fuzz.run_fuzzer(test_fuzz.SECONDS, test_fuzz.SEEDS[0], env=env, cwd=lib.parent,
                                        script=script)
    assert not _reports(out), "\n".join(_reports(out)) + "\n" + out[-8000:]
    print(f"fuzzer under ASan: {summary['ops']} operations, {summary['futures']} futures")
    assert summary["unresolved"] == 0 and summary["resolved_twice"] == 0 and not summary["hung_threads"]


def test_workload_under_asan(asan_build: tuple[Path, dict[str, str]]) -> None:
    lib, env = asan_build
    script = lib.parent / "workload.py"
    script.write_text(WORKLOAD)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=str(lib.parent))
    out = proc.stdout + proc.stderr
    reports = _reports(out)
    assert not reports, "\n".join(reports) + "\n" + out[-8000:]
    assert proc.returncode == 0 and "WORKLOAD OK" in proc.stdout, out[-6000:]
