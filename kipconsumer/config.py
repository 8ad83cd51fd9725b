"""Configuration validation: the one place where kipconsumer configs are checked.

Contract
--------
Users configure every client with one ``dict`` that uses Kafka's Java config names. The functions
:func:`consumer_settings`, :func:`producer_settings` and :func:`task_settings` turn such a dict into a
frozen settings object or raise :class:`~kipconsumer.errors.ConfigError`. Nothing else in kipconsumer
validates configs; the clients read the settings objects and hand ``settings.rdkafka`` (a complete
``{librdkafka name: str value}`` dict) to ``rd_kafka_conf_set`` as is.

* Keys of the spec tables below (:data:`CONSUMER_SPECS`, :data:`PRODUCER_SPECS`, :data:`TASK_SPECS`) are
  type- and range-checked and mapped to their librdkafka name and unit.
* librdkafka names that mean the same as a Java key (e.g. ``fetch.wait.max.ms`` for
  ``fetch.max.wait.ms``) are validated as that Java key; giving both with different values is an error.
* Any other name librdkafka 2.x knows (global or topic level) passes through unchanged, as ``str``,
  after librdkafka's own ``rd_kafka_conf_set`` accepted the value on a scratch configuration.
* Any other key raises ``ConfigError`` naming the key and the closest known name.
* A value of ``None`` means "use the default".
* Values of secret keys (:func:`is_secret`) never appear in messages; :func:`redact` masks them.
* A key or str value holding a NUL character raises ``ConfigError`` naming the key (C strings end
  at a NUL: librdkafka would get the value cut short).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kipconsumer._oauth import check_provider as check_oauth_provider
from kipconsumer._validate import suggest
from kipconsumer.errors import ConfigError

log = logging.getLogger("kipconsumer.config")

INT32_MAX = 2_147_483_647
#: Largest number of in-flight requests that keeps ordering with idempotence (Java and librdkafka).
IDEMPOTENT_MAX_IN_FLIGHT = 5

Value = int | bool | str


# --------------------------------------------------------------------------------------------------
# Settings objects (the interface the clients use)
# --------------------------------------------------------------------------------------------------


def _settings_repr(self: object) -> str:
    """dataclass-style repr with secret values of ``rdkafka`` masked (never print a password)."""
    parts = []
    for f in dataclasses.fields(self):  # type: ignore[arg-type]
        value = getattr(self, f.name)
        if f.name == "rdkafka":
            value = redact(value)
        parts.append(f"{f.name}={value!r}")
    return f"{type(self).__name__}({', '.join(parts)})"


@dataclass(frozen=True)
class ConsumerSettings:
    """Validated consumer configuration.

    ``max_poll_interval_ms`` is the effective value after KIP-62's compatibility rule
    (``max(max.poll.interval.ms, session.timeout.ms)``). ``rdkafka`` is the complete librdkafka
    property dict to apply; it already contains every mapped, defaulted and passed-through key.
    """

    group_id: str | None
    max_poll_records: int
    poll_fairness: str
    max_poll_interval_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    default_api_timeout_ms: int
    rdkafka: dict[str, str]
    #: ``isolation.level=read_committed``: offsets and lag are the last stable offset's
    read_committed: bool = False
    #: the rebalance protocol hands partitions over incrementally: a cooperative assignor, or
    #: ``group.protocol=consumer`` (KIP-848, which ignores the assignor setting)
    cooperative: bool = False
    #: the fetch buffer's hard bounds: librdkafka's own prefetch bounds (``queued.min.messages``,
    #: ``queued.max.messages.kbytes`` in bytes), so the buffer never holds more than was fetched
    fetch_buffer_max_records: int = 100_000
    fetch_buffer_max_bytes: int = 8_192 * 1024
    #: ``stats_cb``: called with librdkafka's statistics JSON (``statistics.interval.ms``) on the
    #: thread calling ``poll()``
    stats_cb: Callable[[str], object] | None = None
    #: ``oauth_cb``: the OAUTHBEARER token provider (kipconsumer._oauth), or None
    oauth_cb: Callable[[str], Any] | None = None
    #: ``poll.prefetch.thread``
    poll_prefetch_thread: bool = True
    #: ``poll.stall.fetch.pause.ms`` (0: off): pause librdkafka's fetchers after this long without poll()
    poll_stall_fetch_pause_ms: int = 0
    #: ``key.deserializer`` / ``value.deserializer``: ``bytes -> object``, applied when a record's
    #: ``key`` / ``value`` is read (never to ``None``, never by ``to_arrow()``)
    key_deserializer: Callable[[bytes], object] | None = None
    value_deserializer: Callable[[bytes], object] | None = None

    __repr__ = _settings_repr


@dataclass(frozen=True)
class ShareConsumerSettings:
    """Validated share consumer configuration (KIP-932). ``rdkafka`` is complete: librdkafka's own
    acknowledgement mode is always explicit (kipconsumer.share does the implicit mode itself)."""

    group_id: str
    max_poll_records: int
    poll_fairness: str
    acknowledgement_mode: str
    default_api_timeout_ms: int
    rdkafka: dict[str, str]
    key_deserializer: Callable[[bytes], object] | None = None
    value_deserializer: Callable[[bytes], object] | None = None

    __repr__ = _settings_repr


@dataclass(frozen=True)
class ProducerSettings:
    """Validated producer configuration (KIP-19 timeouts). ``rdkafka`` is complete, values as str."""

    max_block_ms: int
    request_timeout_ms: int
    delivery_timeout_ms: int
    linger_ms: int
    buffer_memory: int
    rdkafka: dict[str, str]
    #: ``stats_cb``: called with librdkafka's statistics JSON (``statistics.interval.ms``) on the
    #: thread calling ``send()``, ``flush()`` or ``metrics()``
    stats_cb: Callable[[str], object] | None = None
    #: ``oauth_cb``: the OAUTHBEARER token provider (kipconsumer._oauth), or None
    oauth_cb: Callable[[str], Any] | None = None

    __repr__ = _settings_repr

    @property
    def client_rdkafka(self) -> dict[str, str]:
        """The librdkafka properties the producer applies: ``rdkafka`` with KIP-19's
        ``request.timeout.ms`` made client-side. librdkafka's topic-level ``request.timeout.ms`` is only
        the ack timeout sent to the broker; a ProduceRequest's client-side timeout is the smaller of
        ``socket.timeout.ms`` and the remaining ``message.timeout.ms`` (= ``delivery.timeout.ms``). So
        ``socket.timeout.ms`` is ``request.timeout.ms`` unless given: a request without a response
        fails after ``request.timeout.ms`` and is retried while ``delivery.timeout.ms`` allows."""
        props = dict(self.rdkafka)
        props.setdefault("socket.timeout.ms", str(self.request_timeout_ms))
        return props


@dataclass(frozen=True)
class TaskSettings:
    """Validated task executor configuration (KIP-572)."""

    task_timeout_ms: int
    retry_backoff_ms: int


@dataclass(frozen=True)
class PipelineSettings:
    """Validated keys of ``kipconsumer.streams.Pipeline`` itself (not sent to a client)."""

    processing_guarantee: str
    commit_interval_ms: int


# --------------------------------------------------------------------------------------------------
# Spec table machinery
# --------------------------------------------------------------------------------------------------


class Kind(enum.Enum):
    """How a value is parsed."""

    INT = "integer"
    BOOL = "boolean"
    STR = "string"
    ENUM = "enum"
    SERVERS = "host:port list"
    ASSIGNORS = "assignor list"


_SAME = "\0same"  # marker: the librdkafka name equals the Java name


@dataclass(frozen=True)
class Spec:
    """One configuration key.

    ``default`` is the effective default (the Python value the settings report). ``rdkafka`` is the
    librdkafka name the value is emitted under (``None``: used by kipconsumer only, never sent).
    The value is emitted when the user set it, or always when ``emit_default``. ``aliases`` are
    librdkafka names accepted as input for the same setting, in units of ``scale`` Java units
    (librdkafka value = ceil(Java value / scale)). ``values`` maps an enum value to librdkafka's.
    """

    kind: Kind
    default: Value | None = None
    lo: int = 0
    hi: int = INT32_MAX
    choices: tuple[str, ...] = ()
    rdkafka: str | None = _SAME
    values: tuple[tuple[str, str], ...] = ()
    aliases: tuple[str, ...] = ()
    emit_default: bool = False
    scale: int = 1
    nonempty: bool = False
    doc: str = ""

    def allowed(self) -> str:
        """Human-readable allowed values, used in error messages and docs."""
        if self.kind is Kind.INT:
            return f"{self.lo}..{self.hi}"
        if self.kind is Kind.BOOL:
            return "true|false"
        if self.kind in (Kind.ENUM, Kind.ASSIGNORS):
            return "|".join(self.choices)
        return "a non-empty string" if self.nonempty else "a string"


def _int(lo: int, hi: int, default: int | None = None, **kw: Any) -> Spec:
    return Spec(Kind.INT, default, lo=lo, hi=hi, **kw)


def _bool(default: bool | None, **kw: Any) -> Spec:
    return Spec(Kind.BOOL, default, **kw)


def _enum(choices: str, default: str | None, **kw: Any) -> Spec:
    return Spec(Kind.ENUM, default, choices=tuple(choices.split("|")), **kw)


def _str(**kw: Any) -> Spec:
    return Spec(Kind.STR, None, **kw)


def _table(specs: Mapping[str, Spec]) -> dict[str, Spec]:
    """Resolve the ``_SAME`` marker: the librdkafka name defaults to the Java name."""
    return {k: dataclasses.replace(s, rdkafka=k) if s.rdkafka == _SAME else s for k, s in specs.items()}


# Assignor names accepted (librdkafka's and the Java classes) -> librdkafka name.
_ASSIGNOR_NAMES = {
    "range": "range",
    "roundrobin": "roundrobin",
    "cooperative-sticky": "cooperative-sticky",
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}
_ASSIGNORS = {k.lower(): v for k, v in _ASSIGNOR_NAMES.items()}

_COMMON: dict[str, Spec] = {
    "bootstrap.servers": Spec(Kind.SERVERS, nonempty=True, aliases=("metadata.broker.list",),
                              doc="Required. Comma list (or list) of host:port."),
    "client.id": _str(doc="librdkafka default 'rdkafka'."),
    "security.protocol": _enum("plaintext|ssl|sasl_plaintext|sasl_ssl", "plaintext"),
    "retry.backoff.ms": _int(1, 300_000, 100),
    "reconnect.backoff.ms": _int(0, 3_600_000, 100),
    "reconnect.backoff.max.ms": _int(0, 3_600_000, 10_000),
    "metadata.max.age.ms": _int(1, 86_400_000, 900_000),
}

#: librdkafka may prefetch this many polls' worth (``max.poll.records``) of records, at least
#: 100,000 (``queued.min.messages``'s default): the fetch buffer's record bound, KIP-41's prefetch rule.
PREFETCH_POLLS = 4

#: ``poll.stall.fetch.pause.ms``'s upper bound; also at most the effective max.poll.interval.ms / 20:
#: the release of librdkafka's queue counts as a poll for its max.poll.interval.ms (csrc/stall_pause.h)
STALL_PAUSE_MAX_MS = 60_000
#: ``poll.stall.fetch.pause.ms`` when not given, if max.poll.interval.ms / 20 allows it (else off): longer
#: than an application's usual pauses between polls, each of which would otherwise refetch
STALL_PAUSE_DEFAULT_MS = 5_000

#: Consumer keys (Java names, plus the two librdkafka prefetch bounds kipconsumer defaults).
CONSUMER_SPECS: dict[str, Spec] = _table({
    **_COMMON,
    "group.id": _str(nonempty=True, doc="Needed for subscribe() and commits."),
    "group.instance.id": _str(nonempty=True, doc="KIP-345 static membership."),
    "group.protocol": _enum("classic|consumer", "classic",
                            doc="'consumer' (KIP-848): session/heartbeat/assignor are broker-side."),
    "session.timeout.ms": _int(1, 3_600_000, 45_000, emit_default=True),
    "heartbeat.interval.ms": _int(1, 3_600_000, 3_000, emit_default=True,
                                  doc="Must be < session.timeout.ms."),
    "max.poll.interval.ms": _int(1, 86_400_000, 300_000, emit_default=True,
                                 doc="Effective value is max(this, session.timeout.ms) (KIP-62)."),
    "max.poll.records": _int(1, 1_000_000, 500, rdkafka=None, doc="Enforced by kipconsumer (KIP-41)."),
    "poll.fairness": _enum("proportional|greedy", "proportional", rdkafka=None,
                           doc="How poll() shares max.poll.records over partitions."),
    "poll.prefetch.thread": _bool(True, rdkafka=None,
                                  doc="Move fetched records into the fetch buffer on a thread of the "
                                  "consumer's own, between polls (false: poll() moves them itself): a "
                                  "cheap first poll after a pause."),
    "poll.stall.fetch.pause.ms": _int(0, STALL_PAUSE_MAX_MS, None, rdkafka=None,
                                      doc="0: off. Pause librdkafka's fetchers when the application has not "
                                      "called poll() for this long (what was fetched is released and "
                                      "fetched again at the next poll(), which resumes them); at most "
                                      "max.poll.interval.ms / 20. Default 5000, or 0 (off) when "
                                      "max.poll.interval.ms / 20 is below that."),
    "enable.auto.commit": _bool(True, emit_default=True, aliases=("auto.commit.enable",)),
    "auto.commit.interval.ms": _int(0, 86_400_000, 5_000, emit_default=True),
    "auto.offset.reset": _enum("earliest|latest|none", "latest", emit_default=True,
                               values=(("none", "error"),)),
    "fetch.min.bytes": _int(1, 100_000_000, 1),
    "fetch.max.bytes": _int(0, 2_147_483_135, 52_428_800, emit_default=True),
    "fetch.max.wait.ms": _int(0, 300_000, 500, rdkafka="fetch.wait.max.ms", aliases=("fetch.wait.max.ms",)),
    "max.partition.fetch.bytes": _int(1, 1_000_000_000, 1_048_576, emit_default=True,
                                      aliases=("fetch.message.max.bytes",)),
    "isolation.level": _enum("read_committed|read_uncommitted", "read_uncommitted", emit_default=True),
    "partition.assignment.strategy": Spec(Kind.ASSIGNORS, "range", choices=tuple(_ASSIGNOR_NAMES),
                                          emit_default=True, doc="Comma list or list; one protocol type."),
    "default.api.timeout.ms": _int(0, INT32_MAX, 60_000, rdkafka=None,
                                   doc="Bound of blocking calls made with timeout=None."),
    "request.timeout.ms": _int(10, 300_000, 60_000, rdkafka="socket.timeout.ms",
                               aliases=("socket.timeout.ms",), doc="librdkafka's network request timeout."),
    "check.crcs": _bool(False),
    "queued.max.messages.kbytes": _int(1, 2_097_151, 8_192, emit_default=True,
                                       doc="Bounded prefetch of the whole consumer (librdkafka name)."),
    "queued.min.messages": _int(1, 10_000_000, None,
                                doc="Bounded prefetch of the whole consumer (librdkafka name); default "
                                "max(4*max.poll.records, 100000)."),
    "fetch.queue.backoff.ms": _int(0, 300_000, 10, emit_default=True,
                                   doc="Pause before fetching again once the prefetch bound was reached "
                                   "(librdkafka name; its default, 1000, stalls a fast consumer)."),
})

#: Producer keys (Java names).
PRODUCER_SPECS: dict[str, Spec] = _table({
    **_COMMON,
    "acks": _enum("all|-1|0|1", "all", emit_default=True, values=(("-1", "all"),),
                  aliases=("request.required.acks",)),
    "linger.ms": _int(0, 900_000, 5, emit_default=True, aliases=("queue.buffering.max.ms",)),
    "batch.size": _int(1, INT32_MAX, 1_000_000),
    "buffer.memory": _int(1, INT32_MAX * 1024, 33_554_432, emit_default=True, scale=1024,
                          rdkafka="queue.buffering.max.kbytes", aliases=("queue.buffering.max.kbytes",),
                          doc="Bytes; sent as ceil(bytes/1024) KiB."),
    "max.block.ms": _int(0, INT32_MAX, 60_000, rdkafka=None, doc="Bound of send() blocking (KIP-19)."),
    "delivery.timeout.ms": _int(0, INT32_MAX, 120_000, emit_default=True, rdkafka="message.timeout.ms",
                                aliases=("message.timeout.ms",),
                                doc="Must be >= linger.ms + request.timeout.ms."),
    "request.timeout.ms": _int(10, 300_000, 30_000, emit_default=True,
                               doc="Also the client-side bound of a request (socket.timeout.ms, "
                               "librdkafka's range 10..300000; see ProducerSettings.client_rdkafka)."),
    "retries": _int(0, INT32_MAX, INT32_MAX, aliases=("message.send.max.retries",)),
    "enable.idempotence": _bool(True, emit_default=True,
                                doc="Needs acks=all, max.in.flight<=5, retries>=1."),
    "compression.type": _enum("none|gzip|snappy|lz4|zstd", "none", aliases=("compression.codec",)),
    "partitioner": _enum("murmur2_random|murmur2|consistent_random|consistent|random|fnv1a_random|fnv1a",
                         "murmur2_random", emit_default=True,
                         doc="librdkafka name. The default puts a keyed record on the Java client's "
                         "partition (murmur2 of the key bytes); consistent_random is librdkafka's own "
                         "default (CRC32), another partition for most keys."),
    "max.in.flight.requests.per.connection": _int(1, 1_000_000, 5, emit_default=True, rdkafka="max.in.flight",
                                                  aliases=("max.in.flight",)),
    "max.request.size": _int(1_000, 1_000_000_000, 1_000_000, rdkafka="message.max.bytes",
                             aliases=("message.max.bytes",)),
    "transactional.id": _str(nonempty=True, doc="Requires idempotence."),
    "transaction.timeout.ms": _int(1_000, INT32_MAX, 60_000,
                                   doc="With transactional.id, delivery.timeout.ms must not exceed it."),
})

#: Where a default of the tables above differs from the Java client's (kafka-clients 4.2.1's
#: ``ConfigDef`` defaults): ``(client, key) -> (Java's default, why kipconsumer's differs)``.
#: tests/test_java_defaults.py asks the Java client for its defaults and fails on any difference not
#: listed here, or listed with another Java value; docs/configuration.md shows this table.
JAVA_DEFAULT_DIFFERENCES: dict[tuple[str, str], tuple[object, str]] = {
    ("consumer", "partition.assignment.strategy"): (
        "range,cooperative-sticky",
        "librdkafka cannot offer an eager and a cooperative assignor together; a group of default Java "
        "members uses range (first in their list), so default members of both clients agree on range"),
    ("consumer", "request.timeout.ms"): (
        30_000, "sent as librdkafka's socket.timeout.ms, whose default (60000) applies"),
    ("consumer", "check.crcs"): (
        True, "librdkafka's default: CRC32C of every fetched batch costs CPU on the hot path"),
    ("consumer", "metadata.max.age.ms"): (
        300_000, "librdkafka's default (it refreshes topic metadata every 300000 ms anyway: "
        "topic.metadata.refresh.interval.ms)"),
    ("producer", "metadata.max.age.ms"): (
        300_000, "librdkafka's default (topic metadata refreshed every 300000 ms anyway)"),
    ("consumer", "reconnect.backoff.ms"): (50, "librdkafka's default"),
    ("producer", "reconnect.backoff.ms"): (50, "librdkafka's default"),
    ("consumer", "reconnect.backoff.max.ms"): (1_000, "librdkafka's default"),
    ("producer", "reconnect.backoff.max.ms"): (1_000, "librdkafka's default"),
    ("producer", "batch.size"): (
        16_384, "librdkafka's default: its batch.size bounds a whole per-partition batch (batches form "
        "during linger.ms, 5 ms as in Java); 16 KiB batches would cut throughput"),
    ("producer", "max.request.size"): (
        1_048_576, "sent as librdkafka's message.max.bytes, whose default (1000000) applies"),
}

#: Share consumer keys (KIP-932). Share groups keep session, heartbeat, offset reset, isolation and
#: lock settings on the broker (group configs ``share.*`` / broker configs ``group.share.*``).
SHARE_CONSUMER_SPECS: dict[str, Spec] = _table({
    **_COMMON,
    "group.id": _str(nonempty=True, doc="Required: the share group."),
    "max.poll.records": _int(1, 1_000_000, 500, emit_default=True,
                             doc="Enforced by kipconsumer: poll() never returns more."),
    "poll.fairness": _enum("proportional|greedy", "proportional", rdkafka=None,
                           doc="How poll() shares max.poll.records over partitions."),
    "share.acknowledgement.mode": _enum("implicit|explicit", "implicit", rdkafka=None,
                                        doc="implicit: a poll() accepts the records of the previous "
                                        "one; explicit: acknowledge() every record before the next "
                                        "poll()."),
    "default.api.timeout.ms": _int(0, INT32_MAX, 60_000, rdkafka=None,
                                   doc="Bound of blocking calls made with timeout=None."),
    "request.timeout.ms": _int(10, 300_000, 60_000, rdkafka="socket.timeout.ms",
                               aliases=("socket.timeout.ms",), doc="librdkafka's network request timeout."),
    "fetch.min.bytes": _int(1, 100_000_000, 1),
    "fetch.max.wait.ms": _int(0, 300_000, 500, rdkafka="fetch.wait.max.ms", aliases=("fetch.wait.max.ms",)),
    "fetch.max.bytes": _int(0, 2_147_483_135, 52_428_800),
    "max.partition.fetch.bytes": _int(1, 1_000_000_000, 1_048_576, aliases=("fetch.message.max.bytes",)),
})

#: Consumer-group keys a share consumer refuses, with where a share group keeps the setting.
SHARE_BROKER_SIDE: dict[str, str] = {
    "auto.offset.reset": "the share group's config share.auto.offset.reset (admin API, GROUP resource)",
    "isolation.level": "the share group's config share.isolation.level (admin API, GROUP resource)",
    "session.timeout.ms": "the broker's group.share.session.timeout.ms",
    "heartbeat.interval.ms": "the broker's group.share.heartbeat.interval.ms",
    "enable.auto.commit": "share.acknowledgement.mode (acknowledgements replace offset commits)",
    "group.protocol": "nothing: a share consumer always uses the share group protocol",
    "partition.assignment.strategy": "the broker (share groups assign partitions broker side)",
    "group.instance.id": "nothing: share groups have no static membership",
}

#: Task executor keys (KIP-572).
TASK_SPECS: dict[str, Spec] = _table({
    "task.timeout.ms": _int(0, INT32_MAX, 300_000, rdkafka=None),
    "retry.backoff.ms": _int(0, INT32_MAX, 100, rdkafka=None),
    "retries": _int(0, INT32_MAX, None, rdkafka=None, doc="Deprecated by KIP-572: accepted and ignored."),
})

#: Pipeline keys (kipconsumer.streams). commit.interval.ms defaults per guarantee, as in Kafka Streams.
PIPELINE_SPECS: dict[str, Spec] = _table({
    "processing.guarantee": _enum("at_least_once|exactly_once_v2", "at_least_once", rdkafka=None,
                                  doc="exactly_once_v2: outputs and source offsets in one transaction."),
    "commit.interval.ms": _int(0, INT32_MAX, None, rdkafka=None,
                               doc="Default 1000 (at_least_once) or 100 (exactly_once_v2)."),
})
COMMIT_INTERVAL_MS_DEFAULT = {"at_least_once": 1_000, "exactly_once_v2": 100}

#: librdkafka settings the consumer manages itself; a user value must equal these.
CONSUMER_FORCED: dict[str, str] = {"enable.auto.offset.store": "false", "enable.partition.eof": "false"}
#: librdkafka settings the producer manages itself (every future must resolve).
PRODUCER_FORCED: dict[str, str] = {"delivery.report.only.error": "false"}

# Every property (global and topic level, aliases included) of librdkafka 2.16 that can be set
# with a string, from rd_kafka_conf_properties_show(). Unioned at runtime with the names the
# loaded librdkafka dumps.
_RDKAFKA_STATIC_NAMES = frozenset({
        "acks", "allow.auto.create.topics", "api.version.fallback.ms", "api.version.request",
        "api.version.request.timeout.ms", "auto.commit.enable", "auto.commit.interval.ms",
        "auto.offset.reset", "batch.num.messages", "batch.size", "bootstrap.servers",
        "broker.address.family", "broker.address.ttl", "broker.version.fallback", "builtin.features",
        "check.crcs", "client.dns.lookup", "client.id", "client.rack", "compression.codec",
        "compression.level", "compression.type", "connections.max.idle.ms",
        "consume.callback.max.messages", "coordinator.query.interval.ms", "debug",
        "delivery.report.only.error", "delivery.timeout.ms", "enable.auto.commit",
        "enable.auto.offset.store", "enable.gapless.guarantee", "enable.idempotence",
        "enable.metrics.push", "enable.partition.eof", "enable.random.seed",
        "enable.sasl.oauthbearer.unsecure.jwt", "enable.ssl.certificate.verification", "enabled_events",
        "fetch.error.backoff.ms", "fetch.max.bytes", "fetch.message.max.bytes", "fetch.min.bytes",
        "fetch.queue.backoff.ms", "fetch.wait.max.ms", "group.id", "group.instance.id",
        "group.protocol", "group.protocol.type", "group.remote.assignor", "heartbeat.interval.ms",
        "https.ca.location", "https.ca.pem", "internal.termination.signal", "isolation.level",
        "linger.ms", "log.connection.close", "log.queue", "log.thread.name", "log_level",
        "max.in.flight", "max.in.flight.requests.per.connection", "max.partition.fetch.bytes",
        "max.poll.interval.ms", "max.poll.records", "message.copy.max.bytes", "message.max.bytes",
        "message.send.max.retries", "message.timeout.ms", "metadata.broker.list", "metadata.max.age.ms",
        "metadata.recovery.rebootstrap.trigger.ms", "metadata.recovery.strategy", "offset.store.method",
        "offset.store.path", "offset.store.sync.interval.ms", "partition.assignment.strategy",
        "partitioner", "plugin.library.paths", "produce.offset.report",
        "queue.buffering.backpressure.threshold", "queue.buffering.max.kbytes",
        "queue.buffering.max.messages", "queue.buffering.max.ms", "queued.max.messages.kbytes",
        "queued.min.messages", "queuing.strategy", "receive.message.max.bytes",
        "reconnect.backoff.jitter.ms", "reconnect.backoff.max.ms", "reconnect.backoff.ms",
        "request.required.acks", "request.timeout.ms", "retries", "retry.backoff.max.ms",
        "retry.backoff.ms", "sasl.kerberos.keytab", "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal",
        "sasl.kerberos.service.name", "sasl.mechanism", "sasl.mechanisms",
        "sasl.oauthbearer.assertion.algorithm", "sasl.oauthbearer.assertion.claim.aud",
        "sasl.oauthbearer.assertion.claim.exp.seconds", "sasl.oauthbearer.assertion.claim.iss",
        "sasl.oauthbearer.assertion.claim.jti.include", "sasl.oauthbearer.assertion.claim.nbf.seconds",
        "sasl.oauthbearer.assertion.claim.sub", "sasl.oauthbearer.assertion.file",
        "sasl.oauthbearer.assertion.jwt.template.file", "sasl.oauthbearer.assertion.private.key.file",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.oauthbearer.assertion.private.key.pem", "sasl.oauthbearer.client.credentials.client.id",
        "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config", "sasl.oauthbearer.extensions",
        "sasl.oauthbearer.grant.type", "sasl.oauthbearer.metadata.authentication.type",
        "sasl.oauthbearer.method", "sasl.oauthbearer.scope", "sasl.oauthbearer.sub.claim.name",
        "sasl.oauthbearer.token.endpoint.url", "sasl.password", "sasl.username", "security.protocol",
        "session.timeout.ms", "share.acknowledgement.mode", "socket.blocking.max.ms",
        "socket.connection.setup.timeout.ms", "socket.keepalive.enable", "socket.max.fails",
        "socket.nagle.disable", "socket.receive.buffer.bytes", "socket.send.buffer.bytes",
        "socket.timeout.ms", "ssl.ca.certificate.stores", "ssl.ca.location", "ssl.ca.pem",
        "ssl.certificate.location", "ssl.certificate.pem", "ssl.cipher.suites", "ssl.crl.location",
        "ssl.curves.list", "ssl.endpoint.identification.algorithm", "ssl.engine.id",
        "ssl.engine.location", "ssl.key.location", "ssl.key.password", "ssl.key.pem",
        "ssl.keystore.location", "ssl.keystore.password", "ssl.providers", "ssl.sigalgs.list",
        "statistics.interval.ms", "sticky.partitioning.linger.ms", "topic.blacklist",
        "topic.metadata.propagation.max.ms", "topic.metadata.refresh.fast.cnt",
        "topic.metadata.refresh.fast.interval.ms", "topic.metadata.refresh.interval.ms",
        "topic.metadata.refresh.sparse", "transaction.timeout.ms", "transactional.id",
})

# Properties that librdkafka only accepts through dedicated setter functions (callbacks, pointers).
_RDKAFKA_POINTER_NAMES = frozenset({
        "background_event_cb", "closesocket_cb", "connect_cb", "consume_cb", "default_topic_conf",
        "dr_cb", "dr_msg_cb", "error_cb", "interceptors", "log_cb", "msg_order_cmp",
        "oauthbearer_token_refresh_cb", "offset_commit_cb", "opaque", "open_cb", "partitioner_cb",
        "rebalance_cb", "resolve_cb", "socket_cb", "ssl.certificate.verify_cb", "ssl_ca",
        "ssl_certificate", "ssl_engine_callback_data", "ssl_key", "stats_cb", "throttle_cb",
})

# Java-only names with a librdkafka counterpart of a different shape: named in the error.
_HINTS = {
    "sasl.jaas.config": "librdkafka takes sasl.username and sasl.password (or sasl.oauthbearer.config)",
    "ssl.truststore.location": "librdkafka takes a PEM file in ssl.ca.location",
    "ssl.truststore.password": "librdkafka takes a PEM file in ssl.ca.location",
    "key.deserializer": "a consumer config (a callable bytes -> object)",
    "value.deserializer": "a consumer config (a callable bytes -> object)",
    "key.serializer": "pass key_serializer= to KafkaProducer (a callable object -> bytes or str)",
    "value.serializer": "pass value_serializer= to KafkaProducer (a callable object -> bytes or str)",
}

_SECRET_MARKERS = ("password", "secret", "sasl.jaas.config", "ssl.key.pem", "ssl_key", "oauthbearer.config",
                   "passphrase", "private.key")

_INT_RE = re.compile(r"[+-]?[0-9]+")


# --------------------------------------------------------------------------------------------------
# Public helpers
# --------------------------------------------------------------------------------------------------


def is_secret(key: str) -> bool:
    """True when ``key`` names a secret whose value must never be shown."""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def redact(conf: Mapping[str, object]) -> dict[str, object]:
    """Return a copy of ``conf`` with the value of every secret key replaced by ``"***"``."""
    return {k: ("***" if isinstance(k, str) and is_secret(k) else v) for k, v in conf.items()}


@functools.cache
def librdkafka_names() -> frozenset[str]:
    """Every librdkafka property name that can be passed through as a string."""
    names: set[str] = set(_RDKAFKA_STATIC_NAMES)
    try:
        from kipconsumer import _native

        names.update(str(n) for n in _native.librdkafka_property_names())
    except (ImportError, AttributeError):  # pragma: no cover - the static list still applies
        pass
    return frozenset(names - _RDKAFKA_POINTER_NAMES)


RdkafkaCheck = Callable[[str, str], "str | None"]


@functools.cache
def _librdkafka_check() -> RdkafkaCheck | None:
    """A function that sets one property on a scratch librdkafka conf and returns its error, if any
    (kipconsumer._native, the one binding to librdkafka). ``None`` when the extension cannot be
    loaded (then pass-through values are not pre-checked)."""
    try:
        from kipconsumer import _native
    except ImportError:  # pragma: no cover - the clients will fail loudly anyway
        return None
    check: RdkafkaCheck = _native.librdkafka_property_error
    return check


# --------------------------------------------------------------------------------------------------
# Value parsing
# --------------------------------------------------------------------------------------------------


def _show(key: str, value: object) -> str:
    """``key=value`` for messages, with secrets masked."""
    return f"{key}=***" if is_secret(key) else f"{key}={value!r}"


def _bad(key: str, value: object, what: str, spec: Spec) -> ConfigError:
    return ConfigError(f"{_show(key, value)} {what}: allowed {spec.allowed()}")


def _parse_int(key: str, spec: Spec, raw: object) -> int:
    if isinstance(raw, bool):
        raise _bad(key, raw, "is not an integer", spec)
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str) and _INT_RE.fullmatch(raw.strip()):
        value = int(raw.strip())
    else:
        raise _bad(key, raw, "is not an integer", spec)
    if not spec.lo <= value <= spec.hi:
        raise ConfigError(f"{_show(key, value)} is out of range: allowed {spec.allowed()}")
    return value


def _parse_bool(key: str, spec: Spec, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise _bad(key, raw, "is not a boolean", spec)


def _parse_enum(key: str, spec: Spec, raw: object) -> str:
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = str(raw)
    if isinstance(raw, str) and raw.strip().lower() in spec.choices:
        return raw.strip().lower()
    raise _bad(key, raw, "is not allowed", spec)


def _parse_str(key: str, spec: Spec, raw: object) -> str:
    if not isinstance(raw, str):
        raise _bad(key, raw, "is not a string", spec)
    if spec.nonempty and not raw.strip():
        raise _bad(key, raw, "is empty", spec)
    return raw


def _parse_list(key: str, spec: Spec, raw: object) -> list[str]:
    """A comma-separated string or a list/tuple of strings, as stripped non-empty items."""
    if isinstance(raw, str):
        items = raw.split(",")
    elif isinstance(raw, (list, tuple)) and all(isinstance(i, str) for i in raw):
        items = [i for part in raw for i in part.split(",")]
    else:
        raise _bad(key, raw, f"is not a valid {spec.kind.value}", spec)
    stripped = [i.strip() for i in items]
    if not stripped or not all(stripped):
        raise _bad(key, raw, "has an empty entry", spec)
    return stripped


def _parse_servers(key: str, spec: Spec, raw: object) -> str:
    return ",".join(_parse_list(key, spec, raw))


def _parse_assignors(key: str, spec: Spec, raw: object) -> str:
    names: list[str] = []
    for item in _parse_list(key, spec, raw):
        name = _ASSIGNORS.get(item.lower())
        if name is None:
            raise ConfigError(f"{_show(key, raw)}: unknown assignor {item!r}: allowed {spec.allowed()}")
        if name not in names:
            names.append(name)
    if "cooperative-sticky" in names and len(names) > 1:
        raise ConfigError(f"{_show(key, raw)}: cooperative-sticky cannot be combined with eager assignors "
                          "(range, roundrobin): all assignors must use the same rebalance protocol")
    return ",".join(names)


_PARSERS: dict[Kind, Callable[[str, Spec, object], Value]] = {
    Kind.INT: _parse_int,
    Kind.BOOL: _parse_bool,
    Kind.ENUM: _parse_enum,
    Kind.STR: _parse_str,
    Kind.SERVERS: _parse_servers,
    Kind.ASSIGNORS: _parse_assignors,
}


def _parse(key: str, canonical: str, spec: Spec, raw: object) -> Value:
    """Parse ``raw`` given under ``key`` (the Java name or one of its librdkafka aliases)."""
    if key != canonical and spec.scale != 1:  # the alias is in librdkafka units
        alias_spec = dataclasses.replace(spec, lo=-(-spec.lo // spec.scale), hi=spec.hi // spec.scale)
        return _parse_int(key, alias_spec, raw) * spec.scale
    return _PARSERS[spec.kind](key, spec, raw)


def _rdkafka_value(spec: Spec, value: Value) -> str:
    """The librdkafka string for a parsed value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(-(-value // spec.scale))
    return dict(spec.values).get(value, value)


def _passthrough_value(key: str, raw: object) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (str, int, float)):
        return str(raw)
    raise ConfigError(f"{_show(key, raw)} is not a librdkafka value: allowed a str, int, float or bool")


# --------------------------------------------------------------------------------------------------
# Key resolution
# --------------------------------------------------------------------------------------------------


@dataclass
class _Resolved:
    """A config dict split into validated table values and librdkafka pass-through values."""

    specs: Mapping[str, Spec]
    values: dict[str, Value | None]
    explicit: dict[str, str]  # Java key -> the key the user spelled it with
    passthrough: dict[str, str]

    def get_int(self, key: str) -> int:
        value = self.values[key]
        assert isinstance(value, int) and not isinstance(value, bool)
        return value

    def get_bool(self, key: str) -> bool:
        value = self.values[key]
        assert isinstance(value, bool)
        return value

    def get_str(self, key: str) -> str | None:
        value = self.values[key]
        assert value is None or isinstance(value, str)
        return value


def _alias_index(specs: Mapping[str, Spec]) -> dict[str, str]:
    return {alias: key for key, spec in specs.items() for alias in spec.aliases if alias not in specs}


def _unknown(key: str, client: str, specs: Mapping[str, Spec], others: Mapping[str, str],
             passthrough: bool) -> ConfigError:
    if key in others:
        return ConfigError(f"config {key!r} is a {others[key]} config, not accepted by the {client}")
    if key in _RDKAFKA_POINTER_NAMES and passthrough:
        return ConfigError(f"config {key!r} is a librdkafka callback/pointer property: it cannot be set "
                           "through the config dict")
    if key in _HINTS:
        return ConfigError(f"unknown config {key!r}: {_HINTS[key]}")
    candidates = [*specs, *_alias_index(specs)]
    if passthrough:
        candidates.extend(librdkafka_names())
    return ConfigError(f"unknown config {key!r}{suggest(key, candidates)}")


def _record(res: _Resolved, key: str, canonical: str, raw: object) -> None:
    """Validate one table key (or alias) and detect conflicting spellings of the same setting."""
    value = _parse(key, canonical, res.specs[canonical], raw)
    first = res.explicit.get(canonical)
    if first is not None and res.values[canonical] != value:
        raise ConfigError(f"{first!r} and {key!r} are the same setting and were given different values"
                          + ("" if is_secret(key) else f" ({res.values[canonical]!r} and {value!r})"))
    res.values[canonical] = value
    res.explicit.setdefault(canonical, key)


def _resolve(conf: Mapping[str, object], specs: Mapping[str, Spec], client: str, *,
             others: Mapping[str, str], forced: Mapping[str, str], passthrough: bool) -> _Resolved:
    """Split ``conf`` into validated values (defaults filled in) and librdkafka pass-through values.

    ``others`` maps keys of other clients' tables to the client name, for a precise error.
    ``forced`` holds librdkafka settings kipconsumer manages; a user value must equal them.
    """
    if not isinstance(conf, Mapping):
        raise ConfigError(f"config must be a mapping of str to value, got {type(conf).__name__}")
    res = _Resolved(specs, {k: s.default for k, s in specs.items()}, {}, {})
    aliases = _alias_index(specs)
    for key, raw in conf.items():
        if not isinstance(key, str):
            raise ConfigError(f"config keys must be str, got {type(key).__name__} {key!r}")
        _check_no_nul(key, raw)
        canonical = key if key in specs else aliases.get(key)
        if canonical is not None:
            if raw is not None:
                _record(res, key, canonical, raw)
        elif passthrough and key in librdkafka_names():
            if raw is not None:
                res.passthrough[key] = _checked_passthrough(key, raw, forced)
        else:
            raise _unknown(key, client, specs, others, passthrough)
    return res


def _check_no_nul(key: str, raw: object) -> None:
    """A NUL character would end the C string librdkafka receives: the rest would be cut silently
    (another group, server or password than the one given)."""
    if "\x00" in key:
        raise ConfigError(f"config key {key!r} contains a NUL character: not allowed in keys")
    items = raw if isinstance(raw, (list, tuple)) else (raw,)
    if any(isinstance(item, str) and "\x00" in item for item in items):
        shown = "" if is_secret(key) else f" ({raw!r})"
        raise ConfigError(f"config {key!r}: the value contains a NUL character{shown}: allowed text "
                          "without NUL (librdkafka would cut the value there)")


def _checked_passthrough(key: str, raw: object, forced: Mapping[str, str]) -> str:
    """The pass-through string for ``raw``, pre-checked by librdkafka's own ``rd_kafka_conf_set``."""
    value = _passthrough_value(key, raw)
    if key in forced and value.strip().lower() != forced[key]:
        raise ConfigError(f"{_show(key, raw)} is not allowed: kipconsumer manages {key!r} "
                          f"(it must be {forced[key]})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # e.g. a lone surrogate; never show (part of) a secret
        shown = "" if is_secret(key) else f" ({raw!r})"
        raise ConfigError(f"config {key!r}: the value cannot be encoded to UTF-8 ({exc.reason}){shown}: "
                          "librdkafka takes UTF-8 text") from None
    check = _librdkafka_check()
    error = check(key, value) if check is not None else None
    if error is not None:
        detail = "" if is_secret(key) else f": {error}"
        raise ConfigError(f"{_show(key, raw)} is refused by librdkafka{detail}")
    return value


def _others(client: str) -> dict[str, str]:
    tables = {"consumer": CONSUMER_SPECS, "producer": PRODUCER_SPECS, "task executor": TASK_SPECS,
              "pipeline": PIPELINE_SPECS}
    own = tables[client]
    return {k: name for name, table in tables.items() if name != client for k in table if k not in own}


def _emit(res: _Resolved) -> dict[str, str]:
    """librdkafka properties for table keys that the user set or that are always emitted."""
    out: dict[str, str] = {}
    for key, spec in res.specs.items():
        value = res.values[key]
        if spec.rdkafka is None or value is None:
            continue
        if key in res.explicit or spec.emit_default:
            out[spec.rdkafka] = _rdkafka_value(spec, value)
    return out


def _require(res: _Resolved, key: str) -> None:
    if res.values[key] is None:
        raise ConfigError(f"config {key!r} is required: allowed {res.specs[key].allowed()}")


def _check_common(res: _Resolved) -> None:
    """Checks shared by consumer and producer: bootstrap.servers present, backoff bounds ordered."""
    _require(res, "bootstrap.servers")
    backoff, backoff_max = res.get_int("reconnect.backoff.ms"), res.get_int("reconnect.backoff.max.ms")
    if backoff_max < backoff:
        raise ConfigError(f"reconnect.backoff.max.ms={backoff_max} must be >= reconnect.backoff.ms={backoff}")


# --------------------------------------------------------------------------------------------------
# Consumer
# --------------------------------------------------------------------------------------------------

_BROKER_SIDE_WITH_KIP848 = ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy")
#: The group protocol of a consumer whose config sets ``group.id`` and not ``group.protocol``: ``classic``
#: (the documented default, Java's until 5.0). Only :func:`set_implicit_group_protocol` changes it.
_implicit_group_protocol = "classic"
#: librdkafka settings that only the KIP-848 protocol uses
_KIP848_ONLY = ("group.remote.assignor",)


def _check_heartbeat(res: _Resolved) -> None:
    heartbeat, session = res.get_int("heartbeat.interval.ms"), res.get_int("session.timeout.ms")
    if heartbeat >= session:
        raise ConfigError(f"heartbeat.interval.ms={heartbeat} must be lower than "
                          f"session.timeout.ms={session} (typically at most a third of it)")


def _check_fetch_sizes(res: _Resolved) -> None:
    """librdkafka refuses a fetch.max.bytes below message.max.bytes (default 1000000)."""
    fetch_max = res.get_int("fetch.max.bytes")
    raw = res.passthrough.get("message.max.bytes", "1000000")
    message_max = int(raw) if _INT_RE.fullmatch(raw.strip()) else 0
    if fetch_max < message_max:
        raise ConfigError(f"fetch.max.bytes={fetch_max} must be >= message.max.bytes={message_max} "
                          "(librdkafka's limit)")


def _effective_poll_interval(res: _Resolved) -> int:
    """KIP-62 compatibility: the process timeout is max(max.poll.interval.ms, session.timeout.ms)."""
    interval, session = res.get_int("max.poll.interval.ms"), res.get_int("session.timeout.ms")
    if interval >= session:
        return interval
    log.warning("max.poll.interval.ms=%d is lower than session.timeout.ms=%d: using %d as the effective "
                "max.poll.interval.ms (KIP-62 compatibility rule)", interval, session, session)
    return session


def _stall_pause_ms(res: _Resolved, poll_interval: int) -> int:
    """``poll.stall.fetch.pause.ms``: 0, or at most the effective max.poll.interval.ms / 20 (the release
    of librdkafka's queue at the pause counts as a poll for librdkafka: the member leaves at most that
    much later). Not given: STALL_PAUSE_DEFAULT_MS where that bound allows it, else 0."""
    most = min(STALL_PAUSE_MAX_MS, poll_interval // 20)
    if "poll.stall.fetch.pause.ms" not in res.explicit:
        return STALL_PAUSE_DEFAULT_MS if STALL_PAUSE_DEFAULT_MS <= most else 0
    pause_ms = res.get_int("poll.stall.fetch.pause.ms")
    if pause_ms > most:
        raise ConfigError(f"config 'poll.stall.fetch.pause.ms' must be 0 (off) or 1..{most} "
                          f"(at most {STALL_PAUSE_MAX_MS} and max.poll.interval.ms / 20 = "
                          f"{poll_interval} / 20), got {pause_ms}")
    return pause_ms


def _kip848_rdkafka(res: _Resolved, rd: dict[str, str]) -> None:
    """group.protocol=consumer: the broker owns session, heartbeat and assignment settings."""
    for key in _BROKER_SIDE_WITH_KIP848:
        if key in res.explicit:
            raise ConfigError(f"config {res.explicit[key]!r} is not supported with group.protocol=consumer "
                              "(KIP-848): it is defined broker side")
        rd.pop(res.specs[key].rdkafka or key, None)


def _take_oauth_cb(conf: Mapping[str, object]) -> tuple[Mapping[str, object], Callable[[str], Any] | None]:
    """Splits ``oauth_cb`` (an OAUTHBEARER token provider, as in confluent-kafka) off ``conf``."""
    if not isinstance(conf, Mapping) or "oauth_cb" not in conf:
        return conf, None
    return {k: v for k, v in conf.items() if k != "oauth_cb"}, check_oauth_provider(conf["oauth_cb"])


def _take_stats_cb(conf: Mapping[str, object]) -> tuple[Mapping[str, object], Callable[[str], object] | None]:
    """Splits ``stats_cb`` (a callable, as in confluent-kafka; None: unset) off ``conf``."""
    if not isinstance(conf, Mapping) or "stats_cb" not in conf:
        return conf, None
    cb = conf["stats_cb"]
    if cb is not None and not callable(cb):
        raise ConfigError(f"config 'stats_cb' must be a callable taking the statistics JSON (str), called "
                          f"every statistics.interval.ms; got {type(cb).__name__} {cb!r}")
    return {k: v for k, v in conf.items() if k != "stats_cb"}, cb


_DESERIALIZER_KEYS = ("key.deserializer", "value.deserializer")


def _take_deserializers(conf: Mapping[str, object]) -> tuple[Mapping[str, object], dict[str, Any]]:
    """Splits ``key.deserializer`` / ``value.deserializer`` (callables ``bytes -> object``; None: unset)
    off ``conf``. A Java class name (a str) or any other non-callable is a ``ConfigError`` naming the key."""
    if not isinstance(conf, Mapping) or not any(k in conf for k in _DESERIALIZER_KEYS):
        return conf, {}
    found: dict[str, Any] = {}
    for key in _DESERIALIZER_KEYS:
        fn = conf.get(key)
        if fn is not None and not callable(fn):
            raise ConfigError(f"config {key!r} must be a callable taking the record's {key.split('.')[0]} "
                              f"bytes and returning the object (as Java's Deserializer.deserialize); got "
                              f"{type(fn).__name__} {fn!r}")
        found[key] = fn
    return {k: v for k, v in conf.items() if k not in _DESERIALIZER_KEYS}, found


def set_implicit_group_protocol(protocol: str) -> str:
    """Make ``protocol`` (``classic`` or ``consumer``) the group protocol of every consumer created
    afterwards in this process whose config has a ``group.id`` and no ``group.protocol``, as if the
    config said it; returns the previous one. For test sessions (the pytest plugin's
    ``--group-protocol``), not applications: they set ``group.protocol`` in their config."""
    global _implicit_group_protocol
    if protocol not in ("classic", "consumer"):
        raise ConfigError(f"group protocol {protocol!r} is not one of classic|consumer")
    previous, _implicit_group_protocol = _implicit_group_protocol, protocol
    return previous


def group_protocol_of(conf: Mapping[str, object]) -> str:
    """The group protocol ``conf`` selects: its ``group.protocol`` (lower-cased), else with a
    ``group.id`` the implicit one (``classic`` unless :func:`set_implicit_group_protocol` changed it)."""
    given = conf.get("group.protocol")
    if given is not None:
        return str(given).strip().lower()
    return _implicit_group_protocol if conf.get("group.id") else "classic"


def consumer_settings(conf: Mapping[str, object]) -> ConsumerSettings:
    """Validate a consumer config dict and return its settings.

    Raises ``ConfigError`` for unknown keys, bad values, a missing ``bootstrap.servers``,
    ``heartbeat.interval.ms >= session.timeout.ms``, ``fetch.max.bytes < message.max.bytes`` and a
    ``key.deserializer`` / ``value.deserializer`` that is not callable.
    Logs a WARNING on ``kipconsumer.config`` when the KIP-62 compatibility rule raises
    ``max.poll.interval.ms`` to ``session.timeout.ms``.
    """
    conf, stats_cb = _take_stats_cb(conf)
    conf, oauth_cb = _take_oauth_cb(conf)
    conf, deserializers = _take_deserializers(conf)
    res = _resolve(conf, CONSUMER_SPECS, "consumer", others=_others("consumer"), forced=CONSUMER_FORCED,
                   passthrough=True)
    implicit = _implicit_group_protocol
    if implicit == "consumer" and "group.protocol" not in res.explicit and res.values["group.id"]:
        _record(res, "group.protocol", "group.protocol", "consumer")  # as if the config said it
    _check_common(res)
    _check_fetch_sizes(res)
    rd = _emit(res)
    if res.values["group.protocol"] == "consumer":
        _kip848_rdkafka(res, rd)
        poll_interval = res.get_int("max.poll.interval.ms")
    else:
        for key in _KIP848_ONLY:
            if key in res.passthrough:
                raise ConfigError(f"config {key!r} applies to group.protocol=consumer (KIP-848) only; "
                                  "with the classic protocol the client-side assignor is "
                                  "partition.assignment.strategy")
        _check_heartbeat(res)
        poll_interval = _effective_poll_interval(res)
    rd["max.poll.interval.ms"] = str(poll_interval)
    stall_pause_ms = _stall_pause_ms(res, poll_interval)
    if "queued.min.messages" not in res.explicit:
        # The memory bound is queued.max.messages.kbytes; a low message count starves the
        # fetch pipeline of small records (figures: docs/benchmarks.md, appendix).
        rd["queued.min.messages"] = str(max(PREFETCH_POLLS * res.get_int("max.poll.records"), 100_000))
    rd.update(res.passthrough)
    rd.update(CONSUMER_FORCED)
    poll_fairness = res.get_str("poll.fairness")
    assert poll_fairness is not None
    return ConsumerSettings(
        group_id=res.get_str("group.id"),
        max_poll_records=res.get_int("max.poll.records"),
        poll_fairness=poll_fairness,
        poll_prefetch_thread=bool(res.get_bool("poll.prefetch.thread")),
        poll_stall_fetch_pause_ms=stall_pause_ms,
        max_poll_interval_ms=poll_interval,
        session_timeout_ms=res.get_int("session.timeout.ms"),
        heartbeat_interval_ms=res.get_int("heartbeat.interval.ms"),
        enable_auto_commit=res.get_bool("enable.auto.commit"),
        auto_commit_interval_ms=res.get_int("auto.commit.interval.ms"),
        default_api_timeout_ms=res.get_int("default.api.timeout.ms"),
        rdkafka=rd,
        read_committed=rd["isolation.level"] == "read_committed",
        cooperative=("cooperative" in rd.get("partition.assignment.strategy", "").lower()
                     or res.values["group.protocol"] == "consumer"),
        fetch_buffer_max_records=int(rd["queued.min.messages"]),
        fetch_buffer_max_bytes=int(rd["queued.max.messages.kbytes"]) * 1024,
        stats_cb=stats_cb,
        oauth_cb=oauth_cb,
        key_deserializer=deserializers.get("key.deserializer"),
        value_deserializer=deserializers.get("value.deserializer"),
    )


def share_consumer_settings(conf: Mapping[str, object]) -> ShareConsumerSettings:
    """Validate a share consumer config dict (KIP-932) and return its settings.

    Raises ``ConfigError`` naming the key for unknown keys, bad values (``share.acknowledgement.mode``
    must be implicit|explicit), a missing ``bootstrap.servers`` or ``group.id``, a consumer-group key
    that a share group keeps on the broker (saying where), and a non-callable deserializer.
    """
    conf, deserializers = _take_deserializers(conf)
    if isinstance(conf, Mapping):
        for key in conf:
            if key in SHARE_BROKER_SIDE:
                raise ConfigError(f"config {key!r} is not accepted by the share consumer: a share group "
                                  f"sets it in {SHARE_BROKER_SIDE[key]}")
    others = {k: "consumer" for k in CONSUMER_SPECS if k not in SHARE_CONSUMER_SPECS}
    others.update({k: v for k, v in _others("consumer").items() if k not in SHARE_CONSUMER_SPECS})
    res = _resolve(conf, SHARE_CONSUMER_SPECS, "share consumer", others=others,
                   forced={"share.acknowledgement.mode": "explicit"}, passthrough=True)
    _check_common(res)
    _require(res, "group.id")
    rd = _emit(res)
    rd.update(res.passthrough)
    rd["share.acknowledgement.mode"] = "explicit"
    group_id, fairness, mode = (res.get_str("group.id"), res.get_str("poll.fairness"),
                                res.get_str("share.acknowledgement.mode"))
    assert group_id is not None and fairness is not None and mode is not None
    return ShareConsumerSettings(
        group_id=group_id,
        max_poll_records=res.get_int("max.poll.records"),
        poll_fairness=fairness,
        acknowledgement_mode=mode,
        default_api_timeout_ms=res.get_int("default.api.timeout.ms"),
        rdkafka=rd,
        key_deserializer=deserializers.get("key.deserializer"),
        value_deserializer=deserializers.get("value.deserializer"),
    )


# --------------------------------------------------------------------------------------------------
# Producer
# --------------------------------------------------------------------------------------------------


def _effective_delivery_timeout(res: _Resolved) -> int:
    """delivery.timeout.ms, lowered to transaction.timeout.ms for a transactional producer if unset.

    librdkafka refuses a message timeout above the transaction timeout; an explicit one is an error.
    """
    delivery = res.get_int("delivery.timeout.ms")
    if res.values["transactional.id"] is None:
        return delivery
    txn = res.get_int("transaction.timeout.ms")
    if delivery <= txn:
        return delivery
    if "delivery.timeout.ms" in res.explicit:
        raise ConfigError(f"delivery.timeout.ms={delivery} must be <= transaction.timeout.ms={txn} "
                          "when transactional.id is set")
    log.info("transactional producer: delivery.timeout.ms lowered to transaction.timeout.ms=%d", txn)
    return txn


def _check_delivery_timeout(delivery: int, res: _Resolved) -> None:
    """KIP-91: a record must be allowed to linger and get one full request before it expires."""
    linger, request = res.get_int("linger.ms"), res.get_int("request.timeout.ms")
    if delivery < linger + request:
        raise ConfigError(f"delivery.timeout.ms={delivery} must be >= linger.ms={linger} + "
                          f"request.timeout.ms={request} (= {linger + request})")


def _idempotence_conflicts(res: _Resolved) -> list[str]:
    conflicts = []
    if res.values["acks"] not in ("all", "-1"):
        conflicts.append(f"acks={res.values['acks']} (needs all)")
    in_flight = res.get_int("max.in.flight.requests.per.connection")
    if in_flight > IDEMPOTENT_MAX_IN_FLIGHT:
        conflicts.append(f"max.in.flight.requests.per.connection={in_flight} "
                         f"(needs <= {IDEMPOTENT_MAX_IN_FLIGHT})")
    if res.get_int("retries") == 0:
        conflicts.append("retries=0 (needs >= 1)")
    return conflicts


def _effective_idempotence(res: _Resolved) -> bool:
    """Java's rule: an explicit or transactional idempotence must be satisfiable; a default one yields."""
    transactional = res.values["transactional.id"] is not None
    if not res.get_bool("enable.idempotence"):
        if transactional:
            raise ConfigError("transactional.id requires enable.idempotence=true")
        return False
    conflicts = _idempotence_conflicts(res)
    if not conflicts:
        return True
    if "enable.idempotence" in res.explicit or transactional:
        why = "transactional.id" if transactional else "enable.idempotence=true"
        raise ConfigError(f"{why} requires idempotence, which conflicts with: {', '.join(conflicts)}")
    log.info("idempotence disabled because of %s", ", ".join(conflicts))
    return False


def producer_settings(conf: Mapping[str, object]) -> ProducerSettings:
    """Validate a producer config dict and return its settings.

    Raises ``ConfigError`` for unknown keys, bad values, a missing ``bootstrap.servers``,
    ``delivery.timeout.ms < linger.ms + request.timeout.ms`` (KIP-19/KIP-91), an explicit
    ``delivery.timeout.ms`` above ``transaction.timeout.ms`` with ``transactional.id``, and unsatisfiable
    idempotence (explicit ``enable.idempotence=true`` or ``transactional.id`` with ``acks`` != all,
    more than 5 in-flight requests or ``retries=0``).
    """
    conf, stats_cb = _take_stats_cb(conf)
    conf, oauth_cb = _take_oauth_cb(conf)
    res = _resolve(conf, PRODUCER_SPECS, "producer", others=_others("producer"), forced=PRODUCER_FORCED,
                   passthrough=True)
    _check_common(res)
    delivery = _effective_delivery_timeout(res)
    _check_delivery_timeout(delivery, res)
    rd = _emit(res)
    rd["message.timeout.ms"] = str(delivery)
    rd["enable.idempotence"] = "true" if _effective_idempotence(res) else "false"
    rd.update(res.passthrough)
    rd.update(PRODUCER_FORCED)
    return ProducerSettings(
        max_block_ms=res.get_int("max.block.ms"),
        request_timeout_ms=res.get_int("request.timeout.ms"),
        delivery_timeout_ms=delivery,
        linger_ms=res.get_int("linger.ms"),
        buffer_memory=res.get_int("buffer.memory"),
        rdkafka=rd,
        stats_cb=stats_cb,
        oauth_cb=oauth_cb,
    )


# --------------------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------------------


def task_settings(conf: Mapping[str, object]) -> TaskSettings:
    """Validate a task executor config dict (KIP-572).

    ``retries`` is accepted and ignored, with a deprecation WARNING on ``kipconsumer.config``:
    ``task.timeout.ms`` bounds how long a task may keep failing instead.
    """
    res = _resolve(conf, TASK_SPECS, "task executor", others=_others("task executor"), forced={},
                   passthrough=False)
    if "retries" in res.explicit:
        log.warning("config 'retries' is deprecated and ignored (KIP-572): use task.timeout.ms to bound how "
                    "long a task may keep failing")
    return TaskSettings(task_timeout_ms=res.get_int("task.timeout.ms"),
                        retry_backoff_ms=res.get_int("retry.backoff.ms"))


# --------------------------------------------------------------------------------------------------
# Pipeline
# --------------------------------------------------------------------------------------------------


def pipeline_settings(conf: Mapping[str, object]) -> PipelineSettings:
    """Validate the pipeline's own keys (``processing.guarantee``, ``commit.interval.ms``)."""
    res = _resolve(conf, PIPELINE_SPECS, "pipeline", others=_others("pipeline"), forced={}, passthrough=False)
    guarantee = res.get_str("processing.guarantee")
    assert guarantee is not None
    interval = res.values["commit.interval.ms"]
    commit_ms = COMMIT_INTERVAL_MS_DEFAULT[guarantee] if interval is None else \
        res.get_int("commit.interval.ms")
    return PipelineSettings(processing_guarantee=guarantee, commit_interval_ms=commit_ms)


def _is_false(raw: object) -> bool:
    return str(raw).strip().lower() in ("false", "0")


def check_at_least_once_producer(producer: Mapping[str, object]) -> None:
    """Raises ``ConfigError`` for a producer setting an ``at_least_once`` pipeline cannot honour: a
    ``transactional.id`` (that pipeline never begins a transaction, so every send of a transactional
    producer would fail)."""
    if producer.get("transactional.id") is not None:
        raise ConfigError("config transactional.id is not allowed with processing.guarantee=at_least_once: "
                          "a transactional.id needs processing.guarantee=exactly_once_v2 (remove it, or "
                          "set processing.guarantee=exactly_once_v2)")


def exactly_once_configs(consumer: Mapping[str, object], producer: Mapping[str, object],
                         default_transactional_id: str) -> tuple[dict[str, object], dict[str, object]]:
    """The client configs of an ``exactly_once_v2`` pipeline: the consumer reads committed records
    only (``isolation.level=read_committed``) and the producer is transactional (its
    ``transactional.id`` defaults to ``default_transactional_id``). Raises ``ConfigError`` for a
    setting that would break the guarantee: ``isolation.level=read_uncommitted`` or
    ``enable.idempotence=false``."""
    c, p = dict(consumer), dict(producer)
    level = c.get("isolation.level")
    if level is not None and str(level).strip().lower() != "read_committed":
        raise ConfigError(f"config isolation.level={level!r} is not allowed with "
                          "processing.guarantee=exactly_once_v2: allowed read_committed (the pipeline must "
                          "not process records of aborted transactions)")
    c["isolation.level"] = "read_committed"
    idem = p.get("enable.idempotence")
    if idem is not None and _is_false(idem):
        raise ConfigError(f"config enable.idempotence={idem!r} is not allowed with "
                          "processing.guarantee=exactly_once_v2: allowed true (transactions need it)")
    if not p.get("transactional.id"):
        p["transactional.id"] = default_transactional_id
    return c, p


__all__ = [
    "ConsumerSettings",
    "ProducerSettings",
    "TaskSettings",
    "PipelineSettings",
    "Spec",
    "Kind",
    "CONSUMER_SPECS",
    "PRODUCER_SPECS",
    "TASK_SPECS",
    "PIPELINE_SPECS",
    "consumer_settings",
    "producer_settings",
    "task_settings",
    "pipeline_settings",
    "exactly_once_configs",
    "check_at_least_once_producer",
    "JAVA_DEFAULT_DIFFERENCES",
    "redact",
    "is_secret",
    "librdkafka_names",
    "PipelineConfig",
    "split_config",
]


# --------------------------------------------------------------------------------------------------
# Pipeline config (kipconsumer.streams.Pipeline): one dict, split per client and validated here
# --------------------------------------------------------------------------------------------------

#: the pipeline's own warnings (the max.block.ms cap) keep the pipeline's logger
_pipeline_log = logging.getLogger("kipconsumer.streams")
_DEFAULT_MAX_BLOCK_MS = 60_000

#: Keys only the pipeline uses (validated by config.pipeline_settings).
PIPELINE_KEYS = frozenset(PIPELINE_SPECS)
EXACTLY_ONCE = "exactly_once_v2"


def _names(specs: Mapping[str, Any]) -> set[str]:
    out = set(specs)
    for spec in specs.values():
        out.update(spec.aliases)
    return out


_CONSUMER_KEYS = _names(CONSUMER_SPECS)
_PRODUCER_KEYS = _names(PRODUCER_SPECS)
_TASK_KEYS = set(TASK_SPECS)


@dataclass(frozen=True)
class PipelineConfig:
    """A pipeline config split per client (the routing rules: kipconsumer.streams' module docstring)."""

    consumer: dict[str, object]
    producer: dict[str, object]
    task: dict[str, object]
    commit_interval_ms: int
    max_poll_interval_ms: int
    processing_guarantee: str = "at_least_once"
    #: the producer's transaction.timeout.ms (exactly_once_v2 bounds its transactions by it)
    transaction_timeout_ms: int = PRODUCER_SPECS["transaction.timeout.ms"].default  # type: ignore[assignment]


def split_config(config: Mapping[str, object]) -> PipelineConfig:
    """Splits and validates a pipeline config; raises ``ConfigError`` (kipconsumer.streams' module
    docstring has the rules)."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"config must be a mapping of str to value, got {type(config).__name__}")
    consumer: dict[str, object] = {}
    producer: dict[str, object] = {}
    task: dict[str, object] = {}
    pipeline: dict[str, object] = {}
    rdkafka = librdkafka_names()
    for key, value in config.items():
        if not isinstance(key, str):
            raise ConfigError(f"config keys must be str, got {type(key).__name__} {key!r}")
        if key.startswith("consumer."):
            consumer[key[len("consumer."):]] = value
        elif key.startswith("producer."):
            producer[key[len("producer."):]] = value
        elif key in PIPELINE_KEYS:
            pipeline[key] = value
        elif key == "retries":
            task[key] = value  # KIP-572: deprecated, ignored; the producer's is producer.retries
        else:
            routed = False
            if key in _TASK_KEYS:
                task[key] = value
                routed = True
            if key in _CONSUMER_KEYS:
                consumer[key] = value
                routed = True
            if key in _PRODUCER_KEYS:
                producer[key] = value
                routed = True
            if not routed and key in rdkafka:
                consumer[key] = value
                producer[key] = value
                routed = True
            if not routed:
                known = [*PIPELINE_KEYS, *_TASK_KEYS, *_CONSUMER_KEYS, *_PRODUCER_KEYS, *rdkafka]
                raise ConfigError(f"unknown pipeline config {key!r}{suggest(key, known)} (use "
                                  "consumer.<key> or producer.<key> for one client only)")
    if not consumer.get("group.id"):
        raise ConfigError("pipeline config 'group.id' is required (the pipeline consumes with a group)")
    auto = consumer.get("enable.auto.commit", consumer.get("auto.commit.enable"))
    if auto is not None and str(auto).strip().lower() not in ("false", "0"):
        raise ConfigError(f"config enable.auto.commit={auto!r} is not allowed: the pipeline commits an "
                          "offset only once the outputs of the records before it are acknowledged "
                          "(must be false)")
    consumer["enable.auto.commit"] = False
    consumer.pop("auto.commit.enable", None)
    consumer.setdefault("auto.offset.reset", "earliest")
    psettings = pipeline_settings(pipeline)
    if psettings.processing_guarantee == EXACTLY_ONCE:
        consumer, producer = exactly_once_configs(consumer, producer,
                                                  f"{consumer['group.id']}-{uuid.uuid4().hex[:12]}")
    else:
        check_at_least_once_producer(producer)
    if group_protocol_of(consumer) != "consumer":
        # Incremental rebalances: only the moved partitions are revoked, after the new assignment is
        # agreed, so their commit in on_partitions_revoked is accepted (and the others keep flowing).
        # (KIP-848 has no client-side assignor: the broker's reconciliation is incremental.)
        consumer.setdefault("partition.assignment.strategy", "cooperative-sticky")
    csettings = consumer_settings(consumer)
    half_mpi = csettings.max_poll_interval_ms // 2
    if producer.get("max.block.ms") is None:
        producer["max.block.ms"] = min(_DEFAULT_MAX_BLOCK_MS, half_mpi)
    elif producer_settings(producer).max_block_ms > half_mpi:
        _pipeline_log.warning("producer max.block.ms=%s is capped to %d, half of max.poll.interval.ms "
                              "(KIP-572)", producer["max.block.ms"], half_mpi)
        producer["max.block.ms"] = half_mpi
    txn_ms = int(producer_settings(producer).rdkafka.get("transaction.timeout.ms")
                 or PRODUCER_SPECS["transaction.timeout.ms"].default)  # type: ignore[arg-type]
    if psettings.processing_guarantee == EXACTLY_ONCE:
        if psettings.commit_interval_ms > txn_ms:
            raise ConfigError(f"config commit.interval.ms={psettings.commit_interval_ms} must not exceed "
                              f"transaction.timeout.ms={txn_ms} with processing.guarantee=exactly_once_v2: "
                              "the broker aborts a transaction open longer than that (Kafka Streams' rule)")
    task_settings({k: v for k, v in task.items() if k != "retries"})
    return PipelineConfig(consumer, producer, task, psettings.commit_interval_ms,
                          csettings.max_poll_interval_ms, psettings.processing_guarantee, txn_ms)
