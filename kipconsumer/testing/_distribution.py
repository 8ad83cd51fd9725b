"""Where the Apache Kafka jars of a :class:`~kipconsumer.testing.KafkaCluster` come from.

Either a Kafka installation the user names (``kafka_home`` or ``$KAFKA_HOME``: its ``libs/`` folder),
or the broker's runtime closure resolved once by Maven from Maven Central by coordinates
(``org.apache.kafka:kafka_2.13:<version>`` plus log4j2's SLF4J binding, so the broker's logs reach
its log file) into a cache outside any checkout: ``$KIPCONSUMER_KAFKA_CACHE`` or
``~/.cache/kipconsumer/kafka``, one folder per version. A resolution is atomic (a temporary folder
renamed into place) and serialised across processes by a file lock, so parallel test processes
resolve once.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kipconsumer.errors import ConfigError
from kipconsumer.testing._errors import KafkaClusterError
from kipconsumer.testing._releases import SUPPORTED_RANGE, parse_release

__all__ = ["DEFAULT_KAFKA_VERSION", "KafkaDistribution", "find_java", "resolve_distribution"]

#: The Apache Kafka release a KafkaCluster runs unless told otherwise (``$KIPCONSUMER_KAFKA_VERSION``
#: or ``$KAFKA_VERSION``): the newest release our Kafka test tier passed on.
DEFAULT_KAFKA_VERSION = "4.4.0"

#: log4j2's SLF4J 1.x binding: Kafka's runtime closure has slf4j-api but no binding, so without it
#: the broker logs nothing.
_LOG4J_SLF4J = ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.25.4")

_MIN_JAVA = 17


@dataclass(frozen=True)
class KafkaDistribution:
    """The jars of one Kafka release: ``libs`` holds them all, ``version`` is the release."""

    libs: Path
    version: str

    @property
    def classpath(self) -> str:
        return str(self.libs / "*")


def user_cache(env_var: str, name: str) -> Path:
    """``$<env_var>`` if set, else ``$XDG_CACHE_HOME`` (or ``~/.cache``) ``/kipconsumer/<name>``."""
    env = os.environ.get(env_var)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kipconsumer" / name


def cache_root() -> Path:
    """The folder that holds resolved Kafka releases."""
    return user_cache("KIPCONSUMER_KAFKA_CACHE", "kafka")


def _version_of_libs(libs: Path) -> str | None:
    for jar in libs.glob("kafka_2.13-*.jar"):
        m = re.match(r"kafka_2\.13-(\d+\.\d+\.\d+)\.jar$", jar.name)
        if m:
            return m.group(1)
    return None


def runtime_pom(artifact_id: str, version: str, deps: list[tuple[str, str, str]]) -> str:
    """A POM of ``packaging pom`` whose runtime closure is ``deps`` (group, artifact, version)."""
    lines = "\n".join(
        f"    <dependency>\n      <groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>\n"
        "    </dependency>" for g, a, v in deps)
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kipconsumer.testing</groupId>
  <artifactId>{artifact_id}</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{lines}
  </dependencies>
</project>
"""


def copy_dependencies(
    mvn: str, pom: str, work: Path, out: Path
) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """Writes ``pom`` into ``work`` and runs Maven's ``dependency:copy-dependencies`` (runtime scope)
    into ``out``; returns the command and its result."""
    (work / "pom.xml").write_text(pom)
    cmd = [mvn, "-q", "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
           "-DincludeScope=runtime", f"-DoutputDirectory={out}"]
    return cmd, subprocess.run(cmd, capture_output=True, text=True, timeout=900)


def _pom(version: str, jackson_yaml: str | None = None) -> str:
    deps = [("org.apache.kafka", "kafka_2.13", version), _LOG4J_SLF4J]
    if jackson_yaml is not None:
        deps.append(("com.fasterxml.jackson.dataformat", "jackson-dataformat-yaml", jackson_yaml))
    return runtime_pom("kafka-broker-runtime", version, deps)


def _jackson_without_yaml(libs: Path) -> str | None:
    """The Jackson version of ``libs`` if it lacks jackson-dataformat-yaml (Kafka 3.x's closure), which
    log4j2 needs to read the cluster's YAML logging config; else None."""
    if any(libs.glob("jackson-dataformat-yaml-*.jar")):
        return None
    for jar in libs.glob("jackson-databind-*.jar"):
        m = re.match(r"jackson-databind-(\d+\.\d+\.\d+)\.jar$", jar.name)
        if m:
            return m.group(1)
    return None


