/* Arrow record batches built in C from librdkafka messages (see arrow_batch.h,
 * docs/arrow.md).
 *
 * Layout of what is exported: two reference-counted blocks per batch (see "blocks and their
 * pool" below), each 64-byte aligned:
 *   - the fixed block holds the top-level struct array's private data (its buffers[1]: validity
 *     always NULL, the struct level has no nulls; the children pointer array and the child
 *     ArrowArray structs), each child's private data (its buffers[] pointer array), the schema's
 *     private data (its child ArrowSchema structs; all strings static), and the fixed-width,
 *     offsets and validity buffers;
 *   - the var block holds the topic, key and value bytes.
 * Every buffer is padded to a multiple of 64 bytes with zeroed padding.  The parent, every child
 * and the schema each hold a reference, so a child moved out of the parent (struct copied,
 * original's release set to NULL) stays valid after the parent is released; the last release
 * returns the block to the pool.
 *
 * Two passes over the messages: pass 1 fills the fixed-width columns and the
 * offsets buffers and counts bytes/nulls; pass 2 copies topic/key/value bytes
 * (memcpy) and fills validity bitmaps of the columns that have nulls.  No
 * per-record allocation; two blocks per batch, usually taken from the pool. */
#include "arrow_batch.h"
#include "msg_prefetch.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KC_ARROW_ALIGN    64
#define KC_ARROW_MAX_COLS 7
#define KC_ARROW_MAX_BUFS 3

#if defined(__GNUC__)
#define KC_ARROW_LIKELY(x)   __builtin_expect(!!(x), 1)
#define KC_ARROW_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define KC_ARROW_LIKELY(x)   (x)
#define KC_ARROW_UNLIKELY(x) (x)
#endif

void *(*kc_arrow_alloc_hook)(size_t alignment, size_t size) = NULL;

/* ------------------------------------------------------------------ blocks and their pool */

/* A batch lives in two blocks: the "fixed" block (the exported structs' private data and every
 * buffer whose size is known from n) and the "var" block (topic/key/value bytes).  Each block
 * counts its references: the fixed block one for the parent array, one per child and one for the
 * schema; the var block one per string/binary child.  The last release returns the block to a
 * small process-wide pool (most recently returned first, so the next batch writes into memory
 * that is still in cache) instead of freeing it; the pool holds at most KC_ARROW_POOL_MAX_BLOCKS
 * blocks and KC_ARROW_POOL_MAX_BYTES bytes and frees the oldest blocks beyond either.
 *
 * Why: per batch the build made ~20 posix_memalign/free pairs; the 50-100 KiB value buffers of a
 * 500-record poll made glibc consolidate its fastbins when they were freed (malloc_consolidate,
 * in perf), and every batch wrote its values into memory that was not in cache. */
#define KC_ARROW_BLOCK_HDR       64 /* sizeof(kc_arrow_block) rounded up: keeps data 64-aligned */
#define KC_ARROW_BLOCK_MIN       4096
#define KC_ARROW_POOL_MAX_BLOCKS 8

typedef struct kc_arrow_block {
    atomic_long refs;
    size_t cap;                  /* usable bytes after the header */
    struct kc_arrow_block *next; /* in the pool */
} kc_arrow_block;

_Static_assert(sizeof(kc_arrow_block) <= KC_ARROW_BLOCK_HDR, "block header must fit in 64 bytes");

static pthread_mutex_t kc_arrow_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static kc_arrow_block *kc_arrow_pool_head; /* most recently returned first */
static size_t kc_arrow_pool_blocks, kc_arrow_pool_bytes;
static pthread_once_t kc_arrow_pool_once = PTHREAD_ONCE_INIT;

/* fork() while another thread holds the pool's lock would leave it locked forever in the child
 * (multiprocessing, Spark's Python workers): the lock is taken around fork and released on both
 * sides, so the child inherits a consistent pool. */
static void kc_arrow_pool_prefork(void) {
    pthread_mutex_lock(&kc_arrow_pool_lock);
}

static void kc_arrow_pool_postfork(void) {
    pthread_mutex_unlock(&kc_arrow_pool_lock);
}

