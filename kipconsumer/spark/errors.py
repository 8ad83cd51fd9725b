"""Errors of the ``kipkafka`` data source (no pyspark needed to import them)."""

from __future__ import annotations

from kipconsumer.errors import KafkaError


class DataLossError(KafkaError):
    """Records of a planned offset range are gone (retention) and ``failOnDataLoss`` is true."""


class KafkaWriteError(KafkaError):
    """At least one record of a Spark write task was not acknowledged."""


class OffsetForTimestampError(KafkaError):
    """``startingOffsetsByTimestamp`` / ``startingTimestamp``: a partition has no record at or after
    the timestamp and ``startingOffsetsByTimestampStrategy`` is ``error`` (Spark's default)."""


# Shown (tracebacks, Spark's error text) and pickled under the package's public name.
for _cls in (DataLossError, KafkaWriteError, OffsetForTimestampError):
    _cls.__module__ = "kipconsumer.spark"
