/* Arrow record batches built in C from librdkafka messages.
 *
 * The result is exported through the Arrow C Data Interface
 * (https://arrow.apache.org/docs/format/CDataInterface.html): a struct-typed
 * array ("+s") whose children are the columns, which pyarrow imports directly as
 * a RecordBatch (pyarrow.RecordBatch._import_from_c(array_ptr, schema_ptr)).
 *
 * Pure C: no Python API, so it may be called with the GIL released.
 * See docs/arrow.md for columns, null rules, ownership and performance notes. */
#ifndef KC_ARROW_BATCH_H
#define KC_ARROW_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "rdk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Arrow C Data Interface ABI (declared from the public specification). ---- */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE           2
#define ARROW_FLAG_MAP_KEYS_SORTED    4

struct ArrowSchema {
    /* Array type description */
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;

    /* Release callback */
    void (*release)(struct ArrowSchema *);
    /* Opaque producer-specific data */
    void *private_data;
};

struct ArrowArray {
    /* Array data description */
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;

    /* Release callback */
    void (*release)(struct ArrowArray *);
    /* Opaque producer-specific data */
    void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

/* ---- kipconsumer batch builder ---- */

/* flags */
#define KC_ARROW_WITH_TIMESTAMP_TYPE 1 /* adds a 7th column timestamp_type int32 */
#define KC_ARROW_ALL_FLAGS           (KC_ARROW_WITH_TIMESTAMP_TYPE)

/* Column indexes (children of the struct array / schema). */
enum {
    KC_ARROW_COL_TOPIC = 0,     /* utf8           "u"    */
    KC_ARROW_COL_PARTITION,     /* int32          "i"    */
    KC_ARROW_COL_OFFSET,        /* int64          "l"    */
    KC_ARROW_COL_TIMESTAMP,     /* timestamp[ms]  "tsm:" */
    KC_ARROW_COL_KEY,           /* binary         "z"    */
    KC_ARROW_COL_VALUE,         /* binary         "z"    */
    KC_ARROW_COL_TIMESTAMP_TYPE /* int32          "i"    (only with KC_ARROW_WITH_TIMESTAMP_TYPE) */
};

/* Build a struct array of length n (one row per message) and its schema.
 *
 * msgs:   n consumed messages.  PRECONDITION: every msgs[i]->err == 0 -- the
 *         caller must reject/handle error messages (and partition EOF events)
 *         before calling.  As a safety net a message with err != 0 makes the call
 *         fail with EINVAL instead of exporting an error string as a value.
 *         The messages are only read; they may be destroyed as soon as the call
 *         returns (all bytes are copied).
 * flags:  0 or KC_ARROW_WITH_TIMESTAMP_TYPE; unknown bits -> EINVAL.
 * schema_out, array_out: caller-provided structs, filled on success; the caller
 *         owns them and must call their release callbacks (or hand them to a
 *         consumer such as pyarrow that does).
 * errbuf/errlen: optional (may be NULL/0); receives a message on error.
 *
 * Timestamps are read with rd_kafka_message_timestamp(), which reads librdkafka's
 * private rd_kafka_msg_t that a *consumed* message is embedded in.  It must
 * therefore only be used with messages returned by librdkafka; for messages that
 * were not (e.g. hand-made ones in tests), use kc_arrow_build_ex() with explicit
 * timestamps.
 *
 * Returns 0 on success, -1 on error (errno set: EINVAL, ENOMEM, EOVERFLOW when a
 * string/binary column would exceed 2 GiB - 1 bytes, the limit of int32 offsets).
 * On error nothing stays allocated (blocks taken go back to the pool) and
 * schema_out->release / array_out->release are set to NULL (when the pointers are non-NULL).
 *
 * Thread-safety: reentrant (the block pool is locked); does not need the GIL. */
int kc_arrow_build(rd_kafka_message_t *const *msgs, size_t n, int flags, struct ArrowSchema *schema_out,
                   struct ArrowArray *array_out, char *errbuf, size_t errlen);

/* Same as kc_arrow_build(), with optional parallel timestamp arrays.
 *
 * timestamps: NULL -> use rd_kafka_message_timestamp(msgs[i], &type) (librdkafka
 *             messages only); else n values in ms since the epoch, -1 = not available.
 * ts_types:   NULL -> derived: 0 (not available) when the timestamp is -1, else
 *             1 (create time); else n rd_kafka_timestamp_type_t values
 *             (0 not available, 1 create time, 2 log-append time).
 *             Ignored when timestamps is NULL.
 * A row's timestamp is null when its value is -1 or its type is 0 (not available). */
int kc_arrow_build_ex(rd_kafka_message_t *const *msgs, size_t n, int flags, const int64_t *timestamps,
                      const int32_t *ts_types, struct ArrowSchema *schema_out, struct ArrowArray *array_out,
                      char *errbuf, size_t errlen);

/* The column buffers of a batch live in two blocks that return to a process-wide pool when the
 * last of the batch's arrays (parent, moved-out children, schema) is released, and the next
 * batch reuses them (see arrow_batch.c).  The pool keeps at most 8 blocks and
 * KC_ARROW_POOL_MAX_BYTES bytes (freeing the oldest beyond either); a block larger than that is
 * freed, never pooled.  Thread-safe: a batch may be released on any thread. */
#define KC_ARROW_POOL_MAX_BYTES ((size_t)8 << 20)

/* Frees every pooled block; returns how many were freed. */
size_t kc_arrow_pool_trim(void);

/* How many blocks and bytes (capacity) the pool holds now; either pointer may be NULL. */
void kc_arrow_pool_stats(size_t *blocks, size_t *bytes);

/* TESTING ONLY: when non-NULL every allocation made by kc_arrow_build* goes through
 * this function instead of posix_memalign(); it must return memory that free()
 * accepts, or NULL to simulate an allocation failure.  Not thread-safe to change
 * while builds run; production code never sets it. */
extern void *(*kc_arrow_alloc_hook)(size_t alignment, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* KC_ARROW_BATCH_H */
