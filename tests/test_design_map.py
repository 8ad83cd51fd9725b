"""docs/design.md is a map of the tree: every file and every code name it mentions exists.

What counts (the rule the doc is written to):

* **Paths**: every word of the doc (prose, tables, code blocks) that names a file: it has a ``/`` and a
  file extension, or it is a bare file name with one of ``EXTENSIONS``. Braces expand
  (``csrc/fetch_buffer.{h,c}``), ``*`` globs, ``tests/x.py::test_name`` also needs the test function.
  A bare name resolves against the repository root, ``kipconsumer/``, ``csrc/`` or ``docs/``.
* **Symbols**: every backticked span outside code blocks that is a code name: an identifier, optionally
  dotted and optionally called (``poll()``, ``kc_consumer_poll(timeout_ms)``), that has an ``_`` or
  an upper-case letter after its first character, or is called, or is dotted with a part that is not
  all lower case (so ``max.poll.records``, a config key, is not a symbol; ``KafkaConsumer._enter`` is).
  In code blocks: CamelCase words and words with an inner ``_``. ``kipconsumer.x.y`` names a module
  (and an attribute of it). Each part must be *defined* in the tree (a ``def``/``class``/``cdef``
  line, an assignment or field at the start of a line, a C declaration or definition, a ``#define``, an
  enum member or a struct member): a name that only survives in a comment does not count, so a renamed
  function fails this test.
* Words that look like code but name something outside the tree (configuration values) are listed in
  ``NOT_CODE``; each entry must still occur in the doc.
"""

from __future__ import annotations

import builtins
import functools
import glob
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"

EXTENSIONS = ("py", "pyx", "pxd", "pxi", "pyi", "c", "h", "md", "toml", "sh", "json", "txt", "cfg", "in")
SOURCE_GLOBS = ("kipconsumer/**/*.py", "kipconsumer/**/*.pyx", "kipconsumer/**/*.pxd", "kipconsumer/**/*.pxi",
                "kipconsumer/**/*.pyi", "csrc/**/*.c", "csrc/**/*.h", "tests/**/*.py", "tests/**/*.c",
                "scripts/**/*.py", "bench/**/*.py", "setup.py")
# configuration values and option words written in backticks that are not names in the code
NOT_CODE = {"read_committed", "at_least_once", "exactly_once_v2"}

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_BACKTICK = re.compile(r"`([^`\n]+)`")
_PATH_WORD = re.compile(r"[\w./{},*-]+(?:::\w+)?")
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_CODE_NAME = re.compile(rf"({_IDENT}(?:\.{_IDENT})*)(\([^()]*\))?")


def _doc() -> str:
    return DESIGN.read_text()


def _split(doc: str) -> tuple[str, str]:
    """(prose, code blocks)."""
    blocks = "\n".join(m.group(0) for m in _FENCE.finditer(doc))
    return _FENCE.sub("", doc), blocks


# ---- paths ---------------------------------------------------------------------------------------------


def _expand(word: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    return [e for alt in m.group(1).split(",") for e in _expand(word[: m.start()] + alt + word[m.end():])]


def _is_path(word: str) -> bool:
    word = word.split("::")[0].rstrip(".,;:")
    if not re.search(r"\.(?:\{[\w,]+\}|" + "|".join(EXTENSIONS) + r")$", word):
        return False
    stem = word.split("/")[-1].rsplit(".", 1)[0]
    return bool(re.fullmatch(r"[\w./{},*-]+", word)) and bool(stem) and not stem.endswith(".")


def _path_words(doc: str) -> set[str]:
    words = set()
    for w in _PATH_WORD.findall(doc):
        w = w.rstrip(".,;:")
        if _is_path(w) and not w.startswith("http"):
            words.add(w)
    return words


def _resolves(word: str) -> bool:
    path, _, test = word.partition("::")
    for candidate in _expand(path):
        found = []
        for base in ("", "kipconsumer/", "csrc/", "docs/"):
            found = glob.glob(str(ROOT / (base + candidate)))
            if found:
                break
        if not found:
            return False
        text = Path(found[0]).read_text()
        if test and not re.search(rf"^\s*(?:async\s+)?def {re.escape(test)}\(", text, re.M):
            return False
    return True


# ---- symbols -------------------------------------------------------------------------------------------


_KEYWORDS = {"return", "if", "elif", "while", "with", "raise", "yield", "assert", "not", "and", "or", "await",
             "del", "in", "print", "else", "for", "case", "goto", "sizeof", "is", "lambda", "pass", "break"}
_DEF_LINE = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)")
_CDEF_LINE = re.compile(r"^\s*(?:cdef|cpdef|ctypedef|struct|enum|typedef|union)\b([^(=:]*)")
_ASSIGN = re.compile(r"^\s*(?:self\.)?(\w+)\s*(?::[^=\n]*)?(?:=(?!=)|$|,)")
_DECL = re.compile(r"^([A-Za-z_][\w \t*]*?)\**\b(\w+)\s*\(")  # type words, then the name and "("
_FNPTR = re.compile(r"\(\s*\*\s*(\w+)\s*\)\s*\(")
_MEMBER = re.compile(r"^\s*([A-Za-z_][\w.]*)[\s*]+\**(\w+)\s*(?:\[[^\]]*\])?\s*[;,]?\s*$")
_TYPEDEF_END = re.compile(r"^\s*}\s*(\w+)\s*;")
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)")


