"""Which Kafka release a KafkaCluster runs: the version argument, ``$KIPCONSUMER_KAFKA_VERSION`` /
``$KAFKA_VERSION``, ``"X.Y"`` shorthand and the supported range (3.7 to 4.4). No JVM starts here but in
the test marked ``kafka`` (Maven asked about a release it does not serve)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kipconsumer.errors import ConfigError
from kipconsumer.testing import KafkaCluster
from kipconsumer.testing._distribution import DEFAULT_KAFKA_VERSION, resolve_distribution
from kipconsumer.testing._releases import NEWEST_PATCH, KafkaRelease, parse_release


@pytest.mark.parametrize("version", ["3.7.2", "3.8.0", "3.9.1", "4.0.0", "4.1.2", "4.2.1", "4.3.0", "4.4.0"])
def test_every_line_from_3_7_to_4_4_is_supported(version: str) -> None:
    assert str(parse_release(version)) == version


def test_a_line_means_its_newest_patch() -> None:
    assert parse_release("3.9") == KafkaRelease(3, 9, 2)
    assert parse_release("4.4") == KafkaRelease(4, 4, 0)
    assert sorted(NEWEST_PATCH) == ["3.7", "3.8", "3.9", "4.0", "4.1", "4.2", "4.3", "4.4"]


@pytest.mark.parametrize("version", ["3.6.2", "2.8.1", "4.5.0", "5.0.0", "3.6"])
def test_a_release_outside_the_range_is_a_config_error_naming_the_range(version: str) -> None:
    with pytest.raises(ConfigError, match=r"^version: Kafka .* not supported.*3\.7\.0 to 4\.4\.x"):
        parse_release(version)
    with pytest.raises(ConfigError, match=r"^version: .*3\.7\.0 to 4\.4\.x"):
        KafkaCluster(version=version)  # refused before anything starts


@pytest.mark.parametrize(
    "version", ["", "4", "4.2.1.0", "v4.2.1", "4.2.x", "latest", " 4.2.1", 4.2, b"4.2.1"])
def test_a_malformed_version_is_a_config_error(version: object) -> None:
    with pytest.raises(ConfigError, match=r"^version: expected a Kafka release .*got .*supported: 3\.7\.0"):
        parse_release(version)


def test_features_by_release() -> None:
    assert [parse_release(v).share_groups for v in ("3.9", "4.0", "4.1", "4.4")] == [False, False, True, True]
    assert [parse_release(v).consumer_protocol for v in ("3.7", "3.9", "4.0")] == [False, False, True]


@pytest.mark.parametrize("var", ["KIPCONSUMER_KAFKA_VERSION", "KAFKA_VERSION"])
def test_the_environment_picks_the_release_and_is_checked(var: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    monkeypatch.delenv("KIPCONSUMER_KAFKA_VERSION", raising=False)
    monkeypatch.setenv(var, "3.6.1")
    with pytest.raises(ConfigError, match=r"version: Kafka 3\.6\.1 is not supported"):
        resolve_distribution()


def test_kipconsumer_variable_wins_over_kafka_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a cache folder that already holds the release: resolve_distribution reads it, Maven is not run
    libs = tmp_path / "3.8.1" / "libs"
    libs.mkdir(parents=True)
    (libs / "kafka_2.13-3.8.1.jar").write_bytes(b"")
    monkeypatch.setenv("KIPCONSUMER_KAFKA_CACHE", str(tmp_path))
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    monkeypatch.setenv("KIPCONSUMER_KAFKA_VERSION", "3.8")
    monkeypatch.setenv("KAFKA_VERSION", "2.0.0")
    assert resolve_distribution().version == "3.8.1"
    monkeypatch.delenv("KIPCONSUMER_KAFKA_VERSION")
    monkeypatch.setenv("KAFKA_VERSION", "3.8.1")
    assert resolve_distribution().version == "3.8.1"
    monkeypatch.delenv("KAFKA_VERSION")
    assert parse_release(DEFAULT_KAFKA_VERSION) >= KafkaRelease(4, 2, 1)


def test_kafka_home_of_an_unsupported_release_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "kafka_2.13-3.6.2.jar").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"^kafka_home: .* holds Kafka 3\.6\.2.*supported: 3\.7\.0 to 4\.4"):
        resolve_distribution(kafka_home=tmp_path)


@pytest.mark.kafka
def test_a_release_maven_central_does_not_serve_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KIPCONSUMER_KAFKA_CACHE", str(tmp_path))
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    with pytest.raises(ConfigError, match=r"^version: Kafka 4\.3\.9 is not served by Maven Central.*3\.7"):
        resolve_distribution("4.3.9")
    assert not (tmp_path / "4.3.9").exists()
