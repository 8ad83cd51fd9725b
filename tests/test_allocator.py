"""librdkafka bound to the bundled jemalloc (issue #37): no memory crosses allocators the wrong way.

``scripts/native_bundle.py`` writes a copy of the installed librdkafka whose allocation imports name
``libkipconsumer-jemalloc.so.2`` (jemalloc built here, ``kcje_`` prefix, plus ``csrc/alloc/``);
``KIPCONSUMER_LIBRDKAFKA`` loads it. The workload runs in a child process where a wrong free is loud:

- ``KIPCONSUMER_ALLOC_STRICT=1``: librdkafka's free/realloc abort on memory the bundled jemalloc did
  not allocate (kipconsumer must hand librdkafka only ``rd_kafka_mem_malloc`` memory);
- glibc's malloc checking (``libc_malloc_debug.so.0`` with ``glibc.malloc.check=3``,
  ``PYTHONMALLOC=malloc``): libc's free() of jemalloc memory aborts ("free(): invalid pointer");
- jemalloc's junk filling (``KCJE_MALLOC_CONF=junk:true``): use of freed memory reads garbage.

The two negative controls prove each check fires on the mismatch it guards. The jemalloc build
(first run: download from Debian's pool, a few minutes) is cached under ~/.cache/kipconsumer/.

The checkout's own librdkafka is bound as the wheels' is (``./dev.sh setup``); these tests bind a copy
of it (idempotent) and compare with a fresh, unbound graft of confluent-kafka's library.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import native_bundle  # noqa: E402

MALLOC_DEBUG = Path("/lib/x86_64-linux-gnu/libc_malloc_debug.so.0")


@pytest.fixture(scope="module")
def bound_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bound copy of the installed librdkafka, in its own directory with the bundled jemalloc."""
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the test builds the x86_64 jemalloc; aarch64 is built by the wheel scripts")
    if shutil.which("autoconf") is None and not native_bundle.CACHE.exists():
        pytest.skip("building jemalloc needs autoconf (apt-get install autoconf)")
    return native_bundle.bound_copy(tmp_path_factory.mktemp("bound"), "x86_64")


@pytest.fixture(scope="module")
def plain_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The carried librdkafka as grafted, not bound: glibc's malloc."""
    from build_support import carried_librdkafka

    lib = carried_librdkafka.graft(tmp_path_factory.mktemp("plain"))
    assert not native_bundle.is_bound(lib)
    return lib


def _checked_env(lib: Path | None, strict: bool = True) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONMALLOC="malloc", KCJE_MALLOC_CONF="junk:true")
    env.pop("KIPCONSUMER_LIBRDKAFKA", None)
    if lib is not None:
        env["KIPCONSUMER_LIBRDKAFKA"] = str(lib)
    if strict:
        env["KIPCONSUMER_ALLOC_STRICT"] = "1"
    if MALLOC_DEBUG.exists():
        env["LD_PRELOAD"] = str(MALLOC_DEBUG)
        env["GLIBC_TUNABLES"] = "glibc.malloc.check=3"
    return env


