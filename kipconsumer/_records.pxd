from libc.stdint cimport int16_t
from posix.types cimport pid_t

from kipconsumer._rdk cimport rd_kafka_message_t


cdef class ConsumerRecords:
    cdef rd_kafka_message_t **msgs
    cdef Py_ssize_t n
    cdef list _groups        # [(TopicPartition, start, end)] in batch order; None until built
    cdef dict _index         # TopicPartition -> (start, end); None until built
    cdef list _topics        # topic str per group, parallel to _groups; None until built
    cdef Py_ssize_t *_group_of  # group index of each record; NULL until built
    cdef object _owner       # keeps the librdkafka handle alive while messages are held
    cdef object _key_deser   # the consumer's key.deserializer (bytes -> object), or None
    cdef object _value_deser # the consumer's value.deserializer, or None
    cdef bint _borrowed      # the messages belong to _owner (a share batch): never destroyed here
    cdef int16_t *_dcount    # delivery count per record (share consumer); NULL otherwise
    cdef pid_t _pid          # the process the messages belong to: elsewhere they are leaked

    cdef object _topic_of(self, Py_ssize_t i)
    cdef _build_groups(self)


cdef ConsumerRecords records_take(rd_kafka_message_t **msgs, Py_ssize_t n, object owner, pid_t pid)
cdef ConsumerRecords records_borrow(rd_kafka_message_t **msgs, int16_t *dcount, Py_ssize_t n,
                                    object owner)
cdef void records_set_deserializers(ConsumerRecords batch, object key_deser, object value_deser)
