# cython: language_level=3, boundscheck=False, wraparound=False
"""ConsumerRecords: one poll()'s batch, held natively; Python objects are built lazily.

The batch owns the librdkafka messages (zero copy) until it is garbage collected.
Iterating builds one small ConsumerRecord per record; its key/value bytes are created
on attribute access. ``to_arrow()`` builds Arrow arrays in C.
"""

cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int16_t, int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy
from posix.types cimport pid_t

from kipconsumer._arrow cimport (ArrowArray, ArrowSchema, KC_ARROW_WITH_TIMESTAMP_TYPE, kc_arrow_build,
                                 kc_arrow_build_headers)
from kipconsumer._process cimport foreign_process
from kipconsumer._rdk cimport (rd_kafka_header_cnt, rd_kafka_header_get_all, rd_kafka_headers_t,
                               rd_kafka_message_destroy, rd_kafka_message_headers,
                               rd_kafka_message_t, rd_kafka_message_timestamp,
                               rd_kafka_resp_err_t, rd_kafka_timestamp_type_t,
                               rd_kafka_topic_name, rd_kafka_topic_t, RD_KAFKA_RESP_ERR_NO_ERROR)


cdef extern from "msg_prefetch.h" nogil:
    void kc_prefetch_msg(const rd_kafka_message_t *m)
    void kc_prefetch_value(const rd_kafka_message_t *m)

from kipconsumer.errors import RecordDeserializationError
from kipconsumer.structs import TopicPartition


_pyarrow_module = None
# pyarrow.Schema of to_arrow()'s batches per kc_arrow_build flags: imported from C once, then reused,
# so a batch imports only its array (the schema import is a fixed cost per call).
_arrow_schemas = {}


cdef object _pyarrow():
    """pyarrow, imported once (optional dependency)."""
    global _pyarrow_module
    if _pyarrow_module is None:
        try:
            import pyarrow
        except ImportError as exc:
            raise ImportError("to_arrow() needs pyarrow: pip install pyarrow") from exc
        _pyarrow_module = pyarrow
    return _pyarrow_module


