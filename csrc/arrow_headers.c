/* The headers column (see arrow_headers.h). Two passes over the messages: the first counts headers
 * and bytes and fills the offsets, the second copies names and values; four array nodes, each a
 * kc_hdr_node owning its buffers, and one schema block with static strings. */
#include "arrow_headers.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KC_HDR_ALIGN 64

typedef struct kc_hdr_node {
    const void *buffers[3];
    struct ArrowArray *child_ptrs[2];
    struct ArrowArray children[2];
} kc_hdr_node;

typedef struct kc_hdr_schema {
    struct ArrowSchema item, key, value;
    struct ArrowSchema *list_children[1];
    struct ArrowSchema *item_children[2];
} kc_hdr_schema;

/* 64-byte aligned, zeroed, at least 1 byte (Arrow buffers may be read up to their padding). */
static void *kc_hdr_alloc(size_t size) {
    void *p = NULL;
    size_t padded;

    if (size > SIZE_MAX - KC_HDR_ALIGN)
        return NULL;
    padded = ((size ? size : 1) + (KC_HDR_ALIGN - 1)) & ~(size_t)(KC_HDR_ALIGN - 1);
    if (posix_memalign(&p, KC_HDR_ALIGN, padded) != 0)
        return NULL;
    memset(p, 0, padded);
    return p;
}

static void kc_hdr_release(struct ArrowArray *a) {
    kc_hdr_node *node;
    int64_t i;

    if (!a || !a->release)
        return;
    for (i = 0; i < a->n_children; i++)
        if (a->children[i] && a->children[i]->release)
            a->children[i]->release(a->children[i]);
    node = (kc_hdr_node *)a->private_data;
    if (node) {
        for (i = 0; i < 3; i++)
            free((void *)node->buffers[i]);
        free(node);
    }
    a->private_data = NULL;
    a->release = NULL;
}

static void kc_hdr_schema_child_release(struct ArrowSchema *s) {
    if (s)
        s->release = NULL; /* static strings; the block belongs to the root */
}

static void kc_hdr_schema_release(struct ArrowSchema *s) {
    if (!s || !s->release)
        return;
    free(s->private_data);
    s->private_data = NULL;
    s->release = NULL;
}

static void kc_hdr_schema_set(struct ArrowSchema *s, const char *format, const char *name, int64_t n_children,
                              struct ArrowSchema **children, void (*release)(struct ArrowSchema *)) {
    s->format = format;
    s->name = name;
    s->metadata = NULL;
    s->flags = ARROW_FLAG_NULLABLE;
    s->n_children = n_children;
    s->children = children;
    s->dictionary = NULL;
    s->release = release;
    s->private_data = NULL;
}

/* Fills `a` (length, nulls, n_buffers, children) as the owner of `node`. */
static void kc_hdr_array_set(struct ArrowArray *a, kc_hdr_node *node, int64_t length, int64_t nulls,
                             int64_t n_buffers, int64_t n_children) {
    int64_t i;

    a->length = length;
    a->null_count = nulls;
    a->offset = 0;
    a->n_buffers = n_buffers;
    a->n_children = n_children;
    a->buffers = node->buffers;
    for (i = 0; i < n_children; i++)
        node->child_ptrs[i] = &node->children[i];
    a->children = n_children ? node->child_ptrs : NULL;
    a->dictionary = NULL;
    a->release = kc_hdr_release;
    a->private_data = node;
}

static int kc_hdr_fail(int err, char *errbuf, size_t errlen, const char *what, size_t at) {
    if (errbuf && errlen > 0)
        snprintf(errbuf, errlen, "kc_arrow_build_headers: %s (message %zu)", what, at);
    errno = err;
    return -1;
}

#define KC_HDR_SET_BIT(bm, i) ((bm)[(i) >> 3] |= (uint8_t)(1u << ((i) & 7)))

/* One header of a message: name (never NULL here) and its length, value (NULL: a null value). */
typedef struct kc_hdr {
    const char *name;
    size_t nlen;
    const void *val;
    size_t size;
} kc_hdr;