def _not_served(output: str) -> bool:
    return "Could not find artifact org.apache.kafka:kafka_2.13" in output or (
        "Could not resolve dependencies" in output and "org.apache.kafka:kafka_2.13:jar" in output)


def _resolve_with_maven(version: str, target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaClusterError(
            f"Maven (mvn) is not on the PATH: it is needed once to fetch Apache Kafka {version}'s jars "
            "from Maven Central (Debian: apt-get install maven; or pass kafka_home= / set KAFKA_HOME "
            "to a Kafka installation)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".resolve-{version}-", dir=target.parent))
    try:
        cmd, proc = copy_dependencies(mvn, _pom(version), work, work / "libs")
        jackson = _jackson_without_yaml(work / "libs") if proc.returncode == 0 else None
        if jackson is not None:
            cmd, proc = copy_dependencies(mvn, _pom(version, jackson), work, work / "libs")
        if proc.returncode != 0 and _not_served(proc.stdout + proc.stderr):
            raise ConfigError(
                f"version: Kafka {version} is not served by Maven Central (no org.apache.kafka:kafka_2.13:"
                f"{version}); supported: {SUPPORTED_RANGE}"
            )
        if proc.returncode != 0 or _version_of_libs(work / "libs") != version:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise KafkaClusterError(
                f"could not fetch Apache Kafka {version} from Maven Central: `{' '.join(cmd)}` exited "
                f"{proc.returncode}:\n{tail}\n(check the network to Maven Central and that version "
                f"{version} of org.apache.kafka:kafka_2.13 exists; or pass kafka_home=)"
            )
        os.replace(work / "libs", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not target.exists():
            try:
                target.parent.rmdir()  # no empty folder left for a release that failed
            except OSError:
                pass


def resolve_distribution(
    version: str | None = None, kafka_home: str | os.PathLike[str] | None = None
) -> KafkaDistribution:
    """The jars to run: ``kafka_home`` (or ``$KAFKA_HOME``) if given, else ``version`` (default
    ``$KIPCONSUMER_KAFKA_VERSION``, ``$KAFKA_VERSION`` or :data:`DEFAULT_KAFKA_VERSION`; ``"X.Y"`` is
    that line's newest patch, ``kipconsumer.testing._releases``) from the cache, fetched with Maven on
    first use. Raises ConfigError for a release outside the supported range or not on Maven Central
    (naming ``version`` and the range), :class:`KafkaClusterError` saying what is missing otherwise."""
    home = kafka_home if kafka_home is not None else os.environ.get("KAFKA_HOME")
    if home:
        libs = Path(home) / "libs"
        found = _version_of_libs(libs) if libs.is_dir() else None
        if found is None:
            raise KafkaClusterError(
                f"kafka_home: {str(home)!r} is not an Apache Kafka installation (no libs/kafka_2.13-*.jar)"
            )
        if version is not None and str(parse_release(version)) != found:
            raise KafkaClusterError(f"version: {version!r} asked, but kafka_home holds Kafka {found}")
        try:
            parse_release(found)
        except ConfigError:
            raise ConfigError(
                f"kafka_home: {str(home)!r} holds Kafka {found}, which KafkaCluster does not run; "
                f"supported: {SUPPORTED_RANGE}") from None
        return KafkaDistribution(libs, found)
    version = str(parse_release(
        version or os.environ.get("KIPCONSUMER_KAFKA_VERSION") or os.environ.get("KAFKA_VERSION")
        or DEFAULT_KAFKA_VERSION))
    root = cache_root()
    target = root / version / "libs"
    if _version_of_libs(target) == version:
        return KafkaDistribution(target, version)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _version_of_libs(target) != version:
            _resolve_with_maven(version, target)
    return KafkaDistribution(target, version)


def find_java() -> str:
    """The ``java`` to run the brokers with (``$JAVA_HOME/bin/java``, else the PATH's), checked to be
    Java 17 or later. Raises :class:`KafkaClusterError` saying what to install."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else None
    java = java or shutil.which("java")
    if java is None:
        raise KafkaClusterError(
            "no Java runtime: Apache Kafka's broker needs Java 17 or later "
            "(Debian: apt-get install openjdk-17-jre-headless; or set JAVA_HOME)"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else 0
    if major == 1 and m and m.group(2):  # "1.8.0_x" style
        major = int(m.group(2))
    if major < _MIN_JAVA:
        raise KafkaClusterError(
            f"{java} is Java {major or '?'}: Apache Kafka 4's broker needs Java {_MIN_JAVA} or later "
            "(Debian: apt-get install openjdk-17-jre-headless; or set JAVA_HOME)"
        )
    return java