def _run(code: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_bound_librdkafka_imports_no_allocation_function_from_libc(bound_lib: Path) -> None:
    undefined, _ = native_bundle.dynamic_symbols(bound_lib)
    assert not undefined & set(native_bundle.RENAMES), sorted(undefined & set(native_bundle.RENAMES))
    assert not native_bundle.allocating_imports(bound_lib)
    assert {"kcje_malloc", "kcje_calloc", "kc_alloc_free", "kc_alloc_realloc", "kc_alloc_strdup"} <= undefined
    needed = subprocess.run([native_bundle._patchelf(), "--print-needed", str(bound_lib)],
                            capture_output=True, text=True, check=True).stdout.split()
    assert native_bundle.SONAME in needed
    assert (bound_lib.parent / native_bundle.SONAME).exists()
    jemalloc = bound_lib.parent / native_bundle.SONAME
    _, exported = native_bundle.dynamic_symbols(jemalloc)
    assert "malloc" not in exported and "free" not in exported, "the bundled jemalloc must not replace libc's"
    assert max(native_bundle.glibc_versions(jemalloc)) <= (2, 28), "the wheels are manylinux_2_28"


def test_a_program_links_and_runs_against_the_bound_copy(bound_lib: Path, tmp_path: Path) -> None:
    """The renamed imports carry no libc symbol version, so ld links against the bound copy (as
    bench/c/raw_consumer.c does) and the program finds the bundled jemalloc through $ORIGIN."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    src = tmp_path / "v.c"
    src.write_text("#include <stdio.h>\nint rd_kafka_version(void);\n"
                   "int main(void) { printf(\"%x\\n\", rd_kafka_version()); return 0; }\n")
    exe = tmp_path / "v"
    subprocess.run(["cc", "-o", str(exe), str(src), f"-L{bound_lib.parent}", f"-l:{bound_lib.name}",
                    f"-Wl,-rpath,{bound_lib.parent}"], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and int(out.stdout, 16) >= 0x020600FF, out.stdout + out.stderr


def test_native_build_info_names_the_allocator(bound_lib: Path, plain_lib: Path) -> None:
    code = """
        import kipconsumer
        info = kipconsumer.native_build_info()
        print(info["allocator"]); print(info["librdkafka_path"]); print(info["librdkafka_version"])
        print(",".join(info["features"]))
    """
    bound = _run(code, _checked_env(bound_lib))
    assert bound.returncode == 0, bound.stderr[-3000:]
    allocator, path, version, features = bound.stdout.splitlines()
    assert allocator.startswith(f"jemalloc {native_bundle.JEMALLOC_VERSION}-0-g")
    assert allocator.endswith("(bundled)")
    assert path == str(bound_lib) and version.count(".") == 2
    assert "ssl" in features.split(",") and "zstd" in features.split(",")
    plain = _run(code, _checked_env(plain_lib))
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.stdout.splitlines()[0] == "libc"


#: The start of a child script that reads the bundled jemalloc's settings: ``mallctl`` and ``loader``.
MALLCTL_PRELUDE = """
    import ctypes
    import kipconsumer._loader as loader
    import kipconsumer  # noqa: F401  (loads the library)
    size_p = ctypes.POINTER(ctypes.c_size_t)
    mallctl = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, size_p, ctypes.c_void_p,
                               ctypes.c_size_t)(loader.allocator_mallctl())
