"""The ``kipkafka`` data source (pyspark): options checked on the driver when a query is built
(``kipconsumer.spark.options``), readers and writers, ``register`` and ``local_session``."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from kipconsumer.spark.batches import SCHEMA, SCHEMA_WITH_HEADERS
from kipconsumer.spark.options import ReadOptions, WriteOptions
from kipconsumer.spark.reader import KipKafkaBatchReader, KipKafkaStreamReader
from kipconsumer.spark.writer import KipKafkaStreamWriter, KipKafkaWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NAME = "kipkafka"


class KipKafkaDataSource(DataSource):
    """The ``kipkafka`` data source (options: docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        # schema() comes before reader()/writer(): only the option that shapes it is read here
        low = {str(k).lower(): str(v).strip().lower() for k, v in self.options.items()}
        return SCHEMA_WITH_HEADERS if low.get("includeheaders") in ("true", "1", "yes") else SCHEMA

    def reader(self, schema: StructType) -> KipKafkaBatchReader:
        return KipKafkaBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> KipKafkaStreamReader:
        return KipKafkaStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> KipKafkaWriter:
        return KipKafkaWriter(WriteOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KipKafkaStreamWriter:
        return KipKafkaStreamWriter(WriteOptions.parse(self.options), schema)


def register(spark: SparkSession) -> None:
    """Registers the ``kipkafka`` data source with ``spark``."""
    spark.dataSource.register(KipKafkaDataSource)


def local_session(app_name: str = "kipkafka", cores: int = 2, shuffle_partitions: int = 2,
                  extra: Mapping[str, str] | None = None) -> SparkSession:
    """A ``local[cores]`` SparkSession whose Python workers run this interpreter, with
    ``kipkafka`` registered. Small defaults for a laptop / CI machine."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    b = (SparkSession.builder.master(f"local[{cores}]").appName(app_name)
         .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", "1g")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.streaming.stopActiveRunOnRestart", "true"))
    for k, v in (extra or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
