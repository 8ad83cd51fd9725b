/* security_markers: the one list of texts that mark a librdkafka transport error as a failed TLS or
 * SASL handshake (an authentication failure, not a broker that went away).
 *
 * Read by the producer core (kc_producer_is_auth_failure) and, through kipconsumer._native, by
 * kipconsumer/_security_errors.py for the consumer, the share consumer and the admin paths. Not
 * "SASL authentication" alone: librdkafka appends "broker might require SASL authentication" to any
 * drop of a PLAINTEXT/SSL connection within 2 s of its start, e.g. a broker killed or restarting. */
#ifndef KC_SECURITY_MARKERS_H
#define KC_SECURITY_MARKERS_H

#include <string.h>

static inline int kc_is_handshake_failure_text(const char *reason) {
    static const char *const markers[] = {"SSL handshake",
                                          "SSL_HANDSHAKE",
                                          "SSL alert number",
                                          "SASL authentication error",
                                          "Failed to initialize SASL authentication",
                                          "AUTH_HANDSHAKE",
                                          "AUTH_REQ"};
    size_t i;
    if (!reason)
        return 0;
    for (i = 0; i < sizeof(markers) / sizeof(markers[0]); i++)
        if (strstr(reason, markers[i]))
            return 1;
    return 0;
}

#endif
