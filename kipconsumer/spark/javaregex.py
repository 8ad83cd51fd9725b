"""``subscribePattern`` is a Java regex in Spark's connector (``java.util.regex.Pattern``, full match).
:func:`java_pattern_to_python` turns one into a Python ``re`` pattern with the same meaning, or refuses
it by name: the Java syntax that Python's ``re`` reads differently or not at all is either translated
(POSIX classes ``\\p{Alpha}`` etc., ``\\Q...\\E`` quoting, ``\\z``) or refused with a ``ConfigError``
naming the construct (class intersection ``[a-z&&[^e]]`` and union ``[a-z[0-9]]``, which Python
silently reads as other sets; inline flags after the start; other ``\\p{...}`` classes; possessive
quantifiers and atomic groups before Python 3.11, which has them; a trailing backslash; groups nested
deeper than ``MAX_GROUP_DEPTH``). The result is matched by :mod:`kipconsumer.spark.topicpattern`,
which refuses what needs backtracking. Linear in the pattern's length. Written from Java's documented
syntax (the ``Pattern`` class's table), not from its sources."""

from __future__ import annotations

import re
import sys

from kipconsumer.errors import ConfigError

__all__ = ["java_pattern_to_python"]

#: Java's POSIX character classes (US-ASCII only unless UNICODE_CHARACTER_CLASS): the set's body.
_POSIX = {
    "Lower": "a-z",
    "Upper": "A-Z",
    "ASCII": "\\x00-\\x7f",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "Punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    "Graph": "!-~",
    "Print": " -~",
    "Blank": " \\t",
    "Cntrl": "\\x00-\\x1f\\x7f",
    "XDigit": "0-9a-fA-F",
    "Space": " \\t\\n\\x0b\\f\\r",
}
_POSIX.update({"Is" + k: v for k, v in list(_POSIX.items())})
_POSIX_NAME = re.compile(r"\{(\w+)\}|([A-Za-z])")
_INLINE_FLAG = re.compile(r"\(\?[a-zA-Z-]+\)")
#: Deepest group nesting accepted (Python's parser and the matcher recurse per level).
MAX_GROUP_DEPTH = 100


def _refuse(pattern: str, what: str) -> ConfigError:
    return ConfigError(
        f"option subscribePattern {pattern[:80]!r}: {what} is Java regex syntax that Python's re reads "
        "differently or not at all, and kipkafka does not translate it; write the pattern without it")


def java_pattern_to_python(pattern: str) -> str:
    """The Python ``re`` pattern that full-matches the topic names Java's ``Pattern.matches(pattern,
    name)`` does. Raises ``ConfigError`` for Java syntax it cannot carry over, or an invalid pattern."""
    out: list[str] = []
    i, n = 0, len(pattern)
    depth = 0  # nesting depth of (...)
    in_class = 0  # nesting depth of [...]
    class_start = False  # just after "[" or "[^" (a "]" there is a literal)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise ConfigError(f"option subscribePattern {pattern[:80]!r} ends with a backslash that "
                                  "escapes nothing (Java: PatternSyntaxException); write \\\\ for one")
            d = pattern[i + 1]
            if d == "Q":
                end = pattern.find("\\E", i + 2)
                lit = pattern[i + 2:] if end < 0 else pattern[i + 2:end]
                out.append("".join("\\" + ch if not ch.isalnum() else ch for ch in lit) if in_class
                           else re.escape(lit))
                i = n if end < 0 else end + 2
                class_start = False
                continue
            if d in "pP":
                m = _POSIX_NAME.match(pattern, i + 2)
                name = (m.group(1) or m.group(2)) if m else None
                if name is None or name not in _POSIX:
                    raise _refuse(pattern, f"the class \\{d}{{{name or '...'}}}")
                body = _POSIX[name]
                if in_class:
                    if d == "P":
                        raise _refuse(pattern, f"a negated class \\P{{{name}}} inside [...]")
                    out.append(body)
                else:
                    out.append(("[^" if d == "P" else "[") + body + "]")
                i = m.end()  # type: ignore[union-attr]
                class_start = False
                continue
            if d == "z" and not in_class:
                out.append("\\Z")  # Java's \z: the very end (Python's \Z)
                i += 2
                continue
            if d in "hHvRXNkG":
                raise _refuse(pattern, f"\\{d}")
            out.append(pattern[i:i + 2])
            i += 2
            class_start = False
            continue
        if in_class:
            if c == "[":
                raise _refuse(pattern, "a nested class or class union/intersection ([a-z[0-9]], [a-z&&[^e]])")
            if c == "&" and pattern.startswith("&&", i):
                raise _refuse(pattern, "a class intersection (&&)")
            if c == "]" and not class_start:
                in_class -= 1
            out.append(c)
            class_start = False
            i += 1
            continue
        if c == "[":
            in_class += 1
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            out.append(pattern[i:j])
            i = j
            class_start = True
            continue
        if sys.version_info < (3, 11):
            if c == "+" and out and out[-1] in ("*", "+", "?", "}"):
                raise _refuse(pattern, "a possessive quantifier (before Python 3.11)")
            if pattern.startswith("(?>", i):
                raise _refuse(pattern, "an atomic group (?>...) (before Python 3.11)")
        if c == "(" and pattern.startswith("(?", i) and i > 0:
            m = _INLINE_FLAG.match(pattern, i)
            if m:
                raise _refuse(pattern, f"an inline flag {m.group(0)} after the start of the pattern")
        if c == "(":
            depth += 1
            if depth > MAX_GROUP_DEPTH:
                raise ConfigError(f"option subscribePattern {pattern[:80]!r}: groups nested deeper than "
                                  f"{MAX_GROUP_DEPTH} levels are not supported")
        elif c == ")":
            depth -= 1
        out.append(c)
        i += 1
    py = "".join(out)
    try:
        re.compile(py)
    except (re.error, OverflowError, RecursionError) as e:  # e.g. a{99999999999}: OverflowError
        raise ConfigError(f"option subscribePattern is not a valid regex ({e}): {pattern[:80]!r}") from None
    return py
