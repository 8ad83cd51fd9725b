"""The wheel tier: the part of the fast test tier that runs against an installed wheel, on its interpreter.

``scripts/build_wheels.py --test`` runs it in each x86_64 wheel's fresh venv after tests/wheel_smoke.py,
from a copy of :data:`TIER_FILES` in a directory outside the checkout, so ``import kipconsumer``
can only find the wheel installed in the venv (the run checks it: ``KIPCONSUMER_EXPECT_INSTALLED``,
see tests/conftest.py). The modules are :data:`WHEEL_TIER` (this is the one list), run with the fast
tier's marker expression :data:`MARKERS`; a module whose optional packages (:data:`OPTIONAL`) have no
wheel for the interpreter is left out and named in the output (confluent-kafka has none for 3.15).

    python tests/wheel_tier.py [--junit PATH] [--timeout SECONDS]

Prints the modules left out, then ``wheel tier: P passed, F failed, S skipped, E errors in T s (M
modules, Python X.Y.Z)`` and exits with pytest's status (0: all passed).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import sysconfig
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

#: the fast tier's selection (``./dev.sh test --fast``)
MARKERS = "not slow and not spark and not kafka"

#: a DeprecationWarning that kipconsumer's own code triggers fails the test: kipconsumer emits none
#: itself, so these are the interpreter's deprecations (e.g. ``asyncio.iscoroutinefunction`` in 3.14),
#: the APIs the next CPython removes (pytest's ini syntax: the module is a regular expression)
WARNINGS_AS_ERRORS = "error::DeprecationWarning:kipconsumer"

#: what build_wheels copies beside each other out of the checkout: the tests, the docs and examples
#: some of them read (docs/configuration.md, examples/aio_service.py), and pyproject.toml for pytest's
#: markers and faulthandler_timeout
TIER_FILES = ("tests", "docs", "examples", "pyproject.toml")

#: packages a tier module imports that may have no wheel for an interpreter (installed when they do)
OPTIONAL = ("confluent_kafka", "pyarrow", "uvloop")

#: what the tier venv gets besides the wheel and pyarrow (which the smoke test installs): pytest and
#: hypothesis always, the rest only where a binary wheel exists
REQUIRED_PACKAGES = ("pytest>=8", "hypothesis")
OPTIONAL_PACKAGES = ("confluent-kafka==2.16.1", "uvloop")

#: module -> the OPTIONAL packages it cannot be collected (or its fast tests cannot run) without.
#: The client itself on the embedded broker: 6.6 min for CPython 3.11 on the 2 cores shared with a CI
#: run (with test_streams, 45 s of it, since left out). Left out:
#: test_c_units, test_sanitizer, test_allocator, test_bench_smoke (build native code from the checkout);
#: test_carried_librdkafka, test_packaging*, test_design_map, test_*_structure, test_pytest_plugin
#: (read or build the checkout); test_spark*, test_java*, test_kafka_*, test_tansu_interop,
#: test_security_kafka, test_transactions, test_share_kafka (Spark, Java, real Kafka or Tansu);
#: test_broker* (the embedded broker, not the client); test_seek, test_prefetch_thread,
#: test_share_hardening, test_kip848, test_mixed_group, test_streams, test_streams_eos and chaos/ (the
#: client on the embedded broker too, but 30-190 s each: they would double the run; the full suite runs
#: them on 3.11; the smoke test runs a Pipeline on every interpreter).
WHEEL_TIER: dict[str, tuple[str, ...]] = {
    "test_consumer_kip41": ("confluent_kafka",),  # records produced with confluent-kafka
    "test_consumer_kip62": (),
    "test_consumer_api": ("confluent_kafka",),
    "test_consumer_threads": ("confluent_kafka",),  # its subprocess prelude produces with it
    "test_owned_signals": (),  # the thread contract under signals (3.14 runs handlers at new points)
    "test_producer": ("confluent_kafka",),  # reads back with a confluent-kafka consumer
    "test_producer_hardening": (),
    "test_records_batch": ("confluent_kafka",),
    "test_aio": (),  # uvloop's cases skip without it
    "test_aio_loops": (),
    "test_share_embedded": (),
    "test_share_callbacks": (),
    "test_share_api": (),
    "test_seek_reset": (),
    "test_config": (),
    "test_errors_named": (),
    "test_error_categories": (),
    "test_error_pickling": (),
    "test_secrets": (),
    "test_logging": (),
    "test_metrics_counters": (),
    "test_tasks": (),
    "test_rebootstrap": (),
    "test_fork": (),
    "test_properties": (),  # hypothesis: always installed
}


@dataclass(frozen=True)
class Counts:
    """A pytest run's outcome, from its JUnit XML (xfail and xpass count as skipped / passed)."""

    passed: int
    failed: int
    skipped: int
    errors: int

    @classmethod
    def from_junit(cls, path: Path) -> Counts:
        root = ET.parse(path).getroot()
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "skipped", "errors")}
        failed, skipped, errors = total["failures"], total["skipped"], total["errors"]
        return cls(total["tests"] - failed - skipped - errors, failed, skipped, errors)


