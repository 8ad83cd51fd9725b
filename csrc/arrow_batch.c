/* Arrow record batches built in C from librdkafka messages (see arrow_batch.h,
 * docs/arrow.md).
 *
 * Layout of what is exported:
 *   - the top-level struct array owns one private block holding its buffers[1]
 *     (validity: always NULL, the struct level has no nulls), the children
 *     pointer array and the child ArrowArray structs themselves;
 *   - every child (column) owns a separately allocated private block holding its
 *     buffers[] pointer array, and its buffers, each one posix_memalign'ed (64 B)
 *     block padded to a multiple of 64 bytes with zeroed padding.  A child moved
 *     out of the parent (struct copied, original's release set to NULL) therefore
 *     stays valid after the parent is released;
 *   - the schema owns one private block with its child ArrowSchema structs; all
 *     strings (format, name) are static, so moved schema children stay valid too.
 *
 * Two passes over the messages: pass 1 fills the fixed-width columns and the
 * offsets buffers and counts bytes/nulls; pass 2 copies topic/key/value bytes
 * (memcpy) and fills validity bitmaps of the columns that have nulls.  No
 * per-record allocation; about 2 + 2 * columns allocations per batch. */
#include "arrow_batch.h"

#include <errno.h>
#include <limits.h>
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

/* ------------------------------------------------------------------ allocation */

static size_t kc_arrow_padded(size_t size) {
    if (size == 0)
        size = 1;
    return (size + (KC_ARROW_ALIGN - 1)) & ~(size_t)(KC_ARROW_ALIGN - 1);
}

/* 64-byte aligned block of at least `size` bytes, padded to a multiple of 64;
 * the padding (and everything when `zero`) is zeroed.  NULL on failure. */
static void *kc_arrow_alloc(size_t size, int zero) {
    size_t padded;
    void *p = NULL;

    if (size > SIZE_MAX - KC_ARROW_ALIGN)
        return NULL;
    padded = kc_arrow_padded(size);
    if (KC_ARROW_UNLIKELY(kc_arrow_alloc_hook != NULL)) {
        p = kc_arrow_alloc_hook(KC_ARROW_ALIGN, padded);
        if (!p)
            return NULL;
    } else if (posix_memalign(&p, KC_ARROW_ALIGN, padded) != 0) {
        return NULL;
    }
    if (zero)
        memset(p, 0, padded);
    else
        memset((char *)p + size, 0, padded - size);
    return p;
}

/* ------------------------------------------------------------------ release */

typedef struct kc_arrow_col_priv {
    const void *buffers[KC_ARROW_MAX_BUFS];
} kc_arrow_col_priv;

typedef struct kc_arrow_batch_priv {
    const void *buffers[1];
    struct ArrowArray *child_ptrs[KC_ARROW_MAX_COLS];
    struct ArrowArray children[KC_ARROW_MAX_COLS];
} kc_arrow_batch_priv;

typedef struct kc_arrow_schema_priv {
    struct ArrowSchema *child_ptrs[KC_ARROW_MAX_COLS];
    struct ArrowSchema children[KC_ARROW_MAX_COLS];
} kc_arrow_schema_priv;

static void kc_arrow_col_release(struct ArrowArray *a) {
    kc_arrow_col_priv *p;
    int i;

    if (!a || !a->release)
        return;
    p = (kc_arrow_col_priv *)a->private_data;
    if (p) {
        for (i = 0; i < KC_ARROW_MAX_BUFS; i++)
            free((void *)p->buffers[i]);
        free(p);
    }
    a->private_data = NULL;
    a->release = NULL;
}

static void kc_arrow_batch_release(struct ArrowArray *a) {
    int64_t i;

    if (!a || !a->release)
        return;
    /* Children may have been moved out (their release is then NULL here). */
    for (i = 0; i < a->n_children; i++) {
        struct ArrowArray *c = a->children[i];
        if (c && c->release)
            c->release(c);
    }
    free(a->private_data);
    a->private_data = NULL;
    a->release = NULL;
}

static void kc_arrow_schema_child_release(struct ArrowSchema *s) {
    /* Static strings, no children, nothing owned. */
    if (s)
        s->release = NULL;
}