"""

OVERSIZE_THRESHOLD = MALLCTL_PRELUDE + """
    value, size = ctypes.c_size_t(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
    assert mallctl(b"opt.oversize_threshold", ctypes.byref(value), ctypes.byref(size), None, 0) == 0
    print(value.value)
"""


def test_the_bundled_jemalloc_keeps_fetch_response_buffers_in_its_arenas(bound_lib: Path) -> None:
    """opt.oversize_threshold is 0 by default (bound_alloc.c's malloc_conf): a fetch response buffer over
    jemalloc's 8 MiB default is not given an arena that returns its pages at once (docs/benchmarks.md:
    3x the page faults); $KCJE_MALLOC_CONF still overrides it."""
    default = _run(OVERSIZE_THRESHOLD, _checked_env(bound_lib))
    assert default.returncode == 0, default.stderr[-3000:]
    assert int(default.stdout) == 0
    env = _checked_env(bound_lib)
    env["KCJE_MALLOC_CONF"] = "oversize_threshold:8388608"
    override = _run(OVERSIZE_THRESHOLD, env)
    assert override.returncode == 0, override.stderr[-3000:]
    assert int(override.stdout) == 8 << 20


IDLE_PURGE = MALLCTL_PRELUDE + """
    import os, time
    on, size = ctypes.c_bool(), ctypes.c_size_t(1)
    assert mallctl(b"background_thread", ctypes.byref(on), ctypes.byref(size), None, 0) == 0
    rdk = ctypes.CDLL(loader.loaded_path())
    rdk.rd_kafka_mem_malloc.restype = ctypes.c_void_p
    rdk.rd_kafka_mem_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    rdk.rd_kafka_mem_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

    def rss_mib():
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def churn():  # 64 MiB through librdkafka's allocator, touched, then freed: jemalloc's dirty pages
        chunks = [rdk.rd_kafka_mem_malloc(None, 1 << 20) for _ in range(64)]
        for p in chunks:
            ctypes.memset(p, 1, 1 << 20)
        for p in chunks:
            rdk.rd_kafka_mem_free(None, p)

    churn()
    peak = rss_mib()
    time.sleep(2.0)  # idle: no thread of this process allocates or frees through jemalloc
    idle = rss_mib()
    threads = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    child = os.fork()
    if child == 0:  # jemalloc's fork handlers stop the thread in the child, which purges inline again
        churn()
        os._exit(0)
    _, status = os.waitpid(child, 0)
    print(on.value, round(peak - idle), threads.count("jemalloc_bg_thd"), status)
"""


def test_the_bundled_jemalloc_returns_idle_memory_from_its_own_thread(bound_lib: Path) -> None:
    """background_thread:true (bound_alloc.c's malloc_conf): one jemalloc thread returns freed pages to
    the system on jemalloc's decay schedule, also while every other thread is idle, and no poll() pays
    for the purge (docs/benchmarks.md, "Poll latency"); a forked child allocates and
    exits normally. $KCJE_MALLOC_CONF=background_thread:false turns it off: then pages freed before an
    idle spell stay resident through it (the control)."""
    env = _checked_env(bound_lib)
    env["KCJE_MALLOC_CONF"] = "junk:true,dirty_decay_ms:200,muzzy_decay_ms:0"
    on = _run(IDLE_PURGE, env)
    assert on.returncode == 0, on.stderr[-3000:]
    enabled, released, bg_threads, child_status = on.stdout.split()
    assert (enabled, bg_threads, child_status) == ("True", "1", "0"), on.stdout
    assert int(released) >= 48, f"only {released} of 64 MiB freed returned to the system while idle"
    env["KCJE_MALLOC_CONF"] += ",background_thread:false"
    off = _run(IDLE_PURGE, env)
    assert off.returncode == 0, off.stderr[-3000:]
    enabled, released, bg_threads, child_status = off.stdout.split()
    assert (enabled, bg_threads, child_status) == ("False", "0", "0"), off.stdout
    assert int(released) < 16, f"{released} MiB returned while idle without the background thread"


WORKLOAD = """
    import json, time
    from kipconsumer import (KafkaConsumer, KafkaProducer, KafkaShareConsumer, OffsetAndMetadata,
                             TopicPartition)
    from kipconsumer.broker import EmbeddedBroker
    from kipconsumer.errors import KafkaError

    stats = []
    with EmbeddedBroker(num_brokers=2) as b:
        b.create_topic("alloc", 3)
        with KafkaProducer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 2,
                            "statistics.interval.ms": 100}) as p:
            futs = [p.send("alloc", value=b"v" * (i % 500), key=None if i % 5 == 0 else b"k%d" % i,
                           headers=[("h", b"x" * (i % 40)), ("n", None)] if i % 3 == 0 else None)
                    for i in range(3000)]
            p.flush(60)
            assert all(f.result(0).offset >= 0 for f in futs)
            p.metrics()
        with KafkaProducer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": "alloc-tx"}) as tx:
            tx.init_transactions(timeout=30)
            tx.begin_transaction()
            tx.send("alloc", b"in-tx", partition=0)
            tx.commit_transaction(timeout=30)
        conf = {"bootstrap.servers": b.bootstrap_servers, "group.id": "alloc-g",
                "auto.offset.reset": "earliest", "enable.auto.commit": False, "max.poll.records": 200,
                "session.timeout.ms": 6000,
                "statistics.interval.ms": 100, "stats_cb": stats.append}
        with KafkaConsumer(conf) as c:
            c.subscribe(["alloc"])
            seen, deadline = 0, time.monotonic() + 60
            while seen < 3001 and time.monotonic() < deadline:
                recs = c.poll(0.5)
                for r in recs:
                    _ = (r.key, r.value, r.headers, r.timestamp)
                if len(recs):
                    try:
                        recs.to_arrow(headers=True)
                    except ImportError:
                        pass
                seen += len(recs)
            assert seen == 3001, seen
            assignment = sorted(c.assignment())
            c.commit_sync({tp: OffsetAndMetadata(1, f"meta-{tp.partition}" * 20) for tp in assignment})
            got = c.committed(assignment)
            assert all(got[tp].metadata == f"meta-{tp.partition}" * 20 for tp in assignment), got
            c.commit_async({assignment[0]: OffsetAndMetadata(2, "async-meta")})
            c.poll(0.5)
            assert c.member_id()
            assert c.group_metadata() is not None
            c.end_offsets(assignment)
            c.seek(assignment[0], 0)
            c.poll(0.3)
        assert stats and json.loads(stats[-1])["type"] == "consumer"
    with EmbeddedBroker(num_brokers=1) as b:
        b.configure_share_groups(auto_offset_reset="earliest", record_lock_duration_ms=1000)
        b.create_topic("jobs", 2)
        with KafkaProducer({"bootstrap.servers": b.bootstrap_servers}) as p:
            for i in range(50):
                p.send("jobs", value=b"%d" % i, partition=i % 2)
        with KafkaShareConsumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "alloc-sg"}) as s:
            s.subscribe(["jobs"])
            got, deadline = 0, time.monotonic() + 30
            while got < 50 and time.monotonic() < deadline:
                got += len(s.poll(0.5))
            assert got == 50, got
    calls = []
    def provider(config):
        calls.append(config)
        return "header.eyJzdWIiOiJ0ZXN0In0.sig", time.time() + 60
    with KafkaProducer({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": "OAUTHBEARER", "oauth_cb": provider}) as p:
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            p.flush(0.1)
    assert calls
    try:
        KafkaConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "fetch.max.bytes": "x"})
    except Exception:
        pass
    print("WORKLOAD OK", flush=True)