@cython.freelist(512)
@cython.final
cdef class ConsumerRecord:
    """One record of a poll() batch: topic, partition, offset, key, value, timestamp, headers.

    Valid as long as you hold it (it keeps its batch alive). ``key``/``value`` are
    ``bytes`` or ``None`` (with the consumer's ``key.deserializer`` / ``value.deserializer``:
    what those return, computed on first access); ``timestamp`` is milliseconds since the
    epoch (-1 if the broker gave none); ``headers`` is a list of ``(str, bytes | None)``.
    """

    cdef ConsumerRecords _batch
    cdef rd_kafka_message_t *_m
    cdef Py_ssize_t _i
    cdef object _key_obj      # the deserialized key, once read (_have & 1)
    cdef object _value_obj    # the deserialized value, once read (_have & 2)
    cdef unsigned char _have

    def __init__(self) -> None:
        raise TypeError("ConsumerRecord objects come from KafkaConsumer.poll()")

    cdef object _deserialize(self, object fn, object raw, str origin):
        try:
            return fn(raw)
        except Exception as e:
            topic = self.topic
            raise RecordDeserializationError(
                f"{origin}.deserializer failed on the {origin} of record {topic}-{self._m.partition} at offset "
                f"{self._m.offset} ({len(raw)} bytes): {e!r}", topic=topic, partition=self._m.partition,
                offset=self._m.offset, origin=origin) from e

    cdef object _raw_key(self):
        if self._m.key == NULL:
            return None
        return PyBytes_FromStringAndSize(<char *>self._m.key, self._m.key_len)

    cdef object _raw_value(self):
        if self._m.payload == NULL:
            return None
        return PyBytes_FromStringAndSize(<char *>self._m.payload, self._m.len)

    @property
    def topic(self) -> str:
        return self._batch._topic_of(self._i)

    @property
    def partition(self) -> int:
        return self._m.partition

    @property
    def offset(self) -> int:
        return self._m.offset

    @property
    def key(self):
        """The key: ``bytes`` or ``None``; with a ``key.deserializer``, what it returned for the bytes
        (called once per record, on first access; ``None`` stays ``None``). A deserializer's exception
        is raised as ``RecordDeserializationError`` naming the record."""
        if self._m.key == NULL:
            return None
        fn = self._batch._key_deser
        if fn is None:
            return PyBytes_FromStringAndSize(<char *>self._m.key, self._m.key_len)
        if not self._have & 1:
            self._key_obj = self._deserialize(fn, self._raw_key(), "key")
            self._have |= 1
        return self._key_obj

    @property
    def value(self):
        """The value: ``bytes`` or ``None``; with a ``value.deserializer``, as for ``key``."""
        if self._m.payload == NULL:
            return None
        fn = self._batch._value_deser
        if fn is None:
            return PyBytes_FromStringAndSize(<char *>self._m.payload, self._m.len)
        if not self._have & 2:
            self._value_obj = self._deserialize(fn, self._raw_value(), "value")
            self._have |= 2
        return self._value_obj

    @property
    def timestamp(self) -> int:
        cdef rd_kafka_timestamp_type_t t
        return rd_kafka_message_timestamp(self._m, &t)

    @property
    def timestamp_type(self) -> int:
        """0: not available, 1: create time, 2: log-append time."""
        cdef rd_kafka_timestamp_type_t t
        rd_kafka_message_timestamp(self._m, &t)
        return <int>t

    @property
    def headers(self) -> list:
        cdef rd_kafka_headers_t *hdrs = NULL
        cdef const char *name
        cdef const void *val
        cdef size_t size, i
        out = []
        if rd_kafka_message_headers(self._m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR or hdrs == NULL:
            return out
        for i in range(rd_kafka_header_cnt(hdrs)):
            if rd_kafka_header_get_all(hdrs, i, &name, &val, &size) != RD_KAFKA_RESP_ERR_NO_ERROR:
                break
            out.append((name.decode("utf-8", "replace"),
                        None if val == NULL else PyBytes_FromStringAndSize(<char *>val, size)))
        return out

    @property
    def serialized_key_size(self) -> int:
        return -1 if self._m.key == NULL else <Py_ssize_t>self._m.key_len

    @property
    def serialized_value_size(self) -> int:
        return -1 if self._m.payload == NULL else <Py_ssize_t>self._m.len

    @property
    def delivery_count(self):
        """How many times the share group has delivered this record, this delivery included (1 on
        the first); ``None`` for a record of a ``KafkaConsumer`` (KIP-932's delivery count)."""
        if self._batch._dcount == NULL:
            return None
        return self._batch._dcount[self._i]

    def topic_partition(self):
        return TopicPartition(self.topic, self._m.partition)

    def __repr__(self) -> str:
        return (f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, "
                f"offset={self.offset}, timestamp={self.timestamp}, key={self._raw_key()!r}, "
                f"value_size={self.serialized_value_size})")

    def __reduce__(self):
        """Pickles (and copies) as plain data: a kipconsumer.structs.ConsumerRecordData with the same
        attributes (delivery_count included), holding no librdkafka memory."""
        from kipconsumer.structs import ConsumerRecordData
        return (ConsumerRecordData, (self.topic, self.partition, self.offset, self.key, self.value,
                                     self.timestamp, self.timestamp_type, self.headers,
                                     self.serialized_key_size, self.serialized_value_size,
                                     self.delivery_count))


cdef inline ConsumerRecord _make_record(ConsumerRecords batch, Py_ssize_t i):
    cdef ConsumerRecord r = ConsumerRecord.__new__(ConsumerRecord)
    r._batch = batch
    r._m = batch.msgs[i]
    r._i = i
    return r


# How many records ahead the iterator prefetches a message (and half as far its value): a step of
# the application's loop is ~100 ns or more, so 8 steps cover a miss to memory.
cdef enum:
    _PREFETCH_AHEAD = 8


@cython.final
cdef class _RecordIterator:
    cdef ConsumerRecords _batch
    cdef Py_ssize_t _i, _end

    def __iter__(self):
        return self

    def __next__(self):
        cdef Py_ssize_t i = self._i
        if i >= self._end:
            raise StopIteration
        cdef rd_kafka_message_t **msgs = self._batch.msgs
        if i + _PREFETCH_AHEAD < self._end:
            kc_prefetch_msg(msgs[i + _PREFETCH_AHEAD])
        if i + _PREFETCH_AHEAD // 2 < self._end:
            kc_prefetch_value(msgs[i + _PREFETCH_AHEAD // 2])
        r = _make_record(self._batch, i)
        self._i = i + 1
        return r


# no_gc_clear: a batch caught in a reference cycle (e.g. a record in a stored exception's traceback)
# must keep _owner until __dealloc__ has destroyed its messages; if the cycle collector cleared _owner
# first, the handle's rd_kafka_destroy() would wait forever for this batch's messages.
@cython.no_gc_clear
cdef class ConsumerRecords:
    """The records one ``poll()`` returned, grouped by partition, each partition in
    offset order. ``len(records) <= max.poll.records``.

    ``partitions()`` lists the partitions present; ``records(tp)`` their records;
    ``count()`` / ``len()`` the total; iteration yields every record; ``to_arrow()``
    returns a ``pyarrow.RecordBatch`` with columns topic, partition, offset, timestamp,
    key, value.
    """

    def __init__(self) -> None:
        raise TypeError("ConsumerRecords objects come from KafkaConsumer.poll()")

    def __reduce__(self):
        raise TypeError("ConsumerRecords cannot be pickled or copied: it holds librdkafka's messages "
                        "(zero copy). Pickle list(records) (each ConsumerRecord pickles as plain data) "
                        "or records.to_arrow() instead")

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.msgs != NULL:
            # in a child made by fork() the messages are the parent's librdkafka's: leaked (_process.pxd)
            if not self._borrowed and not foreign_process(self._pid):
                with nogil:  # librdkafka's locks: never with the GIL held (see _consumer._destroy)
                    for i in range(self.n):
                        rd_kafka_message_destroy(self.msgs[i])
            free(self.msgs)
            self.msgs = NULL
        if self._dcount != NULL:
            free(self._dcount)
            self._dcount = NULL
        if self._group_of != NULL:
            free(self._group_of)
            self._group_of = NULL

    cdef object _topic_of(self, Py_ssize_t i):
        if self._groups is None:
            self._build_groups()
        return self._topics[self._group_of[i]]

    cdef _build_groups(self):
        """Builds _group_of, _groups, _index and _topics from the messages (records of one
        partition are contiguous, see records_take). Built aside and published together, with no
        Python code in between: the build runs Python code (TopicPartition), where another thread
        holding this batch may read it, and it must find the groups unbuilt (and build its own) or
        complete, never half-built. The GIL is what makes the publication atomic
        (docs/free_threading.md)."""
        cdef Py_ssize_t i, start = 0, g = 0
        cdef Py_ssize_t *group_of = NULL
        groups, index, topics = [], {}, []
        if self.n == 0:  # no message to read: the loop below would read msgs[0]
            if self._groups is None:
                self._groups, self._index, self._topics = groups, index, topics
            return
        group_of = <Py_ssize_t *>malloc(self.n * sizeof(Py_ssize_t))
        if group_of == NULL:
            raise MemoryError()
        try:
            for i in range(self.n + 1):
                if i == self.n or (i > start and (self.msgs[i].rkt != self.msgs[start].rkt or
                                                   self.msgs[i].partition != self.msgs[start].partition)):
                    topic = rd_kafka_topic_name(self.msgs[start].rkt).decode("utf-8", "replace")
                    tp = TopicPartition(topic, self.msgs[start].partition)
                    topics.append(topic)
                    groups.append((tp, start, i))
                    index[tp] = (start, i)
                    start = i
                    g += 1
                if i < self.n:
                    group_of[i] = g
        except BaseException:
            free(group_of)
            raise
        if self._groups is not None:  # another thread published its groups meanwhile
            free(group_of)
            return
        self._group_of = group_of
        self._groups = groups
        self._index = index
        self._topics = topics

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return self.n > 0

    def count(self) -> int:
        """Number of records in the batch."""
        return self.n

    def is_empty(self) -> bool:
        return self.n == 0

    def __iter__(self):
        cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
        it._batch = self
        it._i = 0
        it._end = self.n
        cdef Py_ssize_t i
        for i in range(min(self.n, _PREFETCH_AHEAD)):
            kc_prefetch_msg(self.msgs[i])
        for i in range(min(self.n, _PREFETCH_AHEAD // 2)):
            kc_prefetch_value(self.msgs[i])
        return it

    def __getitem__(self, Py_ssize_t i):
        if i < 0:
            i += self.n
        if i < 0 or i >= self.n:
            raise IndexError("ConsumerRecords index out of range")
        return _make_record(self, i)

    def partitions(self) -> list:
        """The partitions that have records in this batch, in batch order."""
        if self._groups is None:
            self._build_groups()
        return [g[0] for g in self._groups]

    def records(self, tp) -> list:
        """The records of partition ``tp`` (a TopicPartition) in offset order; [] if none."""
        cdef Py_ssize_t i
        if self._index is None:
            self._build_groups()
        span = self._index.get(tp)
        if span is None:
            return []
        return [_make_record(self, i) for i in range(span[0], span[1])]

    def last_offsets(self) -> dict:
        """TopicPartition -> offset of the last record of that partition in this batch."""
        if self._groups is None:
            self._build_groups()
        return {g[0]: self.msgs[g[2] - 1].offset for g in self._groups}

    def to_arrow(self, *, timestamp_type: bool = False, headers: bool = False):
        """A ``pyarrow.RecordBatch`` of this batch, built in C.

        Columns: topic (utf8), partition (int32), offset (int64), timestamp
        (timestamp[ms], null if unknown), key (binary), value (binary); with
        ``timestamp_type=True`` also timestamp_type (int32); with ``headers=True``
        headers (list<struct<key: utf8, value: binary>>, null for a record without
        headers); last, for a share consumer's records (KafkaShareConsumer), delivery_count
        (int16). Requires pyarrow.
        """
        if self._dcount != NULL:
            return self._with_delivery_count(self._arrow(timestamp_type, headers))
        return self._arrow(timestamp_type, headers)

    def _with_delivery_count(self, rb):
        """``rb`` with the delivery_count column appended (one copy of the int16 array, no Python
        object per record)."""
        pa = _pyarrow()
        col = pa.Array.from_buffers(pa.int16(), self.n, [None, pa.py_buffer(
            PyBytes_FromStringAndSize(<char *>self._dcount, self.n * sizeof(int16_t)))])
        return pa.RecordBatch.from_arrays(rb.columns + [col],
                                          schema=rb.schema.append(pa.field("delivery_count", pa.int16())))

    def _arrow(self, bint timestamp_type, bint headers):
        """to_arrow() without the delivery_count column."""
        if headers:
            rb = self._arrow(timestamp_type, False)
            col = self._headers_arrow()
            return _pyarrow().RecordBatch.from_arrays(
                rb.columns + [col], schema=rb.schema.append(_pyarrow().field("headers", col.type)))
        pyarrow = _pyarrow()
        cdef ArrowSchema *schema = <ArrowSchema *>malloc(sizeof(ArrowSchema))
        cdef ArrowArray *array = <ArrowArray *>malloc(sizeof(ArrowArray))
        cdef char err[256]
        cdef int rc
        cdef int flags = KC_ARROW_WITH_TIMESTAMP_TYPE if timestamp_type else 0
        if schema == NULL or array == NULL:
            free(schema)
            free(array)
            raise MemoryError()
        err[0] = 0
        with nogil:
            rc = kc_arrow_build(self.msgs, <size_t>self.n, flags, schema, array, err, sizeof(err))
        if rc != 0:
            free(schema)
            free(array)
            raise MemoryError(err.decode("utf-8", "replace"))
        try:
            cached = _arrow_schemas.get(flags)
            if cached is None:
                cached = pyarrow.Schema._import_from_c(<Py_ssize_t>schema)  # releases the C schema
                _arrow_schemas[flags] = cached
            else:
                schema.release(schema)
            return pyarrow.RecordBatch._import_from_c(<Py_ssize_t>array, cached)
        finally:
            if array.release != NULL:  # the import failed before taking the array
                array.release(array)
            free(schema)
            free(array)

    def _headers_arrow(self):
        """The headers column (csrc/arrow_headers.c) as a ``pyarrow.ListArray``. Built with the
        GIL held: librdkafka parses a message's headers lazily, unsynchronised with ``headers``."""
        pyarrow = _pyarrow()
        cdef ArrowSchema *schema = <ArrowSchema *>malloc(sizeof(ArrowSchema))
        cdef ArrowArray *array = <ArrowArray *>malloc(sizeof(ArrowArray))
        cdef char err[256]
        if schema == NULL or array == NULL:
            free(schema)
            free(array)
            raise MemoryError()
        err[0] = 0
        if kc_arrow_build_headers(self.msgs, <size_t>self.n, schema, array, err, sizeof(err)) != 0:
            free(schema)
            free(array)
            raise MemoryError(err.decode("utf-8", "replace"))
        try:
            return pyarrow.Array._import_from_c(<Py_ssize_t>array, <Py_ssize_t>schema)
        finally:
            free(schema)
            free(array)

    def __repr__(self) -> str:
        if self._groups is None:
            self._build_groups()
        return f"ConsumerRecords(count={self.n}, partitions={len(self._groups)})"


cdef ConsumerRecords records_take(rd_kafka_message_t **msgs, Py_ssize_t n, object owner, pid_t pid):
    """Takes ownership of n messages (the array itself is copied). `owner` is the object
    that destroys the librdkafka handle when freed: librdkafka's destroy waits for every
    message to be released, so a batch that outlives close() must keep the handle alive
    (messages are destroyed in __dealloc__, before the owner reference is dropped). `pid`: the
    process the handle belongs to (in any other, the messages are leaked: _process.pxd).
    Reads none of the messages: the partition groups (TopicPartition keys, topic names, the
    group of each record) are built on first use (_build_groups), which a loop that only
    iterates values or calls to_arrow() never needs, and the messages are first read where
    their fields are used."""
    cdef ConsumerRecords b = ConsumerRecords.__new__(ConsumerRecords)
    b._owner = owner
    b._pid = pid
    cdef Py_ssize_t i
    b.n = 0
    if n == 0:
        return b
    b.msgs = <rd_kafka_message_t **>malloc(n * sizeof(rd_kafka_message_t *))
    if b.msgs == NULL:
        for i in range(n):
            rd_kafka_message_destroy(msgs[i])
        raise MemoryError()
    memcpy(b.msgs, msgs, n * sizeof(rd_kafka_message_t *))
    b.n = n
    return b


cdef ConsumerRecords records_borrow(rd_kafka_message_t **msgs, int16_t *dcount, Py_ssize_t n,
                                    object owner):
    """A batch of n messages that stay `owner`'s (a share consumer's rd_kafka_messages_t holder,
    which destroys them all at once): the array is copied, the messages are never destroyed here.
    `dcount` (n delivery counts) is copied too."""
    cdef ConsumerRecords b = ConsumerRecords.__new__(ConsumerRecords)
    b._owner = owner
    b._borrowed = True
    b.n = 0
    b._dcount = <int16_t *>malloc((n if n > 0 else 1) * sizeof(int16_t))  # also empty: to_arrow's schema
    if b._dcount == NULL:
        raise MemoryError()
    if n == 0:
        return b
    b.msgs = <rd_kafka_message_t **>malloc(n * sizeof(rd_kafka_message_t *))
    if b.msgs == NULL:
        raise MemoryError()
    memcpy(b.msgs, msgs, n * sizeof(rd_kafka_message_t *))
    memcpy(b._dcount, dcount, n * sizeof(int16_t))
    b.n = n
    return b


cdef void records_set_deserializers(ConsumerRecords batch, object key_deser, object value_deser):
    """Makes the records' ``key`` / ``value`` go through the consumer's deserializers (read lazily,
    per record); ``to_arrow()`` keeps the raw bytes."""
    batch._key_deser = key_deser
    batch._value_deser = value_deser