def _strip_comments(text: str, suffix: str) -> list[str]:
    if suffix in (".c", ".h"):
        text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
        return [re.sub(r"//.*", "", line) for line in text.splitlines()]
    return [re.sub(r"#.*", "", line) for line in text.splitlines()]


def definitions(text: str, suffix: str) -> set[str]:
    """The names a source file defines (see the module docstring); comments define nothing."""
    names: set[str] = set()
    for line in _strip_comments(text, suffix):
        if not line.strip():
            continue
        if suffix in (".c", ".h") and (m := _DEFINE.match(line)):
            names.add(m.group(1))
            continue
        if m := _DEF_LINE.match(line):
            names.add(m.group(1))
            continue
        if m := _CDEF_LINE.match(line):
            names.update(re.findall(r"\w+", re.sub(r"\"[^\"]*\"", "", m.group(1))))
            names.update(_FNPTR.findall(line))
            if m2 := _DECL.match(line.strip()):
                names.add(m2.group(2))
            continue
        if (m := _ASSIGN.match(line)) and m.group(1) not in _KEYWORDS:
            names.add(m.group(1))
        if m := _TYPEDEF_END.match(line):
            names.add(m.group(1))
        names.update(_FNPTR.findall(line))
        decl = line if suffix in (".c", ".h") else line.strip()
        if line[:1].isspace() and suffix in (".c", ".h"):
            decl = ""  # inside a C body: calls, not declarations
        if (m := _DECL.match(decl)) and not (set(m.group(1).split()) & _KEYWORDS) and "=" not in m.group(1):
            if m.group(1).strip() and suffix != ".py":
                names.add(m.group(2))
        if (m := _MEMBER.match(line)) and m.group(1) not in _KEYWORDS and suffix != ".py":
            names.add(m.group(2))
    return names


@functools.cache
def _defined_names() -> frozenset[str]:
    names: set[str] = set()
    for pattern in SOURCE_GLOBS:
        for f in sorted(ROOT.glob(pattern)):
            names |= definitions(f.read_text(errors="replace"), f.suffix)
    return frozenset(names)


def _defined(name: str) -> bool:
    """``name`` is defined somewhere in the tree (not only mentioned)."""
    return name in _defined_names()


def _module_file(dotted: list[str]) -> tuple[int, Path | None]:
    """Longest prefix of ``dotted`` that is a module or package of the tree: (parts used, file)."""
    for k in range(len(dotted), 0, -1):
        base = ROOT.joinpath(*dotted[:k])
        for f in (base.with_suffix(".py"), base.with_suffix(".pyx"), base / "__init__.py"):
            if f.is_file():
                return k, f
    return 0, None


def _is_code_name(span: str) -> bool:
    m = _CODE_NAME.fullmatch(span)
    if not m or span in NOT_CODE:
        return False
    name, call = m.group(1), m.group(2)
    parts = name.split(".")
    if len(parts) > 1:
        return parts[0] == "kipconsumer" or any(p != p.lower() or p.startswith("_") for p in parts)
    return bool(call) or "_" in name[1:] or name[1:] != name[1:].lower()