static void kc_arrow_pool_init(void) {
    pthread_atfork(kc_arrow_pool_prefork, kc_arrow_pool_postfork, kc_arrow_pool_postfork);
}

static size_t kc_arrow_padded(size_t size) {
    if (size == 0)
        size = 1;
    return (size + (KC_ARROW_ALIGN - 1)) & ~(size_t)(KC_ARROW_ALIGN - 1);
}

static char *kc_arrow_block_data(kc_arrow_block *b) {
    return (char *)b + KC_ARROW_BLOCK_HDR;
}

/* A block of at least `size` usable bytes: the most recently returned pooled block that is large
 * enough, else a new one (capacity rounded up to a power of two, at least 4 KiB, so that batches
 * of slightly different sizes reuse each other's blocks).  NULL when out of memory. */
static kc_arrow_block *kc_arrow_block_get(size_t size) {
    kc_arrow_block *b, **pp;
    size_t cap = KC_ARROW_BLOCK_MIN;
    void *p = NULL;

    pthread_once(&kc_arrow_pool_once, kc_arrow_pool_init);
    pthread_mutex_lock(&kc_arrow_pool_lock);
    for (pp = &kc_arrow_pool_head; (b = *pp) != NULL; pp = &b->next)
        if (b->cap >= size) {
            *pp = b->next;
            kc_arrow_pool_blocks--;
            kc_arrow_pool_bytes -= b->cap;
            break;
        }
    pthread_mutex_unlock(&kc_arrow_pool_lock);
    if (b) {
        b->next = NULL;
        return b;
    }

    while (cap < size) {
        if (cap > (SIZE_MAX - KC_ARROW_BLOCK_HDR) / 2)
            return NULL;
        cap *= 2;
    }
    if (KC_ARROW_UNLIKELY(kc_arrow_alloc_hook != NULL)) {
        p = kc_arrow_alloc_hook(KC_ARROW_ALIGN, KC_ARROW_BLOCK_HDR + cap);
        if (!p)
            return NULL;
    } else if (posix_memalign(&p, KC_ARROW_ALIGN, KC_ARROW_BLOCK_HDR + cap) != 0) {
        return NULL;
    }
    b = p;
    atomic_init(&b->refs, 0);
    b->cap = cap;
    b->next = NULL;
    return b;
}

/* Returns a block nobody references to the pool, or frees it (larger than the pool's byte
 * limit), evicting and freeing the oldest pooled blocks beyond the pool's limits. */
static void kc_arrow_block_put(kc_arrow_block *b) {
    kc_arrow_block *evict = NULL;

    if (b->cap > KC_ARROW_POOL_MAX_BYTES) {
        free(b);
        return;
    }
    pthread_mutex_lock(&kc_arrow_pool_lock);
    b->next = kc_arrow_pool_head;
    kc_arrow_pool_head = b;
    kc_arrow_pool_blocks++;
    kc_arrow_pool_bytes += b->cap;
    while (kc_arrow_pool_blocks > KC_ARROW_POOL_MAX_BLOCKS || kc_arrow_pool_bytes > KC_ARROW_POOL_MAX_BYTES) {
        kc_arrow_block **pp = &kc_arrow_pool_head, *last;
        while ((*pp)->next != NULL)
            pp = &(*pp)->next;
        last = *pp; /* the oldest */
        *pp = NULL;
        kc_arrow_pool_blocks--;
        kc_arrow_pool_bytes -= last->cap;
        last->next = evict;
        evict = last;
    }
    pthread_mutex_unlock(&kc_arrow_pool_lock);
    while (evict) {
        kc_arrow_block *next = evict->next;
        free(evict);
        evict = next;
    }
}

static void kc_arrow_block_unref(kc_arrow_block *b) {
    if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
        kc_arrow_block_put(b);
}

size_t kc_arrow_pool_trim(void) {
    kc_arrow_block *b;
    size_t freed = 0;

    pthread_mutex_lock(&kc_arrow_pool_lock);
    b = kc_arrow_pool_head;
    kc_arrow_pool_head = NULL;
    kc_arrow_pool_blocks = 0;
    kc_arrow_pool_bytes = 0;
    pthread_mutex_unlock(&kc_arrow_pool_lock);
    while (b) {
        kc_arrow_block *next = b->next;
        free(b);
        b = next;
        freed++;
    }
    return freed;
}

