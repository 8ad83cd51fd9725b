/* partition_state: see partition_state.h. */
#include "partition_state.h"

static void drained(kc_fb_part_t *q, int64_t next) {
    kc_ps_drained((kc_partition_t *)q, next);
}

void kc_ps_init_buffer(kc_fetch_buffer_t *fb) {
    kc_fb_init_owned(fb, sizeof(kc_partition_t), drained);
}

kc_partition_t *kc_ps_add(kc_fetch_buffer_t *fb, const char *topic, int32_t partition) {
    kc_partition_t *p = kc_ps_find(fb, topic, partition);
    if (p)
        return p;
    p = (kc_partition_t *)kc_fb_add(fb, topic, partition);
    if (!p)
        return NULL;
    p->position = KC_POSITION_UNKNOWN;
    p->stored = KC_POSITION_UNKNOWN;
    kc_filters_init(&p->filters);
    return p;
}

int kc_ps_remove(kc_fetch_buffer_t *fb, const char *topic, int32_t partition) {
    kc_partition_t *p = kc_ps_find(fb, topic, partition);
    if (!p)
        return 0;
    if (p->queue) {
        rd_kafka_queue_destroy(p->queue);
        p->queue = NULL;
    }
    return kc_fb_remove(fb, topic, partition);
}

void kc_ps_remove_all(kc_fetch_buffer_t *fb) {
    while (fb->n) {
        kc_partition_t *p = kc_ps_at(fb, fb->n - 1);
        kc_ps_remove(fb, p->q.topic, p->q.partition);
    }
}

void kc_ps_set_paused(kc_partition_t *p, int paused) {
    p->q.held = paused ? 1 : 0;
    p->stall_paused = 0;
}

void kc_ps_purge(kc_fetch_buffer_t *fb, kc_partition_t *p) {
    kc_fb_purge(fb, &p->q);
    p->app_pos_trusted = 0;
}

void kc_ps_purge_all(kc_fetch_buffer_t *fb) {
    for (size_t i = 0; i < fb->n; i++)
        kc_ps_purge(fb, kc_ps_at(fb, i));
}

void kc_ps_refetch_from(kc_fetch_buffer_t *fb, kc_partition_t *p, int64_t offset) {
    kc_ps_purge(fb, p);
    kc_seek_guard_start(&p->filters, offset);
}

int kc_ps_wake_fetcher(rd_kafka_t *rk, kc_partition_t *p) {
    int64_t next = kc_ps_next_offset(p);
    if (next == KC_POSITION_UNKNOWN && kc_seek_guard_active(&p->filters))
        next = p->filters.seek_target; /* the stall released p's records before any was returned */
    if (next < 0 || p->fetch_stopped || kc_filters_seek(rk, p->q.topic, p->q.partition, next) != 0)
        return 0;
    p->app_pos_trusted = 0; /* the seek resets librdkafka's application position */
    if (kc_seek_guard_active(&p->filters) && p->filters.seek_target == next)
        kc_seek_guard_start(&p->filters, next); /* a stall's refetch: watched from now, however long it was */
    return 1;
}

void kc_ps_seek(kc_fetch_buffer_t *fb, kc_partition_t *p, int64_t offset) {
    kc_ps_purge(fb, p);
    p->position = offset >= 0 ? offset : KC_POSITION_UNKNOWN;
    p->filters.floor = KC_POSITION_UNKNOWN;
    kc_seek_noted(&p->filters, offset >= 0 ? offset : KC_POSITION_UNKNOWN);
    if (offset >= 0)
        kc_seek_guard_start(&p->filters, offset); /* the seek wins over a fetch librdkafka started */
}

int kc_ps_start_floor(kc_partition_t *p, int64_t committed) {
    if (p->position != KC_POSITION_UNKNOWN || p->q.len)
        return 0;
    p->filters.floor = committed;
    return 1;
}

void kc_ps_reset_after_seek(kc_partition_t *p, int64_t offset) {
    p->position = offset;
    kc_seek_noted(&p->filters, KC_POSITION_UNKNOWN);
}

void kc_ps_records_routed(kc_partition_t *p, size_t kept, int reseeked) {
    p->refetch_forward = 0;
    if (kept)
        kc_seek_noted(&p->filters, KC_POSITION_UNKNOWN);
    /* A record the seek guard dropped moved librdkafka's position past it until the guard's new
     * seek resets it; records taken after a purge or seek come after librdkafka's own reset (the
     * seek's version barrier drops the older ones). */
    if (reseeked)
        p->app_pos_trusted = 0;
    else if (kept)
        p->app_pos_trusted = 1;
}

int kc_ps_step_to(kc_partition_t *p, int64_t offset) {
    if (p->position == KC_POSITION_UNKNOWN || offset <= p->position)
        return 0;
    p->position = offset;
    return 1;
}

int kc_ps_fetch_stop_reported(kc_partition_t *p, int64_t offset) {
    if (offset < 0 ? p->fetch_restarted : offset != p->position)
        return 0;
    p->fetch_stopped = 1;
    p->stopped_offset = offset;
    return 1;
}

void kc_ps_fetch_restarted(kc_partition_t *p, int seeked) {
    if (seeked) {
        p->fetch_stopped = 0;
        p->fetch_restarted = 1;
    }
    p->refetch_forward = 1;
}
