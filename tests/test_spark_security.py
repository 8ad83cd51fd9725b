"""The ``kipkafka`` Spark source and sink against a secured Kafka node (issue #28).

In the default run (CI-sized: one secured node and one local[2] session for the module): a refused login
fails a batch read (the driver-side partition metadata) and a batch write with ``AuthenticationError``
(its name in Spark's error), promptly, and the marker secrets given as ``kafka.sasl.password`` and
``kafka.ssl.key.password`` show neither in the error nor in the query's plans (``explain()`` in every
mode, ``str()``/``repr()`` of the DataFrame, Spark's QueryExecution and SQL executions); a topic without
ACLs fails the read with ``TopicAuthorizationError``. Opt-in (``KIPCONSUMER_SECURITY_SPARK=1``): the
streaming source's failure, plan, status and progress.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install pyspark pandas)")

from conftest import unique_name  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from kipconsumer.spark import local_session  # noqa: E402
from kipconsumer.testing import KafkaCluster  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
opt_in = pytest.mark.skipif(not os.environ.get("KIPCONSUMER_SECURITY_SPARK"),
                            reason="opt-in: KIPCONSUMER_SECURITY_SPARK=1 (the streaming variant)")

SECRET = "Sp-S3cret-0c1d-never-shown"
LIMIT_S = 30.0  # Spark's own job start and task failure handling come on top of the client's < 1 s
BOB, BOB_PW = "bob", "bob-pw-5150"  # a SCRAM user without any ACL


@pytest.fixture(scope="module")
def secured() -> Iterator[KafkaCluster]:
    with KafkaCluster(1, sasl_ssl=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    s = local_session("kipkafka-security", cores=2, shuffle_partitions=2)
    yield s
    s.stop()


def _options(cluster: KafkaCluster, user: str = "nobody", password: str = SECRET) -> dict[str, str]:
    return {"kafka.bootstrap.servers": cluster.sasl_ssl_bootstrap_servers,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.username": user,
            "kafka.sasl.password": password, "kafka.ssl.key.password": SECRET,
            "kafka.ssl.ca.location": cluster.ca_location}


def _shown(df: DataFrame) -> list[str]:
    """Everything Spark says about ``df``'s query: explain() in each mode, str(), repr(), the plans."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain(True)
        for mode in ("simple", "extended", "formatted", "cost"):
            df.explain(mode)
    qe = df._jdf.queryExecution()
    return [out.getvalue(), str(df), repr(df), qe.toString(), qe.logical().toString(),
            qe.analyzed().toString()]


def _assert_secret_not_shown(texts: list[str]) -> None:
    assert texts and all(texts)
    leaks = [t[:300] for t in texts if SECRET in t]
    assert not leaks


def test_source_fails_with_authentication_error_and_no_plan_shows_the_secrets(
        spark: SparkSession, secured: KafkaCluster) -> None:
    topic = unique_name("sec")
    secured.create_topic(topic, 1, 1)
    df = spark.read.format("kipkafka").option("subscribe", topic).options(**_options(secured)).load()
    shown = _shown(df)
    assert "kipkafka" in shown[0]
    t0 = time.monotonic()
    with pytest.raises(Exception, match="AuthenticationError") as info:
        df.collect()
    assert time.monotonic() - t0 < LIMIT_S
    _assert_secret_not_shown([*shown, str(info.value)])


def test_sink_fails_with_authentication_error_and_no_plan_shows_the_secrets(
        spark: SparkSession, secured: KafkaCluster) -> None:
    topic = unique_name("sec")
    secured.create_topic(topic, 1, 1)
    df = spark.range(3).select(F.col("id").cast("string").alias("value")).coalesce(1)
    writer = df.write.format("kipkafka").option("topic", topic).options(**_options(secured)).mode("append")
    t0 = time.monotonic()
    with pytest.raises(Exception, match="AuthenticationError") as info:
        writer.save()
    assert time.monotonic() - t0 < LIMIT_S
    _assert_secret_not_shown([*_shown(df), str(info.value), _last_sql_plans(spark)])


def _last_sql_plans(spark: SparkSession) -> str:
    """The plan descriptions of the session's SQL executions so far (what the SQL UI shows)."""
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    return "\n".join(executions.apply(i).physicalPlanDescription() + executions.apply(i).description()
                     for i in range(executions.size())) or "(no executions)"


def test_source_fails_with_topic_authorization_error(spark: SparkSession, secured: KafkaCluster) -> None:
    secured.create_scram_user(BOB, BOB_PW, "SCRAM-SHA-256")
    topic = unique_name("sec")
    secured.create_topic(topic, 1, 1)
    reader = spark.read.format("kipkafka").option("subscribe", topic) \
        .options(**_options(secured, BOB, BOB_PW))
    t0 = time.monotonic()
    with pytest.raises(Exception, match="TopicAuthorizationError") as info:
        reader.load().collect()
    assert time.monotonic() - t0 < LIMIT_S
    assert topic in str(info.value) and "not found" not in str(info.value)


@opt_in
def test_streaming_source_plan_and_progress_do_not_show_the_secrets(
        spark: SparkSession, secured: KafkaCluster) -> None:
    topic = unique_name("sec")
    secured.create_topic(topic, 1, 1)
    stream = spark.readStream.format("kipkafka").option("subscribe", topic) \
        .options(**_options(secured)).load()
    q = stream.writeStream.format("memory").queryName(unique_name("secq").replace("-", "_")).start()
    try:
        deadline = time.monotonic() + LIMIT_S
        while q.exception() is None and q.isActive and time.monotonic() < deadline:
            time.sleep(0.5)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            q.explain(True)
        texts = [out.getvalue() or "(no plan)", str(q.status), str(q.recentProgress) or "[]",
                 str(q.exception())]
    finally:
        q.stop()
    assert "AuthenticationError" in texts[-1]
    _assert_secret_not_shown(texts)
