"""kipconsumer: a high-throughput Kafka client on librdkafka.

KIP-41 bounded, fair ``poll()``; KIP-62 liveness (native heartbeats, max.poll.interval.ms);
KIP-19 producer timeouts; KIP-572 task timeouts.
"""

from kipconsumer import _loader
from kipconsumer._version import __version__

_loader.load()

from kipconsumer._native import librdkafka_version  # noqa: E402
from kipconsumer._native_info import native_build_info  # noqa: E402
from kipconsumer._records import ConsumerRecord, ConsumerRecords  # noqa: E402
from kipconsumer.consumer import KafkaConsumer  # noqa: E402
from kipconsumer.listener import ConsumerRebalanceListener  # noqa: E402
from kipconsumer.producer import KafkaProducer  # noqa: E402
from kipconsumer.share import AcknowledgeType, KafkaShareConsumer  # noqa: E402
from kipconsumer.structs import (  # noqa: E402
    ConsumerRecordData,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "KafkaConsumer",
    "KafkaProducer",
    "KafkaShareConsumer",
    "AcknowledgeType",
    "TopicPartition",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "ConsumerRecord",
    "ConsumerRecords",
    "ConsumerRecordData",
    "RecordMetadata",
    "ConsumerRebalanceListener",
    "librdkafka_version",
    "native_build_info",
    "__version__",
]
