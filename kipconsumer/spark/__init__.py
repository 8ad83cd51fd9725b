"""PySpark data source ``kipkafka``: read and write Kafka from Spark through kipconsumer.

Usage::

    from kipconsumer.spark import register
    register(spark)                                   # once per SparkSession
    df = (spark.readStream.format("kipkafka")
          .option("kafka.bootstrap.servers", servers)
          .option("subscribe", "events")
          .option("maxOffsetsPerTrigger", 100000)
          .load())

Options and schema: docs/spark.md (every option of Spark's Kafka source, supported or refused).

The package's units, each with one job:

* ``options``: every option checked in one place (``ReadOptions``, ``WriteOptions``; ``ConfigError``);
* ``offsets``: Spark's offset JSON and the per-partition JSON specs;
* ``planning``: water-filling, splitting ranges into input partitions, offsets from timestamps,
  ``minOffsetsPerTrigger`` pacing — pure functions;
* ``metadata``: the driver's broker queries (partitions, watermarks, offsets by timestamp);
* ``executor``: reading one offset range exactly, the per-process consumer cache;
* ``batches`` (pyarrow): Arrow batches of the source's schema built in C, or tuples;
* ``reader``, ``writer``, ``source`` (pyspark): the Data Source API classes, ``register``.

The first five import no pyspark and no pyarrow; the names of the others are loaded on first use,
so ``import kipconsumer.spark.options`` works without Spark installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kipconsumer.spark.errors import DataLossError, KafkaWriteError, OffsetForTimestampError
from kipconsumer.spark.executor import clear_consumer_cache, consumer_cache_stats
from kipconsumer.spark.offsets import offsets_from_json, offsets_to_json, parse_offsets_spec
from kipconsumer.spark.options import ReadOptions, WriteOptions
from kipconsumer.spark.planning import OffsetRange, TriggerPacer, split_ranges, water_fill

if TYPE_CHECKING:
    from kipconsumer.spark.batches import ARROW_SCHEMA, SCHEMA, read_arrow, read_tuples, to_spark_batch
    from kipconsumer.spark.reader import KafkaRange, KipKafkaBatchReader, KipKafkaStreamReader
    from kipconsumer.spark.source import NAME, KipKafkaDataSource, local_session, register
    from kipconsumer.spark.writer import KipKafkaStreamWriter, KipKafkaWriter

_LAZY = {
    "ARROW_SCHEMA": "batches", "SCHEMA": "batches", "read_arrow": "batches", "read_tuples": "batches",
    "to_spark_batch": "batches",
    "KafkaRange": "reader", "KipKafkaBatchReader": "reader", "KipKafkaStreamReader": "reader",
    "KipKafkaWriter": "writer", "KipKafkaStreamWriter": "writer",
    "NAME": "source", "KipKafkaDataSource": "source", "local_session": "source", "register": "source",
}

__all__ = [
    "register",
    "KipKafkaDataSource",
    "KafkaRange",
    "SCHEMA",
    "water_fill",
    "split_ranges",
    "OffsetRange",
    "local_session",
    "consumer_cache_stats",
    "clear_consumer_cache",
    "KafkaWriteError",
    "DataLossError",
    "OffsetForTimestampError",
    "ReadOptions",
    "WriteOptions",
    "TriggerPacer",
    "offsets_from_json",
    "offsets_to_json",
    "parse_offsets_spec",
    "ARROW_SCHEMA",
    "read_arrow",
    "read_tuples",
    "to_spark_batch",
    "KipKafkaBatchReader",
    "KipKafkaStreamReader",
    "KipKafkaWriter",
    "KipKafkaStreamWriter",
    "NAME",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kipconsumer.spark' has no attribute {name!r}")
    try:
        mod = importlib.import_module(f"kipconsumer.spark.{module}")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"kipconsumer.spark.{name} needs pyspark>=4.2, pyarrow and pandas<3: "
            "pip install 'pyspark>=4.2' pyarrow 'pandas>=2.2,<3'") from exc
    return getattr(mod, name)
