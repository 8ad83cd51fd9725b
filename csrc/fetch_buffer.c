/* fetch_buffer: see fetch_buffer.h. */
#include "fetch_buffer.h"

#include <stdlib.h>
#include <string.h>

/* How buffered messages are released; replaceable by the C unit tests' fake messages. */
void (*kc_fb_msg_destroy)(rd_kafka_message_t *m) = rd_kafka_message_destroy;

static size_t msg_bytes(const rd_kafka_message_t *m) {
    return m->len + m->key_len;
}

void kc_fb_init(kc_fetch_buffer_t *fb) {
    kc_fb_init_owned(fb, sizeof(kc_fb_part_t), NULL);
}

void kc_fb_init_owned(kc_fetch_buffer_t *fb, size_t part_size,
                      void (*on_taken)(kc_fb_part_t *p, int64_t next)) {
    memset(fb, 0, sizeof(*fb));
    fb->part_size = part_size < sizeof(kc_fb_part_t) ? sizeof(kc_fb_part_t) : part_size;
    fb->on_taken = on_taken;
}

static void partition_free(kc_fetch_buffer_t *fb, kc_fb_part_t *p) {
    kc_fb_purge(fb, p);
    free(p->ring);
    free(p->ring_bytes);
    free(p->topic);
    free(p);
}

void kc_fb_destroy(kc_fetch_buffer_t *fb) {
    for (size_t i = 0; i < fb->n; i++)
        partition_free(fb, fb->parts[i]);
    free(fb->parts);
    kc_fb_init_owned(fb, fb->part_size, fb->on_taken);
}

kc_fb_part_t *kc_fb_find(const kc_fetch_buffer_t *fb, const char *topic, int32_t partition) {
    for (size_t i = 0; i < fb->n; i++) {
        kc_fb_part_t *p = fb->parts[i];
        if (p->partition == partition && strcmp(p->topic, topic) == 0)
            return p;
    }
    return NULL;
}

kc_fb_part_t *kc_fb_add(kc_fetch_buffer_t *fb, const char *topic, int32_t partition) {
    kc_fb_part_t *p = kc_fb_find(fb, topic, partition);
    if (p)
        return p;
    if (fb->n == fb->cap) {
        size_t ncap = fb->cap ? fb->cap * 2 : 16;
        kc_fb_part_t **np = realloc(fb->parts, ncap * sizeof(*np));
        if (!np)
            return NULL;
        fb->parts = np;
        fb->cap = ncap;
    }
    p = calloc(1, fb->part_size);
    if (!p)
        return NULL;
    p->topic = strdup(topic);
    if (!p->topic) {
        free(p);
        return NULL;
    }
    p->partition = partition;
    fb->parts[fb->n++] = p;
    return p;
}

int kc_fb_remove(kc_fetch_buffer_t *fb, const char *topic, int32_t partition) {
    for (size_t i = 0; i < fb->n; i++) {
        kc_fb_part_t *p = fb->parts[i];
        if (p->partition == partition && strcmp(p->topic, topic) == 0) {
            partition_free(fb, p);
            memmove(&fb->parts[i], &fb->parts[i + 1], (fb->n - i - 1) * sizeof(*fb->parts));
            fb->n--;
            if (fb->cursor > i)
                fb->cursor--;
            if (fb->cursor >= fb->n)
                fb->cursor = 0;
            return 1;
        }
    }
    return 0;
}

static int ring_reserve(kc_fb_part_t *p, size_t need) {
    if (need <= p->ring_cap)
        return 0;
    size_t ncap = p->ring_cap ? p->ring_cap : 64;
    while (ncap < need)
        ncap *= 2;
    rd_kafka_message_t **nr = malloc(ncap * sizeof(*nr));
    uint32_t *nb = malloc(ncap * sizeof(*nb));
    if (!nr || !nb) {
        free(nr);
        free(nb);
        return -1;
    }
    /* unwrap into the new ring starting at 0 */
    for (size_t i = 0; i < p->len; i++) {
        nr[i] = p->ring[(p->head + i) % p->ring_cap];
        nb[i] = p->ring_bytes[(p->head + i) % p->ring_cap];
    }
    free(p->ring);
    free(p->ring_bytes);
    p->ring = nr;
    p->ring_bytes = nb;
    p->ring_cap = ncap;
    p->head = 0;
    return 0;
}

int kc_fb_push(kc_fetch_buffer_t *fb, kc_fb_part_t *p, rd_kafka_message_t **msgs, size_t n) {
    if (ring_reserve(p, p->len + n) != 0) {
        for (size_t i = 0; i < n; i++)
            kc_fb_msg_destroy(msgs[i]);
        return -1;
    }
    size_t tail = (p->head + p->len) % p->ring_cap;
    for (size_t i = 0; i < n; i++) {
        size_t b = msg_bytes(msgs[i]);
        p->ring[tail] = msgs[i];
        p->ring_bytes[tail] = (uint32_t)b;
        tail = tail + 1 == p->ring_cap ? 0 : tail + 1;
        p->bytes += b;
        fb->bytes += b;
    }
    p->len += n;
    fb->records += n;
    return 0;
}

