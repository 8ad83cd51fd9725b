/* The headers of librdkafka messages as one Arrow column, built in C.
 *
 * Type: list<item: struct<key: utf8, value: binary>>, one row per message; a row is null when the
 * message has no headers (as Spark's Kafka source); a header value is null when it was produced
 * as NULL. Exported through the Arrow C Data Interface (see arrow_batch.h for the ABI structs), a
 * column that kc_arrow_build()'s batch is extended with (ConsumerRecords.to_arrow(headers=True)).
 *
 * Pure C, no Python API: may be called without the GIL. Reentrant, no global state. Every array
 * node (list, struct, key, value) owns its buffers, so a child moved out stays valid. */
#ifndef KC_ARROW_HEADERS_H
#define KC_ARROW_HEADERS_H

#include "arrow_batch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Builds the headers column of n consumed messages (every msgs[i]->err == 0) into the caller's
 * schema_out / array_out (the caller owns them and calls their release callbacks).
 * Returns 0, or -1 with errno (EINVAL, ENOMEM, EOVERFLOW past 2 GiB - 1 bytes of keys or values
 * or INT32_MAX headers) and a message in errbuf; on error both release callbacks are NULL. */
int kc_arrow_build_headers(rd_kafka_message_t *const *msgs, size_t n, struct ArrowSchema *schema_out,
                           struct ArrowArray *array_out, char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* KC_ARROW_HEADERS_H */
