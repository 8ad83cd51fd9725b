# AssignmentChanges: the owner thread's changes of librdkafka's assignment, and when another thread
# (metrics()) may look partitions up in librdkafka meanwhile (included by _consumer.pyx; fields in
# _consumer.pxd). Why: docs/reliability.md, "Metrics exporters" (issue #36).


cdef class AssignmentChanges:
    """Marks each change of librdkafka's assignment the owner thread makes (an *assign() call: a
    rebalance answered, assign(), a seek's fetch restart; unsubscribe()): `seq` goes up by one when
    it starts and by one when it ends, so it is odd while one runs. librdkafka serves the change on
    its main thread while the caller waits (with or without the GIL). The owner calls begin() right
    before such a call and end() right after it, holding the GIL for both."""

    cdef void begin(self) noexcept:
        self.seq += 1

    cdef void end(self) noexcept:
        self.seq += 1


cdef inline bint _may_look_up(NativeConsumer c, unsigned long mark) noexcept:
    """True while a thread other than the owner may call librdkafka's partition lookups
    (rd_kafka_position(), rd_kafka_get_watermark_offsets()) for partitions it copied from the fetch
    buffer when AssignmentChanges.seq was `mark`: close() has not begun, and no change of the
    assignment ran then or started since. Such a lookup of a partition librdkafka no longer holds
    makes it a desired partition again, racing librdkafka's own removal of it (librdkafka 2.16 then
    aborts the process in rd_kafka_destroy()); of a partition it holds, it changes nothing. Call it
    right before the lookup, with no Python code in between: Python code may let the owner run."""
    return c._close.is_open() and c._assignment.none_since(mark)