def module_seconds(path: Path) -> dict[str, float]:
    """Seconds per test module in a JUnit XML report (setup, call and teardown), slowest first."""
    took: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        parts = (case.get("classname") or "?").split(".")  # tests.test_x or tests.test_x.TestClass
        module = next((part for part in parts if part.startswith("test_")), parts[-1])
        took[module] = took.get(module, 0.0) + float(case.get("time", 0))
    return dict(sorted(took.items(), key=lambda kv: -kv[1]))


def skip_reasons(path: Path) -> dict[str, int]:
    """How many tests each skip (or xfail) message of a JUnit XML report covers."""
    reasons: dict[str, int] = {}
    for skipped in ET.parse(path).getroot().iter("skipped"):
        text = skipped.get("message") or "?"
        reasons[text] = reasons.get(text, 0) + 1
    return reasons


def failures(path: Path) -> list[str]:
    """``module::test: first line of the message`` for each failed or erroring test of a JUnit report."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        for bad in [*case.iter("failure"), *case.iter("error")]:
            module = (case.get("classname") or "?").split(".")[-1]
            message = (bad.get("message") or bad.text or "").strip().splitlines() or [""]
            out.append(f"{module}::{case.get('name')}: {message[0][:300]}")
    return out


def missing_packages(needs: tuple[str, ...]) -> list[str]:
    return [name for name in needs if importlib.util.find_spec(name) is None]


def installed_package_dir() -> Path:
    """kipconsumer's directory, checked to be in this interpreter's site-packages (not a checkout)."""
    spec = importlib.util.find_spec("kipconsumer")
    assert spec is not None and spec.origin is not None, "kipconsumer is not installed"
    pkg = Path(spec.origin).resolve().parent
    site = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    assert pkg.parent in site, f"kipconsumer found at {pkg}, not in this venv's site-packages {sorted(site)}"
    return pkg


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--junit", default="wheel-tier.xml", help="where pytest writes its JUnit XML")
    ap.add_argument("--timeout", type=float, default=1800, help="bound on the whole pytest run (s)")
    args = ap.parse_args(argv)

    tests_dir = Path(__file__).resolve().parent
    pkg = installed_package_dir()
    run, left_out = [], []
    for module, needs in WHEEL_TIER.items():
        lacking = missing_packages(needs)
        if lacking:
            left_out.append(f"{module} (no {', '.join(lacking)} for this interpreter)")
        else:
            run.append(str(tests_dir / f"{module}.py"))
    if left_out:
        print(f"wheel tier left out: {'; '.join(left_out)}", flush=True)
    junit = Path(args.junit).resolve()
    junit.unlink(missing_ok=True)
    env = {**os.environ, "KIPCONSUMER_EXPECT_INSTALLED": str(pkg)}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--show-capture=no",
         "-m", MARKERS,
         "-o", f"filterwarnings={WARNINGS_AS_ERRORS}",
         "--rootdir", str(tests_dir.parent), f"--junitxml={junit}", *run],
        cwd=tests_dir.parent, env=env, timeout=args.timeout)
    took = time.monotonic() - started
    if not junit.exists():
        print(f"wheel tier: pytest exited {proc.returncode} without a report in {took:.0f} s", flush=True)
        return proc.returncode or 1
    c = Counts.from_junit(junit)
    print(f"wheel tier: {c.passed} passed, {c.failed} failed, {c.skipped} skipped, {c.errors} errors "
          f"in {took:.0f} s ({len(run)} modules, Python {sys.version.split()[0]}, kipconsumer from {pkg})",
          flush=True)
    slowest = ", ".join(f"{m} {t:.0f} s" for m, t in list(module_seconds(junit).items())[:8])
    print(f"wheel tier slowest modules: {slowest}", flush=True)
    for reason, n in skip_reasons(junit).items():
        print(f"wheel tier skipped {n}: {reason}", flush=True)
    for failure in failures(junit):
        print(f"wheel tier FAILED {failure}", flush=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
