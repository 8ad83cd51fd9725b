"""Type stub of the compiled kipconsumer._producer (native part of KafkaProducer)."""

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from kipconsumer.config import ProducerSettings
from kipconsumer.structs import RecordMetadata

class ProduceFuture(Future[RecordMetadata]):
    """Future returned by send(); completed only by the producer, cancel() returns False."""

    def cancel(self) -> bool: ...

class ProducerCore:
    """librdkafka producer handle with native enqueue and delivery-report thread."""

    max_block_ms: int
    delivery_timeout_ms: int
    request_timeout_ms: int
    buffer_memory: int
    queue_limits: str
    message_max_bytes: str
    def __init__(
        self,
        settings: ProducerSettings,
        key_serializer: Callable[[Any], Any] | None = None,
        value_serializer: Callable[[Any], Any] | None = None,
    ) -> None: ...
    def send(
        self,
        topic: str,
        value: bytes | bytearray | memoryview | str | None = None,
        key: bytes | bytearray | memoryview | str | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        callback: Callable[[RecordMetadata | None, Exception | None], object] | None = None,
    ) -> ProduceFuture: ...
    def send_nowait(
        self,
        topic: str,
        value: bytes | bytearray | memoryview | str | None,
        key: bytes | bytearray | memoryview | str | None,
        partition: int | None,
        headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None,
        timestamp: int | None,
        callback: Callable[[RecordMetadata | None, Exception | None], object] | None,
    ) -> ProduceFuture:
        """send() that never waits: raises KafkaTimeoutError at once where send() would wait."""
        ...
    def partitions_for(self, topic: str) -> list[int]: ...
    def txn(
        self,
        op: str,
        timeout_s: float,
        offsets: list[tuple[str, int, int]] | None = None,
        group_metadata: bytes | None = None,
    ) -> None: ...
    def flush(self, timeout_s: float) -> int:
        """Returns the number of records still pending (0: all completed); timeout_s
        math.inf: no bound. Raises what a signal handler raises (records stay pending)."""
        ...
    def close(self, timeout_s: float) -> int:
        """Returns the number of records that had to be purged; timeout_s math.inf: no
        bound. Raises IllegalStateError from a send() callback or from inside close() on the
        same thread."""
        ...
    @property
    def closed(self) -> bool: ...
    @property
    def transaction_blocked(self) -> bool:
        """A transactional call that did not return within its timeout is still blocked in librdkafka."""
        ...
    def metrics(self) -> dict[str, Any]: ...

def _set_txn_test_hold_ms(ms: int) -> None:
    """Test hook: transactional calls started afterwards hold their result ``ms`` more milliseconds
    after librdkafka returned. 0: off."""
    ...
