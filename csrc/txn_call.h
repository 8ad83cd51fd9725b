/* txn_call: one librdkafka transactional call on a helper thread, so that its caller's wait is bounded.
 *
 * librdkafka 2.16's transactional calls can block past their timeout (rd_kafka_txn_op_req0 waits
 * for its own thread's reply without one; the incident: docs/reliability.md).
 * kc_txn_call_start() makes the call on a detached thread; the caller waits with kc_txn_call_wait()
 * up to its own deadline and either takes the result (kc_txn_call_finish) or keeps the call
 * pending. A pending call keeps its rd_kafka_t alive: the owner hands the handle's destruction to
 * it with kc_txn_call_release(), which runs it once the call returned (on the helper thread, or at
 * once if it already has). */
#ifndef KC_TXN_CALL_H
#define KC_TXN_CALL_H

#include <stdint.h>
#include "rdk.h"

enum { KC_TXN_INIT = 0, KC_TXN_SEND_OFFSETS = 2, KC_TXN_COMMIT = 3, KC_TXN_ABORT = 4 };

typedef struct kc_txn_call_s kc_txn_call_t;

/* Starts `op` (KC_TXN_*) with librdkafka's `timeout_ms`. Takes ownership of `offsets` and `cgmd`
 * (KC_TXN_SEND_OFFSETS; else NULL). NULL if the thread could not be created (nothing was called;
 * `offsets` and `cgmd` are destroyed). */
kc_txn_call_t *kc_txn_call_start(rd_kafka_t *rk, int op, rd_kafka_topic_partition_list_t *offsets,
                                 rd_kafka_consumer_group_metadata_t *cgmd, int timeout_ms);

/* Waits until the call returned (1) or until `until_us` on kc_now_us()'s clock (clock.h) (0). */
int kc_txn_call_wait(kc_txn_call_t *c, int64_t until_us);

/* The op of the call. */
int kc_txn_call_op(const kc_txn_call_t *c);

/* The result of a call that returned (kc_txn_call_wait() gave 1): librdkafka's error or NULL;
 * frees the call. */
rd_kafka_error_t *kc_txn_call_finish(kc_txn_call_t *c);

/* Gives the call up: `release(arg)` (may be NULL) runs once it returned, then the call and its
 * result are freed. Runs on the helper thread, or on this one if the call returned already. */
void kc_txn_call_release(kc_txn_call_t *c, void (*release)(void *), void *arg);

/* Test hook (tests/test_producer_txn_bounded.py): every call started afterwards holds its result
 * for `ms` more milliseconds after librdkafka returned, as the blocked call did. 0: off. */
void kc_txn_call_set_test_hold_ms(int ms);

#endif