void kc_arrow_pool_stats(size_t *blocks, size_t *bytes) {
    pthread_mutex_lock(&kc_arrow_pool_lock);
    if (blocks)
        *blocks = kc_arrow_pool_blocks;
    if (bytes)
        *bytes = kc_arrow_pool_bytes;
    pthread_mutex_unlock(&kc_arrow_pool_lock);
}

/* Carves a buffer of `size` bytes, padded to a multiple of 64, from *cursor (64-byte aligned);
 * the padding (and everything when `zero`) is zeroed. */
static void *kc_arrow_carve(char **cursor, size_t size, int zero) {
    void *p = *cursor;
    size_t padded = kc_arrow_padded(size);

    if (zero)
        memset(p, 0, padded);
    else
        memset((char *)p + size, 0, padded - size);
    *cursor += padded;
    return p;
}

/* ------------------------------------------------------------------ release */

typedef struct kc_arrow_col_priv {
    const void *buffers[KC_ARROW_MAX_BUFS];
    kc_arrow_block *fixed, *var; /* var: NULL for fixed-width columns */
} kc_arrow_col_priv;

typedef struct kc_arrow_batch_priv {
    const void *buffers[1];
    kc_arrow_block *fixed;
    struct ArrowArray *child_ptrs[KC_ARROW_MAX_COLS];
    struct ArrowArray children[KC_ARROW_MAX_COLS];
    kc_arrow_col_priv cols[KC_ARROW_MAX_COLS];
} kc_arrow_batch_priv;

typedef struct kc_arrow_schema_priv {
    kc_arrow_block *fixed;
    struct ArrowSchema *child_ptrs[KC_ARROW_MAX_COLS];
    struct ArrowSchema children[KC_ARROW_MAX_COLS];
} kc_arrow_schema_priv;

static void kc_arrow_col_release(struct ArrowArray *a) {
    kc_arrow_col_priv *p;

    if (!a || !a->release)
        return;
    p = (kc_arrow_col_priv *)a->private_data;
    a->private_data = NULL;
    a->release = NULL;
    if (p) {
        kc_arrow_block *fixed = p->fixed, *var = p->var; /* p lives in the fixed block */
        kc_arrow_block_unref(var);
        kc_arrow_block_unref(fixed);
    }
}

static void kc_arrow_batch_release(struct ArrowArray *a) {
    kc_arrow_batch_priv *bp;
    int64_t i;

    if (!a || !a->release)
        return;
    bp = (kc_arrow_batch_priv *)a->private_data;
    /* Children may have been moved out (their release is then NULL here). */
    for (i = 0; i < a->n_children; i++) {
        struct ArrowArray *c = a->children[i];
        if (c && c->release)
            c->release(c);
    }
    a->private_data = NULL;
    a->release = NULL;
    if (bp)
        kc_arrow_block_unref(bp->fixed); /* last: bp and the children's structs live in it */
}

static void kc_arrow_schema_child_release(struct ArrowSchema *s) {
    /* Static strings, no children, nothing owned. */
    if (s)
        s->release = NULL;
}

static void kc_arrow_schema_release(struct ArrowSchema *s) {
    kc_arrow_schema_priv *sp;
    int64_t i;

    if (!s || !s->release)
        return;
    sp = (kc_arrow_schema_priv *)s->private_data;
    for (i = 0; i < s->n_children; i++) {
        struct ArrowSchema *c = s->children[i];
        if (c && c->release)
            c->release(c);
    }
    s->private_data = NULL;
    s->release = NULL;
    if (sp)
        kc_arrow_block_unref(sp->fixed);
}

/* ------------------------------------------------------------------ helpers */

