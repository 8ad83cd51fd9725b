"""``subscribePattern`` on the driver (issue #38 H6, U5): topic names are matched in time linear in
their length whatever the pattern (Python's backtracking ``re`` took 35 s per partition discovery for
``(a+)+b`` and a 30-character name, exponential beyond), the translation from Java's syntax is linear
in the pattern's length, and hostile patterns are ``ConfigError`` naming the option. No Spark, no
broker: the metadata answer is a stand-in."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import textwrap

import pytest

from kipconsumer.errors import ConfigError
from kipconsumer.spark.javaregex import java_pattern_to_python
from kipconsumer.spark.options import ReadOptions
from kipconsumer.spark.topicpattern import MAX_STATES, TopicPattern

BS = {"kafka.bootstrap.servers": "127.0.0.1:1"}
#: the shapes that make a backtracking matcher exponential (or polynomial of high degree)
EVIL = ["(a+)+b", "(a|a)*c", "(a|aa)*b", "(a*)*b", "(.*a){12}x", "(a?){40}a{40}b", "((a+)+)+$x"]


def parse(pattern: str) -> ReadOptions:
    return ReadOptions.parse({**BS, "subscribePattern": pattern}, True)


_DISCOVERY = textwrap.dedent("""
    import sys
    from types import SimpleNamespace
    from kipconsumer.spark.metadata import Metadata
    from kipconsumer.spark.options import ReadOptions

    names = ["a" * 40, "a" * 249, "a" * 100 + "b", "b"]
    topics = {n: SimpleNamespace(error=None, partitions={0: None, 1: None}) for n in names}
    opts = ReadOptions.parse({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribePattern": sys.argv[1]},
                             True)
    md = Metadata(opts)
    md._list_topics = lambda topic, timeout: SimpleNamespace(topics=topics)
    print(md.partitions(strict=False))
""")


@pytest.mark.parametrize(("pattern", "expected"), [
    ("(a+)+b", [("a" * 100 + "b", 0), ("a" * 100 + "b", 1)]),
    ("(a|a)*c", []),
    ("(a|aa)*", [("a" * 249, 0), ("a" * 249, 1), ("a" * 40, 0), ("a" * 40, 1)]),
])
def test_partition_discovery_with_a_backtracking_pattern_ends(pattern: str,
                                                              expected: list[tuple[str, int]]) -> None:
    # Python's re needs ~35 s for (a+)+b against 'a' * 30 and 4x more per 2 characters: against
    # 'a' * 40 that is ~10 h, against 'a' * 249 never. The bound below is generous for a 2-core
    # machine under load and still 10^3 (and 10^60) times below what backtracking needs.
    out = subprocess.run([sys.executable, "-c", _DISCOVERY, pattern], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == repr(sorted(expected))


@pytest.mark.parametrize("pattern", EVIL)
def test_matching_work_is_linear_in_the_name_length(pattern: str) -> None:
    tp = TopicPattern(java_pattern_to_python(pattern))
    work = {}
    for n in (50, 100, 200, 249):
        assert not tp.fullmatch("a" * n)  # none of them matches a run of a's
        work[n] = tp.steps
        # every state at most once per position (plus the closure's own visits)
        assert tp.steps <= 2 * (n + 1) * tp.states, (n, tp.steps, tp.states)
    # linear: 249 characters cost about 5x what 50 cost (backtracking: 4^100 x for (a+)+b)
    assert work[249] <= 6 * work[50], work


def _random_pattern(rnd: random.Random, depth: int = 0) -> str:
    atoms = ["a", "b", ".", "[ab]", "[^a]", r"\d", r"\w", "[a-c.]", "x", "-", r"\.", "(?i:A)", "[0-9]", "_"]
    r = rnd.random()
    if depth > 3 or r < 0.35:
        return rnd.choice(atoms)
    if r < 0.55:
        return _random_pattern(rnd, depth + 1) + _random_pattern(rnd, depth + 1)
    if r < 0.7:
        return f"({_random_pattern(rnd, depth + 1)}|{_random_pattern(rnd, depth + 1)})"
    if r < 0.8:
        quant = rnd.choice(["*", "+", "?", "{2}", "{1,3}", "*?", "{0,2}", "{2,}", "+?"])
        return f"(?:{_random_pattern(rnd, depth + 1)}){quant}"
    if r < 0.85:
        return rnd.choice([r"\b", r"\B", "^", "$", r"\Z", r"\A"])
    if r < 0.9:
        return f"(?={_random_pattern(rnd, depth + 1)})"
    if r < 0.95:
        return f"(?!{_random_pattern(rnd, depth + 1)})"
    return "(?<=" + rnd.choice(["a", "ab", "[ab]", r"\d"]) + ")"


def test_the_matcher_accepts_exactly_what_python_re_accepts() -> None:
    rnd = random.Random(38)
    alphabet = "ab1x-.A_"
    checked = 0
    for _ in range(600):
        pattern = rnd.choice(["", "(?i)", "(?m)", "(?s)", "(?a)"]) + _random_pattern(rnd)
        try:
            rx = re.compile(pattern)
        except re.error:
            continue
        tp = TopicPattern(pattern)
        for _ in range(15):
            name = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12)))
            assert tp.fullmatch(name) == (rx.fullmatch(name) is not None), (pattern, name)
            checked += 1
    assert checked > 5000


@pytest.mark.parametrize(("pattern", "names", "selected"), [
    (r"events-\p{Lower}+\z", ["events-abc", "events-", "events-ab1", "xevents-a"], ["events-abc"]),
    ("(?i)\\QTopic.\\E[0-9]{1,3}", ["topic.1", "TOPIC.123", "topicx1", "topic.1234"],
     ["topic.1", "TOPIC.123"]),
    ("t-(?!internal).*", ["t-internal", "t-internals", "t-public", "t-"], ["t-public", "t-"]),
    ("a{0,1000}", ["", "a" * 249, "a" * 248 + "b"], ["", "a" * 249]),
    # Python's re backtracks for hours on the last name (the reason for the matcher)
    ("(?:a?){300}b", ["b", "a" * 248 + "b", "a" * 249], ["b", "a" * 248 + "b"]),
    ("a{250}", ["a" * 249], []),
    (r"\bx\b.*", ["x", "x.y", "xy", "x-y"], ["x", "x.y", "x-y"]),
])
def test_java_patterns_select_the_topics_java_selects(pattern: str, names: list[str],
                                                      selected: list[str]) -> None:
    py = parse(pattern).pattern
    assert py is not None
    tp = TopicPattern(py)
    assert [n for n in names if tp.fullmatch(n)] == selected


@pytest.mark.parametrize(("pattern", "match"), [
    ("\\", r"ends with a backslash that escapes nothing"),
    ("abc\\", r"'abc\\\\' ends with a backslash"),
    ("(" * 5000 + ")" * 5000, r"groups nested deeper than 100 levels"),
    ("(?:" * 30000 + "x" + ")" * 30000, r"groups nested deeper than 100 levels"),
    ("a{99999999999}", r"not a valid regex \(the repetition number is too large\)"),
    ("(a)\\1", r"a backreference is not supported: kipkafka matches topic names in linear time"),
    ("(a)(?(1)b|c)", r"a conditional group"),
    ("x" * MAX_STATES, rf"too large to match in linear time \(more than {MAX_STATES} NFA states"),
    ("(?:(?:a{1,249}){1,249}){1,249}", r"too large to match in linear time"),
] + ([("a++b", "a possessive quantifier"), ("(?>a)b", r"an atomic group \(\?>\.\.\.\)")]
     if sys.version_info >= (3, 11) else []))
def test_hostile_patterns_are_config_errors(pattern: str, match: str) -> None:
    with pytest.raises(ConfigError, match=f"option subscribePattern.*{match}"):
        parse(pattern)


class _CountingStr(str):
    """A str that counts the characters its indexing and slicing copy."""

    copied = 0

    def __getitem__(self, key: object) -> str:
        out = str.__getitem__(self, key)  # type: ignore[index]
        _CountingStr.copied += len(out)
        return out


def test_the_translation_is_linear_in_the_pattern_length() -> None:
    # it used to copy the rest of the pattern at every '(?' and '\p': '(?:x)' * 100_000 took 2 s
    for piece in ("(?:x)", r"\p{Alpha}", "(?i:x)"):
        pattern = _CountingStr(piece * 5_000)
        _CountingStr.copied = 0
        java_pattern_to_python(pattern)
        assert _CountingStr.copied <= 3 * len(pattern), (piece, _CountingStr.copied, len(pattern))
