# librdkafka's OAUTHBEARER token refresh callback, for a Python oauth_cb (kipconsumer/_oauth.py);
# included by _consumer.pyx and _producer.pyx. Served on librdkafka's background thread
# (rd_kafka_sasl_background_callbacks_enable), so it works before the first poll() or send().

from kipconsumer._oauth import failure_text as _oauth_failure_text
from kipconsumer._oauth import register as _oauth_register
from kipconsumer._oauth import token_for as _oauth_token_for
from kipconsumer._oauth import unregister as _oauth_unregister


cdef void _oauth_refresh_cb(rd_kafka_t *rk, const char *config, void *opaque) noexcept with gil:
    cdef char errstr[512]
    cdef const char **ext = NULL
    cdef size_t i, n = 0
    try:
        got = _oauth_token_for(<size_t>rk, config.decode(errors="replace") if config != NULL else "")
        if got is None:
            return
        token, expiry_ms, principal, flat = got
        n = len(flat)
        if n:
            ext = <const char **>malloc(n * sizeof(char *))
            for i in range(n):
                ext[i] = <const char *>(<bytes>flat[i])
        if rd_kafka_oauthbearer_set_token(rk, token, expiry_ms, principal, ext, n, errstr,
                                          sizeof(errstr)) != 0:
            rd_kafka_oauthbearer_set_token_failure(rk, errstr)
    except BaseException as exc:  # the provider's failure: librdkafka reports it as _AUTHENTICATION
        try:
            rd_kafka_oauthbearer_set_token_failure(rk, _oauth_failure_text(exc))
        except BaseException:
            rd_kafka_oauthbearer_set_token_failure(rk, b"oauth_cb failed")
    finally:
        free(ext)


cdef int _oauth_install(rd_kafka_conf_t *conf, object oauth_cb) except -1:
    """Before rd_kafka_new(): route token refreshes to _oauth_refresh_cb on the SASL queue."""
    if oauth_cb is not None:
        rd_kafka_conf_set_oauthbearer_token_refresh_cb(conf, _oauth_refresh_cb)
        rd_kafka_conf_enable_sasl_queue(conf, 1)
    return 0


cdef int _oauth_start(rd_kafka_t *rk, object oauth_cb) except -1:
    """After rd_kafka_new(): register the provider and serve refreshes in the background."""
    cdef rd_kafka_error_t *error
    if oauth_cb is None:
        return 0
    _oauth_register(<size_t>rk, oauth_cb)
    error = rd_kafka_sasl_background_callbacks_enable(rk)
    if error != NULL:
        msg = rd_kafka_error_string(error).decode(errors="replace")
        rd_kafka_error_destroy(error)
        _oauth_unregister(<size_t>rk)
        raise KafkaError(f"oauth_cb: cannot serve token refreshes in the background: {msg}")
    return 0


cdef void _oauth_stop(rd_kafka_t *rk) noexcept:
    """Before rd_kafka_destroy(): forget the handle's provider (a refresh still served meanwhile gets
    no token, which does not matter while the client closes). Harmless without one."""
    if rk == NULL:
        return
    try:
        _oauth_unregister(<size_t>rk)
    except BaseException:
        pass
