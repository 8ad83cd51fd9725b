# Declarations of the fetch buffer (csrc/fetch_buffer.h: the KIP-41 queue per partition and its fair
# drain; a queue and nothing else), shared by the consumer core (_core.pxd, whose partitions'
# state is csrc/partition_state.h) and the share consumer (_share.pyx).
from libc.stdint cimport int32_t, int64_t

from kipconsumer._rdk cimport rd_kafka_message_t


cdef extern from "fetch_buffer.h" nogil:
    ctypedef enum kc_fairness_t:
        KC_FAIRNESS_PROPORTIONAL
        KC_FAIRNESS_GREEDY
    int64_t KC_POSITION_UNKNOWN
    ctypedef struct kc_fb_part_t:
        char *topic
        int32_t partition
        size_t len
        size_t bytes
        int held
    ctypedef struct kc_fetch_buffer_t:
        kc_fb_part_t **parts
        size_t n
        size_t records
        size_t bytes
    void kc_fb_init(kc_fetch_buffer_t *fb)
    void kc_fb_destroy(kc_fetch_buffer_t *fb)
    kc_fb_part_t *kc_fb_find(const kc_fetch_buffer_t *fb, const char *topic, int32_t partition)
    kc_fb_part_t *kc_fb_add(kc_fetch_buffer_t *fb, const char *topic, int32_t partition)
    int kc_fb_push(kc_fetch_buffer_t *fb, kc_fb_part_t *p, rd_kafka_message_t **msgs, size_t n)
    size_t kc_fb_drain(kc_fetch_buffer_t *fb, size_t max, kc_fairness_t mode, rd_kafka_message_t **out)
    int kc_fb_remove(kc_fetch_buffer_t *fb, const char *topic, int32_t partition)
    void kc_fb_purge(kc_fetch_buffer_t *fb, kc_fb_part_t *p)
    int64_t kc_fb_first_offset(const kc_fb_part_t *p)
    int64_t kc_fb_last_offset(const kc_fb_part_t *p)
