"""Spark's own Kafka connector (``format("kafka")``), for head-to-head tests and benchmarks of
``kipkafka`` against it.

The connector ``org.apache.spark:spark-sql-kafka-0-10_2.13`` must be the installed pyspark's version
exactly, so the version is taken from ``pyspark.__version__``. Its jars and the runtime jars it needs
that pyspark does not ship (``kafka-clients``, ``spark-token-provider-kafka-0-10``, ``commons-pool2``)
are resolved once by Maven from Maven Central into ``$KIPCONSUMER_SPARK_KAFKA_CACHE`` or
``~/.cache/kipconsumer/spark-kafka/<version>/`` (atomic, under a file lock, as Kafka's jars are:
:mod:`kipconsumer.testing._distribution`). Pass :func:`connector_jars_conf` to the SparkSession::

    spark = local_session(extra=connector_jars_conf())
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
from pathlib import Path

from kipconsumer.testing._distribution import copy_dependencies, runtime_pom, user_cache
from kipconsumer.testing._errors import KafkaClusterError

__all__ = ["SparkConnectorError", "connector_jars", "connector_jars_conf", "pyspark_version"]

_ARTIFACT = "spark-sql-kafka-0-10_2.13"
_JAR_RE = re.compile(r"^(?P<name>.+?)-(?P<version>\d[^-]*(?:-[A-Za-z0-9.]+)?)\.jar$")


class SparkConnectorError(KafkaClusterError):
    """Spark's Kafka connector could not be had for the installed pyspark (no pyspark, no Maven, or no
    connector of pyspark's version on Maven Central)."""


def cache_root() -> Path:
    """The folder that holds resolved connector versions."""
    return user_cache("KIPCONSUMER_SPARK_KAFKA_CACHE", "spark-kafka")


def pyspark_version() -> str:
    try:
        import pyspark
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise SparkConnectorError("pyspark is not installed (pip install 'kipconsumer[spark]')") from e
    return str(pyspark.__version__)


def _pyspark_jar_names() -> set[str]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {m.group("name") for j in jars.glob("*.jar") if (m := _JAR_RE.match(j.name))}


def _pom(version: str) -> str:
    return runtime_pom("spark-kafka-connector", version, [("org.apache.spark", _ARTIFACT, version)])


def _complete(libs: Path, version: str) -> bool:
    return (libs / f"{_ARTIFACT}-{version}.jar").is_file()


def _resolve(version: str, target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SparkConnectorError(
            f"Maven (mvn) is not on the PATH: it is needed once to fetch Spark's Kafka connector "
            f"{version} from Maven Central (Debian: apt-get install maven)")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".resolve-{version}-", dir=target.parent))
    try:
        cmd, proc = copy_dependencies(mvn, _pom(version), work, work / "all")
        if proc.returncode != 0 or not _complete(work / "all", version):
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise SparkConnectorError(
                f"could not fetch org.apache.spark:{_ARTIFACT}:{version} (installed pyspark: "
                f"{pyspark_version()}) from Maven Central: `{' '.join(cmd)}` exited "
                f"{proc.returncode}:\n{tail}\n"
                f"(Spark's connector must have pyspark's version; if Maven Central has no {_ARTIFACT} "
                f"{version}, install a pyspark whose version it has)")
        # Keep only what pyspark does not ship (spark-core, hadoop, snappy, ... are on its classpath).
        shipped = _pyspark_jar_names()
        (work / "libs").mkdir()
        for jar in (work / "all").glob("*.jar"):
            m = _JAR_RE.match(jar.name)
            if m is None or m.group("name") not in shipped:
                os.replace(jar, work / "libs" / jar.name)
        os.replace(work / "libs", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def connector_jars(version: str | None = None) -> list[Path]:
    """The jars of Spark's Kafka connector for ``version`` (default: the installed pyspark's), fetched
    with Maven on first use. Raises :class:`SparkConnectorError` saying what is missing."""
    version = version or pyspark_version()
    root = cache_root()
    target = root / version / "libs"
    if not _complete(target, version):
        root.mkdir(parents=True, exist_ok=True)
        with open(root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _complete(target, version):
                _resolve(version, target)
    return sorted(target.glob("*.jar"))


def connector_jars_conf(version: str | None = None) -> dict[str, str]:
    """SparkSession settings that put the connector on the classpath (``spark.jars``)."""
    return {"spark.jars": ",".join(str(j) for j in connector_jars(version))}


if __name__ == "__main__":  # python -m kipconsumer.testing.spark_connector: fetch, then list the jars
    for j in connector_jars():
        print(j)
