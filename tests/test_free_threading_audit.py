"""docs/free_threading.md against the sources (static, no broker): what can be checked mechanically.

- every ``with gil`` callback of the Cython sources (kipconsumer/*.pyx, *.pxi) has a row in the doc's
  table (a), naming its file and its function: a new callback librdkafka or a native thread may enter
  is a new place where the GIL serialises, so it needs a row before it lands;
- every callback kipconsumer registers with librdkafka (``rd_kafka_conf_set_*_cb``, interceptors) and
  every native thread it starts (``pthread_create``'s start routine in csrc/) is named in the doc;
- every file the doc's tables cite exists;
- no compiled module declares itself free-threading compatible (``freethreading_compatible``,
  ``Py_MOD_GIL_NOT_USED``) while the doc's "Status:" line says "not ready", and every one does once it
  says "ready".
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "free_threading.md"

# `cdef <type> name(<args, possibly over several lines>) [noexcept] with gil:`
_WITH_GIL = re.compile(r"^cdef\s+[\w\s\*]*?\b(\w+)\s*\(([^()]*)\)\s*(?:noexcept\s+)?with\s+gil\s*:", re.M)
# a callback handed to librdkafka: rd_kafka_conf_set_<x>_cb(conf, NAME) / *interceptor_add_*(..., NAME, ...)
_REGISTERED = (re.compile(r"rd_kafka_conf_set_\w+_cb\s*\(\s*\w+\s*,\s*(\w+)\s*\)"),
               re.compile(r"interceptor_add_\w+\s*\([^;]*?\"[^\"]*\"\s*,\s*(\w+)"))
_THREAD_START = re.compile(r"pthread_create\s*\(\s*[^,]+,\s*[^,]+,\s*(\w+)\s*,")
_DIRECTIVE = re.compile(r"^#\s*cython:.*\bfreethreading_compatible\s*=\s*True", re.M)


def with_gil_callbacks(files: dict[str, str]) -> list[tuple[str, str]]:
    """(file name, function) of every ``with gil`` function in ``files`` ({name: source})."""
    return sorted((name, m.group(1)) for name, text in files.items() for m in _WITH_GIL.finditer(text))


def table_rows(doc: str, section: str) -> list[str]:
    """The table rows (lines starting with ``|``) of the doc's section whose heading starts with
    ``## (section)``."""
    m = re.search(rf"^## \({section}\).*?(?=^## |\Z)", doc, re.M | re.S)
    assert m, f"docs/free_threading.md has no section '## ({section})'"
    return [line for line in m.group(0).splitlines() if line.startswith("|")]


def unlisted(callbacks: list[tuple[str, str]], rows: list[str]) -> list[tuple[str, str]]:
    """The callbacks no row names, by its file (``<file>:``) and its function (```<name>```)."""
    return [(f, fn) for f, fn in callbacks
            if not any(f"{f}:" in row and f"`{fn}`" in row for row in rows)]


def _sources(pattern: str, where: str = "kipconsumer") -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((ROOT / where).glob(pattern))}


def _cython_sources() -> dict[str, str]:
    return {**_sources("*.pyx"), **_sources("*.pxi")}


def test_the_callback_finder_sees_multi_line_signatures_and_a_missing_row() -> None:
    src = ("cdef void _one(rd_kafka_t *rk, int err,\n"
           "               const char *reason, void *opaque) noexcept with gil:\n    pass\n"
           "cdef int _two(void *p) with gil:\n    pass\n"
           "cdef int _plain(void *p) noexcept nogil:\n    pass\n")
    found = with_gil_callbacks({"_x.pyx": src})
    assert found == [("_x.pyx", "_one"), ("_x.pyx", "_two")]
    rows = ["| `kipconsumer/_x.pyx:1` `_one` (with gil) | state | threads | the GIL | nothing |"]
    assert unlisted(found, rows) == [("_x.pyx", "_two")]


def test_every_with_gil_callback_has_a_row_in_table_a() -> None:
    callbacks = with_gil_callbacks(_cython_sources())
    # the ones this audit found: if the finder stops seeing them, it is broken, not the code fixed
    assert {("_consumer.pyx", "_rebalance_cb"), ("_producer_delivery.pxi", "_on_batch"),
            ("_oauth_cb.pxi", "_oauth_refresh_cb"), ("_share.pyx", "_ack_commit_cb")} <= set(callbacks)
    missing = unlisted(callbacks, table_rows(DOC.read_text(), "a"))
    assert not missing, (
        f"`with gil` callbacks without a row in docs/free_threading.md table (a): {missing}. Add a row "
        f"naming `<file>:<line>` and `<function>`: the state it touches, the threads that enter it, "
        f"what makes that safe today and what a free-threaded build needs")


def test_every_registered_librdkafka_callback_and_native_thread_is_named() -> None:
    doc = DOC.read_text()
    sources = {**_cython_sources(), **_sources("*.c", "csrc")}
    registered = {m.group(1) for text in sources.values() for rx in _REGISTERED for m in rx.finditer(text)}
    threads = {m.group(1) for text in _sources("*.c", "csrc").values() for m in _THREAD_START.finditer(text)}
    assert {"kc_log_cb", "_rebalance_cb", "on_response_received"} <= registered
    assert {"prefetch_main", "reaper_thread", "kc_producer_thread_main", "call_thread"} <= threads
    missing = sorted(name for name in registered | threads
                     if not re.search(rf"`[^`\n]*\b{name}\b[^`\n]*`", doc))
    assert not missing, f"not named in docs/free_threading.md (sections (a) or (b)): {missing}"


def test_every_file_the_tables_cite_exists() -> None:
    doc = DOC.read_text()
    cited = set(re.findall(r"`((?:kipconsumer|csrc|tests)/[\w/.]+?\.(?:pyx|pxi|pxd|py|c|h))(?::\d+)?", doc))
    assert cited
    missing = sorted(p for p in cited if not (ROOT / p).is_file())
    assert not missing, f"docs/free_threading.md cites files that do not exist: {missing}"


def test_no_module_claims_free_threading_until_the_doc_says_ready() -> None:
    status = re.search(r"^Status: (ready|not ready)\b", DOC.read_text(), re.M)
    assert status, "docs/free_threading.md must start its summary with 'Status: ready' or 'Status: not ready'"
    modules = _sources("*.pyx")
    declared = {name for name, text in modules.items() if _DIRECTIVE.search(text)}
    native = {**_sources("*.c", "csrc"), **_sources("*.h", "csrc"), **modules}
    gil_not_used = sorted(name for name, text in native.items() if "Py_MOD_GIL_NOT_USED" in text)
    in_setup = ["setup.py"] if "freethreading_compatible" in (ROOT / "setup.py").read_text() else []
    if status.group(1) == "not ready":
        claims = sorted(declared) + gil_not_used + in_setup
        assert not claims, (
            f"declared free-threading compatible while docs/free_threading.md says 'not ready': {claims}")
    else:
        assert declared == set(modules) or in_setup, (
            f"docs/free_threading.md says 'ready' but these modules do not declare it: "
            f"{sorted(set(modules) - declared)}")