"""


def test_consume_produce_share_transactions_on_the_bound_library_free_nothing_across_allocators(
    bound_lib: Path,
) -> None:
    """Producer (keys, headers, stats), transactions, consumer (commits with metadata read back,
    async commit, group metadata, member id, stats_cb, to_arrow), share consumer and OAUTHBEARER,
    on the bound library with every check above: the child must finish cleanly."""
    proc = _run(WORKLOAD, _checked_env(bound_lib), timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "WORKLOAD OK" in proc.stdout, out[-5000:]
    assert "did not allocate" not in out


CROSS_FREE = """
    import ctypes, sys
    import kipconsumer
    from kipconsumer import _loader
    rdk = _loader._loaded
    libc = ctypes.CDLL(None)
    # strdup: libc's own call to malloc goes through the process's malloc (with the malloc-check
    # library preloaded, its malloc; dlsym("malloc") would skip it and return glibc's raw one)
    libc.strdup.restype = ctypes.c_void_p
    libc.strdup.argtypes = [ctypes.c_char_p]
    libc.free.argtypes = [ctypes.c_void_p]
    rdk.rd_kafka_mem_malloc.restype = ctypes.c_void_p
    rdk.rd_kafka_mem_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    rdk.rd_kafka_mem_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    if sys.argv[1] == "libc-to-librdkafka":
        rdk.rd_kafka_mem_free(None, libc.strdup(b"x" * 47))
    else:
        rdk.rd_kafka_mem_free(None, rdk.rd_kafka_mem_malloc(None, 48))  # the right way: fine
        libc.free(rdk.rd_kafka_mem_malloc(None, 48))
    print("SURVIVED", flush=True)