def _missing_symbol(span: str) -> str | None:
    m = _CODE_NAME.fullmatch(span)
    assert m is not None
    parts = m.group(1).split(".")
    if parts[0] != "kipconsumer" and len(parts) > 1 and _module_file(["kipconsumer", parts[0]])[0] == 2:
        parts = ["kipconsumer", *parts]  # config.PREFETCH_POLLS: a module of the package
    if parts[0] == "kipconsumer":
        used, f = _module_file(parts)
        if f is None:
            return f"no module {'.'.join(parts[:2])}"
        parts = parts[used:]
    if len(parts) == 1 and (parts[0] in dir(builtins) or _module_file(["kipconsumer", parts[0]])[0] == 2):
        return None  # ValueError; spark_env (a module of the package)
    for p in parts:
        if not _defined(p):
            return f"{p!r} is not defined in the tree"
    return None


def _symbol_spans(doc: str) -> set[str]:
    prose, blocks = _split(doc)
    spans = {s.strip() for s in _BACKTICK.findall(prose)}
    found = {s for s in spans if _is_code_name(s) and not _is_path(s)}
    blocks = " ".join(w for w in blocks.split() if not _is_path(w.strip("().,;:")))
    for word in re.findall(rf"\b{_IDENT}\b", blocks):
        if ("_" in word.strip("_") or re.search(r"[a-z][A-Z]", word)) and _is_code_name(word):
            found.add(word)
    return found


# ---- the tests -----------------------------------------------------------------------------------------


def test_every_path_design_md_names_exists() -> None:
    words = _path_words(_doc())
    assert len(words) > 20, "the rule found almost no paths: is the doc or the rule broken?"
    missing = sorted(w for w in words if not _resolves(w))
    assert not missing, f"docs/design.md names files that do not exist: {missing}"


def test_every_symbol_design_md_names_is_defined() -> None:
    spans = _symbol_spans(_doc())
    assert len(spans) > 40, "the rule found almost no symbols: is the doc or the rule broken?"
    missing = {s: why for s in sorted(spans) if (why := _missing_symbol(s))}
    assert not missing, f"docs/design.md names code that is not in the tree: {missing}"


def test_not_code_words_are_used() -> None:
    doc = _doc()
    unused = sorted(w for w in NOT_CODE if f"`{w}`" not in doc)
    assert not unused, f"NOT_CODE lists words docs/design.md no longer uses: {unused}"


@pytest.mark.parametrize(
    "span, counts",
    [("kc_consumer_poll(timeout_ms)", True), ("KafkaConsumer._enter", True), ("NativeConsumer", True),
     ("poll()", True), ("config.PREFETCH_POLLS", True), ("kipconsumer.streams.Pipeline", True),
     ("max.poll.records", False), ("group.protocol=consumer", False), ("read_committed", False),
     ("librdkafka", False), ("None", False)],
)
def test_the_rule_tells_code_from_config(span: str, counts: bool) -> None:
    assert _is_code_name(span) is counts


def test_the_rule_catches_a_renamed_function() -> None:
    assert _missing_symbol("kc_consumer_poll") is None
    assert _missing_symbol("kc_fb_drain_renamed") is not None  # not taken for a module of the package
    assert _missing_symbol("streams.PAUSE_AFTER_POLLS") is None
    assert _missing_symbol("streams.GONE") is not None
    assert definitions('cdef extern from "arrow_headers.h" nogil:\n', ".pxd") == {"extern", "from", "nogil"}
    assert _missing_symbol("NativeConsumer._handle_errors_renamed") is not None
    # a name that survives only in a comment or a call is not defined
    assert definitions("x = f(y)  # old_name = 1\n# gone_name()\n", ".py") == {"x"}
    c_text = "int kc_new(void);\n/* kc_old(void); */\nvoid f(void) {\n    kc_call(1);\n}\n"
    assert definitions(c_text, ".c") == {"kc_new", "f"}
    assert _resolves("csrc/fetch_buffer.{h,c}") and not _resolves("csrc/fetch_buffer.{h,cc}")
    assert _resolves("tests/test_design_map.py::test_the_rule_catches_a_renamed_function")
    assert not _resolves("tests/test_design_map.py::test_gone")
