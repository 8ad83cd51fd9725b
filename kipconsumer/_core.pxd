# Declarations of the C core in csrc/ (partition state with the record filters' state, the fetch buffer
# via _fetch_buffer.pxd, rebalance barrier, poll timer, heartbeat monitor, poll loop). The partition
# state and the barrier are written through their setters only (kc_ps_*, kc_barrier_*): the fields
# declared here are for reading (tests/test_consumer_structure.py checks).
from libc.stdint cimport int32_t, int64_t, uint64_t

from kipconsumer._clock cimport (KC_NO_DEADLINE, KC_WAIT_SLICE_MS, KC_WAIT_SLICE_US, kc_deadline_ms,
                                kc_deadline_us, kc_ms_until, kc_ms_until_us, kc_now_ms, kc_now_us,
                                kc_slice_end_us, kc_slice_ms)
# the fetch buffer's declarations, visible to every `from kipconsumer._core cimport *`
from kipconsumer._fetch_buffer cimport *
from kipconsumer._rdk cimport (rd_kafka_conf_t, rd_kafka_message_t, rd_kafka_queue_t,
                               rd_kafka_t)


cdef extern from "record_filters.h" nogil:
    ctypedef struct kc_partition_filters_t:
        int64_t floor
        int64_t seek_target
        int64_t sought


cdef extern from "partition_state.h" nogil:
    # q is the partition's queue in the fetch buffer; its fields read as the partition's own
    ctypedef struct kc_partition_t:
        kc_fb_part_t q
        char *topic "q.topic"
        int32_t partition "q.partition"
        size_t len "q.len"
        size_t bytes "q.bytes"
        int64_t position
        int64_t stored
        rd_kafka_queue_t *queue
        int fetch_stopped
        int64_t stopped_offset
        int refetch_forward
        kc_partition_filters_t filters
    kc_partition_t *kc_ps_find(const kc_fetch_buffer_t *fb, const char *topic, int32_t partition)
    kc_partition_t *kc_ps_at(const kc_fetch_buffer_t *fb, size_t i)
    int kc_ps_remove(kc_fetch_buffer_t *fb, const char *topic, int32_t partition)
    int kc_ps_paused(const kc_partition_t *p)
    void kc_ps_set_paused(kc_partition_t *p, int paused)
    int kc_ps_wake_fetcher(rd_kafka_t *rk, kc_partition_t *p)
    void kc_ps_purge(kc_fetch_buffer_t *fb, kc_partition_t *p)
    void kc_ps_purge_all(kc_fetch_buffer_t *fb)
    int64_t kc_ps_first_offset(const kc_partition_t *p)
    int64_t kc_ps_next_offset(const kc_partition_t *p)
    void kc_ps_seek(kc_fetch_buffer_t *fb, kc_partition_t *p, int64_t offset)
    int kc_ps_start_floor(kc_partition_t *p, int64_t committed)
    void kc_ps_mark_stored(kc_partition_t *p)


cdef extern from "rebalance_barrier.h" nogil:
    ctypedef struct kc_rebalance_barrier_t:
        int enabled
        int64_t last_rebalance_ms
        int64_t commit_refused_ms
    void kc_barrier_rebalanced(kc_rebalance_barrier_t *b, int64_t now_ms)
    void kc_barrier_commit_refused(kc_rebalance_barrier_t *b, int64_t now_ms)


cdef extern from "poll_timer.h" nogil:
    ctypedef struct kc_poll_timer_t:
        int64_t interval_ms
    int64_t kc_poll_timer_since(kc_poll_timer_t *t)
    int kc_poll_timer_expired(kc_poll_timer_t *t)


cdef extern from "heartbeat_monitor.h" nogil:
    ctypedef struct kc_heartbeat_monitor_t:
        int64_t last_ok_ms
        int64_t last_any_ms
        uint64_t ok
        uint64_t errors
        int32_t last_error
    void kc_hb_free(kc_heartbeat_monitor_t *hb)


cdef extern from "prefetch_thread.h" nogil:
    ctypedef struct kc_prefetch_thread_t:
        int running
        int locking
        uint64_t moved


cdef extern from "stall_pause.h" nogil:
    ctypedef int (*kc_mallctl_fn)(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
    ctypedef struct kc_stall_pause_t:
        int running
        int locking
        int64_t pause_ms
        int paused
        uint64_t pauses
        uint64_t released
        uint64_t refetched
        kc_mallctl_fn mallctl


cdef extern from "consumer_core.h" nogil:
    ctypedef enum kc_poll_status_t:
        KC_POLL_OK
        KC_POLL_WAKEUP
        KC_POLL_EVENT
        KC_POLL_ABORT
    ctypedef struct kc_consumer_t:
        rd_kafka_t *rk
        rd_kafka_queue_t *fetchq
        int wake_fd
        size_t ring_max_records
        size_t ring_max_bytes
        kc_fetch_buffer_t fb
        size_t max_poll_records
        kc_poll_timer_t poll_timer
        kc_heartbeat_monitor_t *heartbeat
        int abort_poll
        uint64_t records_returned
        uint64_t polls
        uint64_t poll_time_us
        uint64_t dropped_foreign
        uint64_t dropped_refetched
        uint64_t dropped_below_committed
        uint64_t dropped_before_seek
        uint64_t seek_retries
        uint64_t resets_after_seek
        size_t refetch_forwards
        kc_rebalance_barrier_t barrier
        uint64_t barrier_polls
        int hold_records
        size_t n_errors
        uint64_t poll_moved
        kc_prefetch_thread_t prefetch
        kc_stall_pause_t stall
    kc_consumer_t *kc_consumer_new(rd_kafka_conf_t *conf, size_t max_poll_records,
                                   kc_fairness_t fairness, int64_t max_poll_interval_ms,
                                   char *errstr, size_t errlen)
    int kc_consumer_attach(kc_consumer_t *c, rd_kafka_t *rk)
    void kc_consumer_free(kc_consumer_t *c)
    kc_partition_t *kc_consumer_add_partition(kc_consumer_t *c, const char *topic, int32_t partition)
    int kc_consumer_step_over_markers(kc_consumer_t *c, kc_partition_t *p)
    kc_poll_status_t kc_consumer_poll(kc_consumer_t *c, int timeout_ms, rd_kafka_message_t **out,
                                      size_t *n_out)
    rd_kafka_message_t *kc_consumer_take_error(kc_consumer_t *c)
    size_t kc_consumer_drop_offset_errors(kc_consumer_t *c, const kc_partition_t *p)
    void kc_consumer_fetch_restarted(kc_consumer_t *c, kc_partition_t *p, int seeked)
    size_t kc_consumer_refill(kc_consumer_t *c, size_t limit, int bounded)
    void kc_consumer_serve(kc_consumer_t *c)
    void kc_consumer_wakeup(kc_consumer_t *c)
    int kc_consumer_rebalance_pending(kc_consumer_t *c)
    int kc_consumer_rejoining(kc_consumer_t *c)
    void kc_consumer_hold(kc_consumer_t *c)
    void kc_consumer_release(kc_consumer_t *c)
    void kc_consumer_release_all(kc_consumer_t *c)
    int kc_consumer_prefetch_start(kc_consumer_t *c)
    void kc_consumer_prefetch_stop(kc_consumer_t *c)
    int kc_consumer_stall_start(kc_consumer_t *c, int64_t pause_ms)
    void kc_consumer_stall_stop(kc_consumer_t *c)