"""


def _cross_free(direction: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(CROSS_FREE), direction], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_librdkafka_frees_libc_memory_tolerated_and_caught_in_strict_mode(bound_lib: Path) -> None:
    """Negative control of the strict check: libc memory freed by the bound librdkafka aborts under
    ``KIPCONSUMER_ALLOC_STRICT=1``, and by default goes back to libc (a C application hands librdkafka
    strdup()ed metadata: confluent-kafka does)."""
    strict = _cross_free("libc-to-librdkafka", _checked_env(bound_lib, strict=True))
    assert strict.returncode != 0 and "SURVIVED" not in strict.stdout
    assert "librdkafka's free() got" in strict.stderr, strict.stderr[-2000:]
    tolerant = _cross_free("libc-to-librdkafka", _checked_env(bound_lib, strict=False))
    assert tolerant.returncode == 0 and "SURVIVED" in tolerant.stdout, tolerant.stderr[-2000:]


@pytest.mark.skipif(not MALLOC_DEBUG.exists(), reason="glibc's libc_malloc_debug.so.0 not found")
def test_libc_freeing_librdkafka_memory_is_caught(bound_lib: Path) -> None:
    """Negative control of glibc's check: libc's free() of memory the bound librdkafka allocated aborts
    the child, so the workload test above would have failed on such a free."""
    proc = _cross_free("librdkafka-to-libc", _checked_env(bound_lib))
    assert proc.returncode != 0 and "SURVIVED" not in proc.stdout, proc.stdout + proc.stderr[-2000:]


def test_confluent_kafka_in_the_same_process_commits_metadata(bound_lib: Path) -> None:
    """kipconsumer on the bound library, then confluent-kafka in the same process committing offsets
    with metadata (which its C code strdup()s for its librdkafka to free): no crash, metadata read
    back. confluent-kafka runs on its own librdkafka (tests/test_carried_librdkafka.py checks the
    mapping), so nothing of its crosses into the bundled allocator."""
    pytest.importorskip("confluent_kafka")
    code = """
        import kipconsumer
        import confluent_kafka
        from kipconsumer.broker import EmbeddedBroker
        with EmbeddedBroker(num_brokers=1) as b:
            b.create_topic("ck", 1)
            c = confluent_kafka.Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "ck-g"})
            tp = confluent_kafka.TopicPartition("ck", 0, 0, metadata="from-confluent")
            c.commit(offsets=[tp], asynchronous=False)
            got = c.committed([confluent_kafka.TopicPartition("ck", 0)], timeout=10)
            assert got[0].metadata == "from-confluent", got
            c.close()
        print(kipconsumer.native_build_info()["allocator"])
        print("CONFLUENT OK", flush=True)
    """
    proc = _run(code, _checked_env(bound_lib, strict=False))
    assert proc.returncode == 0 and "CONFLUENT OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.startswith("jemalloc")


def test_a_missing_override_is_an_import_error_naming_the_variable(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), KIPCONSUMER_LIBRDKAFKA=str(tmp_path / "nope.so.1"))
    proc = _run("import kipconsumer", env, timeout=60)
    assert proc.returncode != 0
    assert "ImportError: KIPCONSUMER_LIBRDKAFKA=" in proc.stderr, proc.stderr
    assert "no such file" in proc.stderr, proc.stderr


def test_binding_refuses_an_unreviewed_allocating_import_and_is_idempotent(
    bound_lib: Path, tmp_path: Path
) -> None:
    """A librdkafka importing a libc function whose result the caller frees (asprintf) and that has no
    kc_alloc_* shim is refused by name; binding an already bound copy changes nothing."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    src = tmp_path / "fake.c"
    src.write_text("#define _GNU_SOURCE\n#include <stdio.h>\n#include <stdlib.h>\n"
                   "char *f(int x) { char *s; if (asprintf(&s, \"%d\", x) < 0) return NULL; return s; }\n"
                   "void g(void *p) { free(malloc(8)); free(p); }\n")
    fake = tmp_path / "librdkafka-fake.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(fake), str(src)], check=True)
    with pytest.raises(native_bundle.BundleError, match=r"\['asprintf'\]"):
        native_bundle.bind_library(fake, bound_lib.parent / native_bundle.SONAME)
    before = bound_lib.read_bytes()
    native_bundle.bind_allocator(bound_lib.parent, "x86_64")
    assert bound_lib.read_bytes() == before