static void kc_arrow_schema_release(struct ArrowSchema *s) {
    int64_t i;

    if (!s || !s->release)
        return;
    for (i = 0; i < s->n_children; i++) {
        struct ArrowSchema *c = s->children[i];
        if (c && c->release)
            c->release(c);
    }
    free(s->private_data);
    s->private_data = NULL;
    s->release = NULL;
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
    kc_arrow_col_priv *colp[KC_ARROW_MAX_COLS];
    int64_t nulls[KC_ARROW_MAX_COLS];
    kc_arrow_batch_priv *bp = NULL;
    kc_arrow_schema_priv *sp = NULL;
    int32_t *partition, *toff, *koff, *voff, *tstype = NULL;
    int64_t *offset, *ts;
    uint8_t *tdata, *kdata, *vdata, *tbm = NULL, *kbm = NULL, *vbm = NULL, *tsbm = NULL;
    size_t tbytes = 0, kbytes = 0, vbytes = 0, bm_bytes, i;
    const rd_kafka_topic_t *last_rkt = NULL;
    const char *tname = NULL;
    size_t tname_len = 0;
    int c, b, rc = -1, err = 0;
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
    memset(colp, 0, sizeof(colp));
    memset(nulls, 0, sizeof(nulls));

#define KC_ALLOC(dst, size, zero)                                                                            \
    do {                                                                                                     \
        if (!((dst) = kc_arrow_alloc((size), (zero)))) {                                                     \
            err = ENOMEM;                                                                                    \
            snprintf(msg, sizeof(msg), "kc_arrow_build: out of memory allocating %zu bytes",                 \
                     (size_t)(size));                                                                        \
            goto done;                                                                                       \
        }                                                                                                    \
    } while (0)

    KC_ALLOC(sp, sizeof(*sp), 1);
    KC_ALLOC(bp, sizeof(*bp), 1);
    for (c = 0; c < ncols; c++)
        KC_ALLOC(colp[c], sizeof(*colp[c]), 1);

    /* Fixed-width columns and offsets: sizes known up front. */
    KC_ALLOC(toff, (n + 1) * sizeof(int32_t), 0);
    bufs[KC_ARROW_COL_TOPIC][1] = toff;
    KC_ALLOC(partition, n * sizeof(int32_t), 0);
    bufs[KC_ARROW_COL_PARTITION][1] = partition;
    KC_ALLOC(offset, n * sizeof(int64_t), 0);
    bufs[KC_ARROW_COL_OFFSET][1] = offset;
    KC_ALLOC(ts, n * sizeof(int64_t), 0);
    bufs[KC_ARROW_COL_TIMESTAMP][1] = ts;
    KC_ALLOC(koff, (n + 1) * sizeof(int32_t), 0);
    bufs[KC_ARROW_COL_KEY][1] = koff;
    KC_ALLOC(voff, (n + 1) * sizeof(int32_t), 0);
    bufs[KC_ARROW_COL_VALUE][1] = voff;
    if (with_tstype) {
        KC_ALLOC(tstype, n * sizeof(int32_t), 0);
        bufs[KC_ARROW_COL_TIMESTAMP_TYPE][1] = tstype;
    }

    /* Pass 1: fixed-width values, offsets, byte totals, null counts. */
    toff[0] = koff[0] = voff[0] = 0;
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

    /* Variable-size data and validity bitmaps (only for columns with nulls). */
    KC_ALLOC(tdata, tbytes, 0);
    bufs[KC_ARROW_COL_TOPIC][2] = tdata;
    KC_ALLOC(kdata, kbytes, 0);
    bufs[KC_ARROW_COL_KEY][2] = kdata;
    KC_ALLOC(vdata, vbytes, 0);
    bufs[KC_ARROW_COL_VALUE][2] = vdata;
    bm_bytes = (n + 7) / 8;
    if (nulls[KC_ARROW_COL_TOPIC]) {
        KC_ALLOC(tbm, bm_bytes, 1);
        bufs[KC_ARROW_COL_TOPIC][0] = tbm;
    }
    if (nulls[KC_ARROW_COL_TIMESTAMP]) {
        KC_ALLOC(tsbm, bm_bytes, 1);
        bufs[KC_ARROW_COL_TIMESTAMP][0] = tsbm;
        for (i = 0; i < n; i++)
            if (ts[i] != -1)
                KC_ARROW_SET_BIT(tsbm, i);
    }
    if (nulls[KC_ARROW_COL_KEY]) {
        KC_ALLOC(kbm, bm_bytes, 1);
        bufs[KC_ARROW_COL_KEY][0] = kbm;
    }
    if (nulls[KC_ARROW_COL_VALUE]) {
        KC_ALLOC(vbm, bm_bytes, 1);
        bufs[KC_ARROW_COL_VALUE][0] = vbm;
    }

    /* Pass 2: copy bytes.  Lengths come from the pass-1 offsets, so the copies can
     * never exceed the buffers even if a message were modified in between. */
    last_rkt = NULL;
    tname = NULL;
    for (i = 0; i < n; i++) {
        const rd_kafka_message_t *m = msgs[i];
        size_t len;

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

    /* Assemble the exported structs (cannot fail from here on). */
    for (c = 0; c < ncols; c++) {
        struct ArrowArray *a = &bp->children[c];
        struct ArrowSchema *s = &sp->children[c];
        const int var = c == KC_ARROW_COL_TOPIC || c == KC_ARROW_COL_KEY || c == KC_ARROW_COL_VALUE;

        for (b = 0; b < KC_ARROW_MAX_BUFS; b++)
            colp[c]->buffers[b] = bufs[c][b];
        a->length = (int64_t)n;
        a->null_count = nulls[c];
        a->offset = 0;
        a->n_buffers = var ? 3 : 2;
        a->n_children = 0;
        a->buffers = colp[c]->buffers;
        a->children = NULL;
        a->dictionary = NULL;
        a->release = kc_arrow_col_release;
        a->private_data = colp[c];
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
#undef KC_ALLOC
    for (c = 0; c < KC_ARROW_MAX_COLS; c++) {
        for (b = 0; b < KC_ARROW_MAX_BUFS; b++)
            free((void *)bufs[c][b]);
        free(colp[c]);
    }
    free(bp);
    free(sp);
    if (rc != 0)
        kc_arrow_fail(err ? err : EINVAL, errbuf, errlen, "%s", msg[0] ? msg : "kc_arrow_build failed");
    return rc;
}