static int kc_arrow_fail(int err, char *errbuf, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static int kc_arrow_fail(int err, char *errbuf, size_t errlen, const char *fmt, ...) {
    if (errbuf && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
    }
    errno = err;
    return -1;
}

static const char *const kc_arrow_col_names[KC_ARROW_MAX_COLS] = {
    "topic", "partition", "offset", "timestamp", "key", "value", "timestamp_type",
};
static const char *const kc_arrow_col_formats[KC_ARROW_MAX_COLS] = {
    "u", "i", "l", "tsm:", "z", "z", "i",
};
/* Columns that can hold nulls are declared nullable; the others never are. */
static const int64_t kc_arrow_col_flags[KC_ARROW_MAX_COLS] = {
    ARROW_FLAG_NULLABLE, 0, 0, ARROW_FLAG_NULLABLE, ARROW_FLAG_NULLABLE, ARROW_FLAG_NULLABLE, 0,
};

/* How many messages ahead pass 1 prefetches.  The messages sat in the fetch buffer since
 * they were pushed, so each one is a cache miss (two or three lines: the message, and the
 * timestamp that rd_kafka_message_timestamp() reads just after it); without the prefetch
 * pass 1 stalls on them one after the other (perf: ~2/3 of kc_arrow_build's samples on the
 * first load of each message). */
#define KC_ARROW_PREFETCH_AHEAD 24

#define KC_ARROW_SET_BIT(bm, i) ((bm)[(i) >> 3] |= (uint8_t)(1u << ((i) & 7)))

/* ------------------------------------------------------------------ build */

int kc_arrow_build(rd_kafka_message_t *const *msgs, size_t n, int flags, struct ArrowSchema *schema_out,
                   struct ArrowArray *array_out, char *errbuf, size_t errlen) {
    return kc_arrow_build_ex(msgs, n, flags, NULL, NULL, schema_out, array_out, errbuf, errlen);
}

int kc_arrow_build_ex(rd_kafka_message_t *const *msgs, size_t n, int flags, const int64_t *timestamps,
                      const int32_t *ts_types, struct ArrowSchema *schema_out, struct ArrowArray *array_out,
                      char *errbuf, size_t errlen) {
    const int ncols = (flags & KC_ARROW_WITH_TIMESTAMP_TYPE) ? 7 : 6;
    const int with_tstype = ncols == 7;
    const void *bufs[KC_ARROW_MAX_COLS][KC_ARROW_MAX_BUFS];
    int64_t nulls[KC_ARROW_MAX_COLS];
    kc_arrow_block *fixed = NULL, *var = NULL;
    kc_arrow_batch_priv *bp;
    kc_arrow_schema_priv *sp;
    char *cur;
    int32_t *partition, *toff, *koff, *voff, *tstype = NULL;
    int64_t *offset, *ts;
    uint8_t *tdata, *kdata, *vdata, *tbm = NULL, *kbm = NULL, *vbm = NULL, *tsbm = NULL;
    size_t tbytes = 0, kbytes = 0, vbytes = 0, bm_bytes, i, size;
    const rd_kafka_topic_t *last_rkt = NULL;
    const char *tname = NULL;
    size_t tname_len = 0;
    int c, b, err = 0;
    char msg[160];

    msg[0] = '\0';
    if (schema_out)
        schema_out->release = NULL;
    if (array_out)
        array_out->release = NULL;
    if (!schema_out || !array_out)
        return kc_arrow_fail(EINVAL, errbuf, errlen, "kc_arrow_build: schema_out and array_out are required");
    if (flags & ~KC_ARROW_ALL_FLAGS)
        return kc_arrow_fail(EINVAL, errbuf, errlen, "kc_arrow_build: unknown flags 0x%x",
                             (unsigned)(flags & ~KC_ARROW_ALL_FLAGS));
    if (n > 0 && !msgs)
        return kc_arrow_fail(EINVAL, errbuf, errlen, "kc_arrow_build: msgs is NULL with n=%zu", n);
    /* Keeps (n + 1) * sizeof(int64_t) and int64 lengths far from overflow. */
    if (n > (size_t)INT32_MAX)
        return kc_arrow_fail(EOVERFLOW, errbuf, errlen, "kc_arrow_build: too many messages (%zu)", n);

    memset(bufs, 0, sizeof(bufs));
    memset(nulls, 0, sizeof(nulls));
    bm_bytes = (n + 7) / 8;

#define KC_GET_BLOCK(dst, size)                                                                              \
    do {                                                                                                     \
        if (!((dst) = kc_arrow_block_get(size))) {                                                           \
            err = ENOMEM;                                                                                    \
            snprintf(msg, sizeof(msg), "kc_arrow_build: out of memory allocating %zu bytes",                 \
                     (size_t)(size));                                                                        \
            goto done;                                                                                       \
        }                                                                                                    \
    } while (0)

    /* The fixed block: the private structs, the fixed-width columns and offsets, and room for the
     * four validity bitmaps (used only by columns that turn out to have nulls). */
    size = kc_arrow_padded(sizeof(*bp)) + kc_arrow_padded(sizeof(*sp)) + 3 * kc_arrow_padded((n + 1) * 4) +
           (with_tstype ? 2 : 1) * kc_arrow_padded(n * 4) + 2 * kc_arrow_padded(n * 8) +
           4 * kc_arrow_padded(bm_bytes);
    KC_GET_BLOCK(fixed, size);
    cur = kc_arrow_block_data(fixed);
    bp = kc_arrow_carve(&cur, sizeof(*bp), 1);
    sp = kc_arrow_carve(&cur, sizeof(*sp), 1);
    toff = kc_arrow_carve(&cur, (n + 1) * sizeof(int32_t), 0);
    bufs[KC_ARROW_COL_TOPIC][1] = toff;
    partition = kc_arrow_carve(&cur, n * sizeof(int32_t), 0);
    bufs[KC_ARROW_COL_PARTITION][1] = partition;
    offset = kc_arrow_carve(&cur, n * sizeof(int64_t), 0);
    bufs[KC_ARROW_COL_OFFSET][1] = offset;
    ts = kc_arrow_carve(&cur, n * sizeof(int64_t), 0);
    bufs[KC_ARROW_COL_TIMESTAMP][1] = ts;
    koff = kc_arrow_carve(&cur, (n + 1) * sizeof(int32_t), 0);
    bufs[KC_ARROW_COL_KEY][1] = koff;
    voff = kc_arrow_carve(&cur, (n + 1) * sizeof(int32_t), 0);
    bufs[KC_ARROW_COL_VALUE][1] = voff;
    if (with_tstype) {
        tstype = kc_arrow_carve(&cur, n * sizeof(int32_t), 0);
        bufs[KC_ARROW_COL_TIMESTAMP_TYPE][1] = tstype;
    }

    /* Pass 1: fixed-width values, offsets, byte totals, null counts. */
    toff[0] = koff[0] = voff[0] = 0;
    for (i = 0; i < n && i < KC_ARROW_PREFETCH_AHEAD; i++)
        if (msgs[i])
            kc_prefetch_msg(msgs[i]);
    for (i = 0; i < n; i++) {
        const rd_kafka_message_t *m = msgs[i];
        int64_t t;
        int32_t tt;
        size_t len;

        if (KC_ARROW_UNLIKELY(!m)) {
            err = EINVAL;
            snprintf(msg, sizeof(msg), "kc_arrow_build: msgs[%zu] is NULL", i);
            goto done;
        }
        if (KC_ARROW_UNLIKELY(m->err != RD_KAFKA_RESP_ERR_NO_ERROR)) {
            err = EINVAL;
            snprintf(msg, sizeof(msg),
                     "kc_arrow_build: msgs[%zu] carries error %d; error messages must be handled "
                     "by the caller",
                     i, (int)m->err);
            goto done;
        }
        if (i + KC_ARROW_PREFETCH_AHEAD < n && msgs[i + KC_ARROW_PREFETCH_AHEAD])
            kc_prefetch_msg(msgs[i + KC_ARROW_PREFETCH_AHEAD]);

        /* topic (cached per rkt: consecutive messages usually share a topic) */
        if (m->rkt != last_rkt) {
            last_rkt = m->rkt;
            tname = last_rkt ? rd_kafka_topic_name(last_rkt) : NULL;
            tname_len = tname ? strlen(tname) : 0;
        }
        if (KC_ARROW_LIKELY(tname != NULL)) {
            if (KC_ARROW_UNLIKELY(tname_len > (size_t)INT32_MAX - tbytes))
                goto overflow;
            tbytes += tname_len;
        } else {
            nulls[KC_ARROW_COL_TOPIC]++;
        }
        toff[i + 1] = (int32_t)tbytes;

        partition[i] = m->partition;
        offset[i] = m->offset;

        if (timestamps) {
            t = timestamps[i];
            tt = ts_types ? ts_types[i]
                          : (t == -1 ? RD_KAFKA_TIMESTAMP_NOT_AVAILABLE : RD_KAFKA_TIMESTAMP_CREATE_TIME);
        } else {
            rd_kafka_timestamp_type_t tty = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
            t = rd_kafka_message_timestamp(m, &tty);
            tt = (int32_t)tty;
        }
        if (t == -1 || tt == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE) {
            t = -1; /* marks the null for pass 2; the slot's value is undefined in Arrow */
            tt = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
            nulls[KC_ARROW_COL_TIMESTAMP]++;
        }
        ts[i] = t;
        if (with_tstype)
            tstype[i] = tt;

        if (m->key) {
            len = m->key_len;
            if (KC_ARROW_UNLIKELY(len > (size_t)INT32_MAX - kbytes))
                goto overflow;
            kbytes += len;
        } else {
            nulls[KC_ARROW_COL_KEY]++;
        }
        koff[i + 1] = (int32_t)kbytes;

        if (m->payload) {
            len = m->len;
            if (KC_ARROW_UNLIKELY(len > (size_t)INT32_MAX - vbytes))
                goto overflow;
            vbytes += len;
        } else {
            nulls[KC_ARROW_COL_VALUE]++;
        }
        voff[i + 1] = (int32_t)vbytes;
    }

    /* Variable-size data (the var block) and validity bitmaps (only for columns with nulls). */
    if (kc_arrow_padded(tbytes) > SIZE_MAX / 4 - kc_arrow_padded(kbytes) - kc_arrow_padded(vbytes))
        goto overflow; /* unreachable: each is below 2 GiB */
    KC_GET_BLOCK(var, kc_arrow_padded(tbytes) + kc_arrow_padded(kbytes) + kc_arrow_padded(vbytes));
    {
        char *vcur = kc_arrow_block_data(var);
        tdata = kc_arrow_carve(&vcur, tbytes, 0);
        kdata = kc_arrow_carve(&vcur, kbytes, 0);
        vdata = kc_arrow_carve(&vcur, vbytes, 0);
    }
    bufs[KC_ARROW_COL_TOPIC][2] = tdata;
    bufs[KC_ARROW_COL_KEY][2] = kdata;
    bufs[KC_ARROW_COL_VALUE][2] = vdata;
    if (nulls[KC_ARROW_COL_TOPIC]) {
        tbm = kc_arrow_carve(&cur, bm_bytes, 1);
        bufs[KC_ARROW_COL_TOPIC][0] = tbm;
    }
    if (nulls[KC_ARROW_COL_TIMESTAMP]) {
        tsbm = kc_arrow_carve(&cur, bm_bytes, 1);
        bufs[KC_ARROW_COL_TIMESTAMP][0] = tsbm;
        for (i = 0; i < n; i++)
            if (ts[i] != -1)
                KC_ARROW_SET_BIT(tsbm, i);
    }
    if (nulls[KC_ARROW_COL_KEY]) {
        kbm = kc_arrow_carve(&cur, bm_bytes, 1);
        bufs[KC_ARROW_COL_KEY][0] = kbm;
    }
    if (nulls[KC_ARROW_COL_VALUE]) {
        vbm = kc_arrow_carve(&cur, bm_bytes, 1);
        bufs[KC_ARROW_COL_VALUE][0] = vbm;
    }

    /* Pass 2: copy bytes.  Lengths come from the pass-1 offsets, so the copies can
     * never exceed the buffers even if a message were modified in between. */
    last_rkt = NULL;
    tname = NULL;
    for (i = 0; i < n && i < KC_ARROW_PREFETCH_AHEAD; i++)
        kc_prefetch_value(msgs[i]);
    for (i = 0; i < n; i++) {
        const rd_kafka_message_t *m = msgs[i];
        size_t len;

        if (i + KC_ARROW_PREFETCH_AHEAD < n)
            kc_prefetch_value(msgs[i + KC_ARROW_PREFETCH_AHEAD]);

        if (m->rkt != last_rkt) {
            last_rkt = m->rkt;
            tname = last_rkt ? rd_kafka_topic_name(last_rkt) : NULL;
        }
        if (KC_ARROW_LIKELY(tname != NULL)) {
            len = (size_t)(toff[i + 1] - toff[i]);
            if (len)
                memcpy(tdata + toff[i], tname, len);
            if (tbm)
                KC_ARROW_SET_BIT(tbm, i);
        }
        if (m->key) {
            len = (size_t)(koff[i + 1] - koff[i]);
            if (len)
                memcpy(kdata + koff[i], m->key, len);
            if (kbm)
                KC_ARROW_SET_BIT(kbm, i);
        }
        if (m->payload) {
            len = (size_t)(voff[i + 1] - voff[i]);
            if (len)
                memcpy(vdata + voff[i], m->payload, len);
            if (vbm)
                KC_ARROW_SET_BIT(vbm, i);
        }
    }

    /* Assemble the exported structs (cannot fail from here on).  References: the fixed block one
     * for the parent array, one per child, one for the schema; the var block one per
     * string/binary child. */
    atomic_store_explicit(&fixed->refs, ncols + 2, memory_order_relaxed);
    atomic_store_explicit(&var->refs, 3, memory_order_relaxed);
    bp->fixed = fixed;
    sp->fixed = fixed;
    for (c = 0; c < ncols; c++) {
        struct ArrowArray *a = &bp->children[c];
        struct ArrowSchema *s = &sp->children[c];
        kc_arrow_col_priv *colp = &bp->cols[c];
        const int is_var = c == KC_ARROW_COL_TOPIC || c == KC_ARROW_COL_KEY || c == KC_ARROW_COL_VALUE;

        for (b = 0; b < KC_ARROW_MAX_BUFS; b++)
            colp->buffers[b] = bufs[c][b];
        colp->fixed = fixed;
        colp->var = is_var ? var : NULL;
        a->length = (int64_t)n;
        a->null_count = nulls[c];
        a->offset = 0;
        a->n_buffers = is_var ? 3 : 2;
        a->n_children = 0;
        a->buffers = colp->buffers;
        a->children = NULL;
        a->dictionary = NULL;
        a->release = kc_arrow_col_release;
        a->private_data = colp;
        bp->child_ptrs[c] = a;

        s->format = kc_arrow_col_formats[c];
        s->name = kc_arrow_col_names[c];
        s->metadata = NULL;
        s->flags = kc_arrow_col_flags[c];
        s->n_children = 0;
        s->children = NULL;
        s->dictionary = NULL;
        s->release = kc_arrow_schema_child_release;
        s->private_data = NULL;
        sp->child_ptrs[c] = s;
    }

    bp->buffers[0] = NULL; /* the struct level has no nulls */
    array_out->length = (int64_t)n;
    array_out->null_count = 0;
    array_out->offset = 0;
    array_out->n_buffers = 1;
    array_out->n_children = ncols;
    array_out->buffers = bp->buffers;
    array_out->children = bp->child_ptrs;
    array_out->dictionary = NULL;
    array_out->private_data = bp;
    array_out->release = kc_arrow_batch_release;

    schema_out->format = "+s";
    schema_out->name = "";
    schema_out->metadata = NULL;
    schema_out->flags = 0;
    schema_out->n_children = ncols;
    schema_out->children = sp->child_ptrs;
    schema_out->dictionary = NULL;
    schema_out->private_data = sp;
    schema_out->release = kc_arrow_schema_release;
    return 0;

overflow:
    err = EOVERFLOW;
    snprintf(msg, sizeof(msg),
             "kc_arrow_build: a string/binary column exceeds %d bytes (int32 offsets) at "
             "message %zu; build smaller batches",
             INT32_MAX, i);
    /* fall through */
done:
#undef KC_GET_BLOCK
    if (fixed)
        kc_arrow_block_put(fixed);
    if (var)
        kc_arrow_block_put(var);
    return kc_arrow_fail(err ? err : EINVAL, errbuf, errlen, "%s", msg[0] ? msg : "kc_arrow_build failed");
}
