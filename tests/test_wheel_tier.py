"""The wheel tier's list and runner (tests/wheel_tier.py), checked statically and on small pytest runs:
the per-interpreter run itself is ``./dev.sh wheels --test`` (docs/releasing.md), too long for CI."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import wheel_tier

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def top_level_imports(module: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", sorted(wheel_tier.WHEEL_TIER))
def test_each_tier_module_exists_and_declares_its_optional_imports(module: str) -> None:
    path = TESTS / f"{module}.py"
    assert path.is_file(), f"WHEEL_TIER names {module}, which is not in tests/"
    needs = wheel_tier.WHEEL_TIER[module]
    assert set(needs) <= set(wheel_tier.OPTIONAL), (module, needs)
    # a module importing an optional package at its top cannot even be collected without it
    undeclared = (top_level_imports(path) & set(wheel_tier.OPTIONAL)) - set(needs)
    assert not undeclared, f"{module} imports {undeclared} at module level: add it to its WHEEL_TIER needs"


def test_tier_files_are_in_the_checkout() -> None:
    for name in wheel_tier.TIER_FILES:
        assert (ROOT / name).exists(), name


def test_counts_come_from_pytests_junit_report(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(textwrap.dedent("""
        import pytest

        def test_passes(): pass
        def test_fails(): assert False
        @pytest.mark.skip(reason="x")
        def test_skipped(): pass
        @pytest.mark.xfail(strict=True)
        def test_xfails(): assert False
        @pytest.fixture
        def broken(): raise RuntimeError("setup")
        def test_errors(broken): pass
    """))
    junit = tmp_path / "out.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
                           str(tmp_path), f"--junitxml={junit}", str(tmp_path / "test_sample.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert wheel_tier.Counts.from_junit(junit) == wheel_tier.Counts(passed=1, failed=1, skipped=2, errors=1)
    assert list(wheel_tier.module_seconds(junit)) == ["test_sample"]
    assert sum(wheel_tier.skip_reasons(junit).values()) == 2 and "x" in wheel_tier.skip_reasons(junit)
    assert [f.split(":")[2] for f in wheel_tier.failures(junit)] == ["test_fails", "test_errors"]


def test_a_run_expecting_an_installed_kipconsumer_stops_on_another(tmp_path: Path) -> None:
    """tests/conftest.py refuses to run the tier's tests with a kipconsumer other than the installed
    one the runner found (here the checkout's, or the dev install, against a made-up directory)."""
    env = {**os.environ, "KIPCONSUMER_EXPECT_INSTALLED": str(tmp_path / "site-packages" / "kipconsumer")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(TESTS / "test_error_categories.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "not from the installed wheel at" in proc.stdout + proc.stderr


def test_a_deprecation_triggered_by_kipconsumer_fails_a_tier_test(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(textwrap.dedent("""
        import warnings

        def test_in_kipconsumer():
            warnings.warn_explicit("old API", DeprecationWarning, "aio.py", 1, module="kipconsumer.aio")

        def test_elsewhere():
            warnings.warn_explicit("old API", DeprecationWarning, "x.py", 1, module="multiprocessing.x")
    """))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", "--rootdir",
                           str(tmp_path), "-o", f"filterwarnings={wheel_tier.WARNINGS_AS_ERRORS}",
                           str(tmp_path / "test_sample.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "FAILED test_sample.py::test_in_kipconsumer" in proc.stdout, proc.stdout[-2000:]
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout[-2000:]