/* The message's headers and their count (0 when it has none). */
static size_t kc_hdr_count(const rd_kafka_message_t *m, rd_kafka_headers_t **hdrs) {
    *hdrs = NULL;
    if (rd_kafka_message_headers(m, hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR || !*hdrs)
        return 0;
    return rd_kafka_header_cnt(*hdrs);
}

/* Header `idx` of `hdrs` into `out`; 0, or -1 when librdkafka has no such header. */
static int kc_hdr_at(const rd_kafka_headers_t *hdrs, size_t idx, kc_hdr *out) {
    out->name = NULL;
    out->val = NULL;
    out->size = 0;
    if (rd_kafka_header_get_all(hdrs, idx, &out->name, &out->val, &out->size) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
    if (!out->name)
        out->name = "";
    out->nlen = strlen(out->name);
    return 0;
}

int kc_arrow_build_headers(rd_kafka_message_t *const *msgs, size_t n, struct ArrowSchema *schema_out,
                           struct ArrowArray *array_out, char *errbuf, size_t errlen) {
    kc_hdr_node *list = NULL, *item = NULL, *key = NULL, *value = NULL;
    kc_hdr_schema *sp = NULL;
    int32_t *loff = NULL, *koff = NULL, *voff = NULL;
    uint8_t *lbm = NULL, *vbm = NULL, *kdata = NULL, *vdata = NULL;
    size_t total = 0, kbytes = 0, vbytes = 0, null_rows = 0, null_values = 0, i, j, h;
    int err = ENOMEM;
    const char *what = "out of memory";

    if (schema_out)
        schema_out->release = NULL;
    if (array_out)
        array_out->release = NULL;
    if (!schema_out || !array_out || (n > 0 && !msgs))
        return kc_hdr_fail(EINVAL, errbuf, errlen, "schema_out, array_out and msgs are required", 0);
    if (n > (size_t)INT32_MAX - 1)
        return kc_hdr_fail(EOVERFLOW, errbuf, errlen, "too many messages", n);

    /* Pass 1: header counts and bytes. */
    for (i = 0; i < n; i++) {
        rd_kafka_headers_t *hdrs;
        size_t cnt;
        kc_hdr hd;

        if (!msgs[i] || msgs[i]->err)
            return kc_hdr_fail(EINVAL, errbuf, errlen, "a NULL or error message", i);
        if ((cnt = kc_hdr_count(msgs[i], &hdrs)) == 0) {
            null_rows++;
            continue;
        }
        for (h = 0; h < cnt && kc_hdr_at(hdrs, h, &hd) == 0; h++) {
            if (hd.nlen > (size_t)INT32_MAX - kbytes || hd.size > (size_t)INT32_MAX - vbytes ||
                total >= (size_t)INT32_MAX - 1)
                return kc_hdr_fail(EOVERFLOW, errbuf, errlen, "headers exceed int32 offsets", i);
            kbytes += hd.nlen;
            if (hd.val)
                vbytes += hd.size;
            else
                null_values++;
            total++;
        }
    }

    if (!(list = kc_hdr_alloc(sizeof(*list))) || !(item = kc_hdr_alloc(sizeof(*item))) ||
        !(key = kc_hdr_alloc(sizeof(*key))) || !(value = kc_hdr_alloc(sizeof(*value))) ||
        !(sp = kc_hdr_alloc(sizeof(*sp))) || !(loff = kc_hdr_alloc((n + 1) * sizeof(int32_t))) ||
        !(koff = kc_hdr_alloc((total + 1) * sizeof(int32_t))) ||
        !(voff = kc_hdr_alloc((total + 1) * sizeof(int32_t))) || !(kdata = kc_hdr_alloc(kbytes)) ||
        !(vdata = kc_hdr_alloc(vbytes)) || (null_rows && !(lbm = kc_hdr_alloc((n + 7) / 8))) ||
        (null_values && !(vbm = kc_hdr_alloc((total + 7) / 8))))
        goto fail;

    /* Pass 2: offsets, bytes, validity. Sizes are bounded by pass 1's totals. */
    j = 0;
    kbytes = vbytes = 0;
    for (i = 0; i < n; i++) {
        rd_kafka_headers_t *hdrs;
        size_t cnt = kc_hdr_count(msgs[i], &hdrs);
        kc_hdr hd;

        if (cnt && lbm)
            KC_HDR_SET_BIT(lbm, i);
        for (h = 0; h < cnt && j < total && kc_hdr_at(hdrs, h, &hd) == 0; h++) {
            memcpy(kdata + kbytes, hd.name, hd.nlen);
            kbytes += hd.nlen;
            if (hd.val) {
                memcpy(vdata + vbytes, hd.val, hd.size);
                vbytes += hd.size;
                if (vbm)
                    KC_HDR_SET_BIT(vbm, j);
            }
            j++;
            koff[j] = (int32_t)kbytes;
            voff[j] = (int32_t)vbytes;
        }
        loff[i + 1] = (int32_t)j;
    }
    if (j != total) {
        err = EINVAL;
        what = "headers changed between the two passes";
        goto fail;
    }

    key->buffers[1] = koff;
    key->buffers[2] = kdata;
    value->buffers[0] = vbm;
    value->buffers[1] = voff;
    value->buffers[2] = vdata;
    list->buffers[0] = lbm;
    list->buffers[1] = loff;
    /* the key and value nodes live in the struct node's children; the struct in the list's */
    kc_hdr_array_set(&item->children[0], key, (int64_t)total, 0, 3, 0);
    kc_hdr_array_set(&item->children[1], value, (int64_t)total, (int64_t)null_values, 3, 0);
    kc_hdr_array_set(&list->children[0], item, (int64_t)total, 0, 1, 2);
    kc_hdr_array_set(array_out, list, (int64_t)n, (int64_t)null_rows, 2, 1);

    sp->list_children[0] = &sp->item;
    sp->item_children[0] = &sp->key;
    sp->item_children[1] = &sp->value;
    kc_hdr_schema_set(&sp->key, "u", "key", 0, NULL, kc_hdr_schema_child_release);
    kc_hdr_schema_set(&sp->value, "z", "value", 0, NULL, kc_hdr_schema_child_release);
    kc_hdr_schema_set(&sp->item, "+s", "item", 2, sp->item_children, kc_hdr_schema_child_release);
    kc_hdr_schema_set(schema_out, "+l", "headers", 1, sp->list_children, kc_hdr_schema_release);
    schema_out->private_data = sp;
    return 0;

fail:
    free(loff);
    free(koff);
    free(voff);
    free(lbm);
    free(vbm);
    free(kdata);
    free(vdata);
    free(list);
    free(item);
    free(key);
    free(value);
    free(sp);
    return kc_hdr_fail(err, errbuf, errlen, what, 0);
}
