# Declarations of the fetch buffer (csrc/fetch_buffer.h: the KIP-41 queue per partition and its fair
# drain), shared by the consumer core (_core.pxd) and the share consumer (_share.pyx).
from libc.stdint cimport int32_t, int64_t

from kipconsumer._rdk cimport rd_kafka_message_t, rd_kafka_queue_t


cdef extern from "record_filters.h" nogil:
    ctypedef struct kc_partition_filters_t:
        int64_t floor
        int64_t seek_target
        int64_t sought


cdef extern from "fetch_buffer.h" nogil:
    ctypedef enum kc_fairness_t:
        KC_FAIRNESS_PROPORTIONAL
        KC_FAIRNESS_GREEDY
    int64_t KC_POSITION_UNKNOWN
    ctypedef struct kc_partition_t:
        char *topic
        int32_t partition
        size_t len
        size_t bytes
        int paused
        int64_t position
        int64_t stored
        rd_kafka_queue_t *queue
        int fetch_stopped
        int64_t stopped_offset
        int refetch_forward
        kc_partition_filters_t filters
    ctypedef struct kc_fetch_buffer_t:
        kc_partition_t **parts
        size_t n
        size_t records
        size_t bytes
    void kc_fb_init(kc_fetch_buffer_t *fb)
    void kc_fb_destroy(kc_fetch_buffer_t *fb)
    kc_partition_t *kc_fb_find(const kc_fetch_buffer_t *fb, const char *topic, int32_t partition)
    kc_partition_t *kc_fb_add(kc_fetch_buffer_t *fb, const char *topic, int32_t partition)
    int kc_fb_push(kc_fetch_buffer_t *fb, kc_partition_t *p, rd_kafka_message_t **msgs, size_t n)
    size_t kc_fb_drain(kc_fetch_buffer_t *fb, size_t max, kc_fairness_t mode, rd_kafka_message_t **out)
    int kc_fb_remove(kc_fetch_buffer_t *fb, const char *topic, int32_t partition)
    void kc_fb_purge(kc_fetch_buffer_t *fb, kc_partition_t *p)
    void kc_fb_purge_all(kc_fetch_buffer_t *fb)
    int64_t kc_fb_first_offset(const kc_partition_t *p)
    int64_t kc_fb_next_offset(const kc_partition_t *p)
