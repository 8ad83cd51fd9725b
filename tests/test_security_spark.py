"""The ``kipkafka`` Spark source and sink against a secured Kafka node (issue #28): a refused login fails
the query with ``AuthenticationError`` (its name in Spark's error), promptly, and the password is not in
the error. Opt-in (Spark and a JVM broker together take about a minute on the CI machine):
``KIPCONSUMER_SECURITY_SPARK=1``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install pyspark pandas)")

from conftest import unique_name  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from kipconsumer.spark import local_session  # noqa: E402
from kipconsumer.testing import KafkaCluster  # noqa: E402

pytestmark = [
    pytest.mark.spark,
    pytest.mark.kafka,
    pytest.mark.skipif(not os.environ.get("KIPCONSUMER_SECURITY_SPARK"),
                       reason="opt-in: KIPCONSUMER_SECURITY_SPARK=1 (Spark and a secured Kafka node)"),
]

SECRET = "Sp-S3cret-0c1d-never-shown"
LIMIT_S = 30.0  # Spark's own job start and task failure handling come on top of the client's < 1 s


@pytest.fixture(scope="module")
def secured() -> Iterator[KafkaCluster]:
    with KafkaCluster(1, sasl_ssl=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    s = local_session("kipkafka-security", cores=2, shuffle_partitions=2)
    yield s
    s.stop()


def _options(cluster: KafkaCluster) -> dict[str, Any]:
    return {"kafka.bootstrap.servers": cluster.sasl_ssl_bootstrap_servers,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.username": "nobody",
            "kafka.sasl.password": SECRET, "kafka.ssl.ca.location": cluster.ca_location}


def test_source_fails_with_authentication_error(spark: SparkSession, secured: KafkaCluster) -> None:
    topic = unique_name("sec")
    secured.create_topic(topic, 1, 1)
    reader = spark.read.format("kipkafka").option("subscribe", topic)
    for k, v in _options(secured).items():
        reader = reader.option(k, str(v))
    t0 = time.monotonic()
    with pytest.raises(Exception, match="AuthenticationError") as info:
        reader.load().collect()
    assert time.monotonic() - t0 < LIMIT_S
    assert SECRET not in str(info.value)


def test_sink_fails_with_authentication_error(spark: SparkSession, secured: KafkaCluster) -> None:
    topic = unique_name("sec")
    secured.create_topic(topic, 1, 1)
    writer = spark.range(3).select(F.col("id").cast("string").alias("value")).coalesce(1).write \
        .format("kipkafka").option("topic", topic).mode("append")
    for k, v in _options(secured).items():
        writer = writer.option(k, str(v))
    t0 = time.monotonic()
    with pytest.raises(Exception, match="AuthenticationError") as info:
        writer.save()
    assert time.monotonic() - t0 < LIMIT_S
    assert SECRET not in str(info.value)
