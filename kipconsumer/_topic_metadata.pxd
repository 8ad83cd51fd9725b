# cython: language_level=3
"""Declarations of csrc/topic_metadata.h: one topic's partition ids, for any client handle."""

from libc.stdint cimport int32_t

from kipconsumer._rdk cimport rd_kafka_resp_err_t, rd_kafka_t, rd_kafka_topic_t


cdef extern from "topic_metadata.h" nogil:
    rd_kafka_resp_err_t kc_topic_partition_ids(rd_kafka_t *rk, rd_kafka_topic_t *rkt, int timeout_ms,
                                               int *cntp, int32_t **idsp)