void kc_fb_purge(kc_fetch_buffer_t *fb, kc_fb_part_t *p) {
    for (size_t i = 0; i < p->len; i++)
        kc_fb_msg_destroy(p->ring[(p->head + i) % p->ring_cap]);
    fb->records -= p->len;
    fb->bytes -= p->bytes;
    p->len = 0;
    p->head = 0;
    p->bytes = 0;
}

size_t kc_fb_target(const kc_fetch_buffer_t *fb, size_t max_poll_records, size_t floor) {
    size_t n = fb->n ? fb->n : 1;
    size_t share = (max_poll_records + n - 1) / n;
    size_t t = 2 * share;
    return t < floor ? floor : t;
}

int64_t kc_fb_first_offset(const kc_fb_part_t *p) {
    return p->len ? p->ring[p->head]->offset : KC_POSITION_UNKNOWN;
}

int64_t kc_fb_last_offset(const kc_fb_part_t *p) {
    return p->len ? p->ring[(p->head + p->len - 1) % p->ring_cap]->offset : KC_POSITION_UNKNOWN;
}

size_t kc_fb_drainable(const kc_fetch_buffer_t *fb) {
    size_t total = 0;
    for (size_t i = 0; i < fb->n; i++)
        if (!fb->parts[i]->held)
            total += fb->parts[i]->len;
    return total;
}

/* Moves p->take records of p into out; returns how many were written. Reads no message
 * but the last (its offset, for fb->on_taken): the sizes come from ring_bytes. */
static size_t take_from(kc_fetch_buffer_t *fb, kc_fb_part_t *p, rd_kafka_message_t **out) {
    size_t k = p->take;
    size_t taken_bytes = 0;
    for (size_t i = 0; i < k; i++) {
        out[i] = p->ring[p->head];
        taken_bytes += p->ring_bytes[p->head];
        p->head = p->head + 1 == p->ring_cap ? 0 : p->head + 1;
    }
    p->bytes -= taken_bytes;
    fb->bytes -= taken_bytes;
    if (k) {
        p->len -= k;
        fb->records -= k;
        if (p->len == 0)
            p->head = 0;
        if (fb->on_taken)
            fb->on_taken(p, out[k - 1]->offset + 1);
    }
    p->take = 0;
    return k;
}

/* Water-filling: every eligible partition gets min(len, share) of what is left, the
 * share recomputed over the partitions still wanting more, until `max` is used or
 * nothing is left; a remainder smaller than the number of partitions goes one record
 * each, starting at the rotation cursor. */
static void plan_proportional(kc_fetch_buffer_t *fb, size_t max) {
    size_t remaining = max;
    for (;;) {
        size_t wanting = 0;
        for (size_t i = 0; i < fb->n; i++) {
            kc_fb_part_t *p = fb->parts[i];
            if (!p->held && p->take < p->len)
                wanting++;
        }
        if (wanting == 0 || remaining == 0)
            return;
        size_t share = remaining / wanting;
        if (share == 0) {
            for (size_t j = 0; j < fb->n && remaining; j++) {
                kc_fb_part_t *p = fb->parts[(fb->cursor + j) % fb->n];
                if (!p->held && p->take < p->len) {
                    p->take++;
                    remaining--;
                }
            }
            return;
        }
        for (size_t i = 0; i < fb->n; i++) {
            kc_fb_part_t *p = fb->parts[i];
            if (p->held || p->take >= p->len)
                continue;
            size_t give = p->len - p->take;
            if (give > share)
                give = share;
            p->take += give;
            remaining -= give;
        }
    }
}

size_t kc_fb_drain(kc_fetch_buffer_t *fb, size_t max, kc_fairness_t mode, rd_kafka_message_t **out) {
    if (fb->n == 0 || max == 0)
        return 0;
    size_t written = 0;
    size_t start = fb->cursor % fb->n;
    if (mode == KC_FAIRNESS_GREEDY) {
        size_t last = fb->n;
        for (size_t j = 0; j < fb->n && written < max; j++) {
            size_t idx = (start + j) % fb->n;
            kc_fb_part_t *p = fb->parts[idx];
            if (p->held || p->len == 0)
                continue;
            size_t room = max - written;
            p->take = p->len < room ? p->len : room;
            written += take_from(fb, p, out + written);
            last = idx;
        }
        if (last != fb->n)
            fb->cursor = (last + 1) % fb->n;
        return written;
    }
    plan_proportional(fb, max);
    /* Emit in rotation order so no partition is always first in the batch. */
    for (size_t j = 0; j < fb->n; j++) {
        kc_fb_part_t *p = fb->parts[(start + j) % fb->n];
        written += take_from(fb, p, out + written);
    }
    fb->cursor = (start + 1) % fb->n;
    return written;
}
