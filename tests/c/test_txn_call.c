/* txn_call: a transactional call on its helper thread, waited for with a bound, finished or given up.
 *
 * The calls are real librdkafka calls of a transactional producer whose bootstrap address refuses
 * connections: init_transactions() returns _TIMED_OUT after its own timeout. The test hook holds a
 * call's result for longer than the caller waits, as a call blocked in librdkafka would. */
#include <string.h>
#include <unistd.h>

#include "kc_test.h"
#include "txn_call.h"
#include "clock.h"

static rd_kafka_t *new_producer(void) {
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", "127.0.0.1:1", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "transactional.id", "kc-test-txn-call", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "log_level", "0", errstr, sizeof(errstr));
    return rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
}

static void test_finish_returns_librdkafkas_result(void) {
    rd_kafka_t *rk = new_producer();
    kc_txn_call_t *c = kc_txn_call_start(rk, KC_TXN_INIT, NULL, NULL, 200);
    rd_kafka_error_t *error;
    CHECK(c != NULL);
    CHECK(kc_txn_call_op(c) == KC_TXN_INIT);
    CHECK(kc_txn_call_wait(c, kc_now_us() + 5000000));
    error = kc_txn_call_finish(c);
    CHECK_MSG(error != NULL && rd_kafka_error_code(error) == RD_KAFKA_RESP_ERR__TIMED_OUT, "%s",
              error ? rd_kafka_error_string(error) : "no error");
    if (error != NULL)
        rd_kafka_error_destroy(error);
    rd_kafka_destroy(rk);
}

static int released;

static void release_producer(void *arg) {
    rd_kafka_destroy(arg);
    released++;
}

static void test_a_held_call_is_waited_for_with_a_bound_and_released_when_it_returns(void) {
    rd_kafka_t *rk = new_producer();
    int64_t t0;
    kc_txn_call_t *c;
    kc_txn_call_set_test_hold_ms(800);
    c = kc_txn_call_start(rk, KC_TXN_INIT, NULL, NULL, 100);
    kc_txn_call_set_test_hold_ms(0);
    t0 = kc_now_us();
    CHECK(!kc_txn_call_wait(c, t0 + 300000)); /* the caller's bound, not the call's 900 ms */
    CHECK(kc_now_us() - t0 < 700000);
    released = 0;
    kc_txn_call_release(c, release_producer, rk); /* returns at once; the helper thread releases */
    CHECK(released == 0);
    for (int i = 0; i < 300 && released == 0; i++)
        usleep(10000);
    CHECK(released == 1);
}

static void test_release_of_a_returned_call_runs_at_once(void) {
    rd_kafka_t *rk = new_producer();
    kc_txn_call_t *c = kc_txn_call_start(rk, KC_TXN_INIT, NULL, NULL, 50);
    CHECK(kc_txn_call_wait(c, kc_now_us() + 5000000));
    released = 0;
    kc_txn_call_release(c, release_producer, rk);
    CHECK(released == 1);
}

int main(void) {
    run_case("finish returns librdkafka's result", test_finish_returns_librdkafkas_result);
    run_case("a held call is waited for with a bound and released when it returns",
             test_a_held_call_is_waited_for_with_a_bound_and_released_when_it_returns);
    run_case("release of a returned call runs at once", test_release_of_a_returned_call_runs_at_once);
    usleep(200000); /* the detached helper threads finish their last instructions */
    return kc_test_summary();
}
