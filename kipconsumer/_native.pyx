# cython: language_level=3
"""Process-wide facts about the loaded librdkafka (version, known property names, a property's check)."""

from kipconsumer._rdk cimport (rd_kafka_conf_t, rd_kafka_conf_new, rd_kafka_conf_destroy,
                               rd_kafka_conf_dump, rd_kafka_conf_dump_free, rd_kafka_conf_set,
                               rd_kafka_version,
                               rd_kafka_version_str)


cdef extern from "security_markers.h" nogil:
    int kc_is_handshake_failure_text(const char *reason)


def librdkafka_version() -> tuple:
    """Return ``(version_string, version_int)`` of the librdkafka that is actually loaded."""
    return (rd_kafka_version_str().decode(), rd_kafka_version())


def librdkafka_property_names() -> frozenset:
    """Names of every global configuration property the loaded librdkafka knows."""
    cdef rd_kafka_conf_t *conf = rd_kafka_conf_new()
    cdef size_t cnt = 0
    cdef const char **arr = rd_kafka_conf_dump(conf, &cnt)
    names = set()
    cdef size_t i = 0
    while i < cnt:
        names.add(arr[i].decode())
        i += 2
    rd_kafka_conf_dump_free(arr, cnt)
    rd_kafka_conf_destroy(conf)
    return frozenset(names)


def librdkafka_builtin_features() -> tuple:
    """The loaded librdkafka's ``builtin.features`` (compression codecs, SSL, SASL mechanisms, ...)."""
    cdef rd_kafka_conf_t *conf = rd_kafka_conf_new()
    cdef size_t cnt = 0
    cdef const char **arr = rd_kafka_conf_dump(conf, &cnt)
    features = ()
    cdef size_t i = 0
    while i + 1 < cnt:
        if arr[i] == b"builtin.features" and arr[i + 1] != NULL:
            features = tuple(f for f in arr[i + 1].decode().split(",") if f)
        i += 2
    rd_kafka_conf_dump_free(arr, cnt)
    rd_kafka_conf_destroy(conf)
    return features


def librdkafka_property_error(str name, str value):
    """What the loaded librdkafka says of ``name=value`` set on a scratch configuration: its error
    message, or None if it accepts it (nothing else is configured or kept)."""
    cdef char errstr[512]
    cdef rd_kafka_conf_t *conf = rd_kafka_conf_new()
    cdef bytes bname = name.encode()
    cdef bytes bvalue = value.encode()
    errstr[0] = 0
    try:
        rc = rd_kafka_conf_set(conf, bname, bvalue, errstr, sizeof(errstr))
    finally:
        rd_kafka_conf_destroy(conf)
    if rc == 0:
        return None
    message = errstr.decode(errors="replace")
    return message or f"error {rc}"


def is_handshake_failure_text(str detail) -> bool:
    """Whether librdkafka's transport-error text ``detail`` says the connection died inside a TLS or
    SASL handshake (csrc/security_markers.h: the one list, shared with the producer core)."""
    cdef bytes b = detail.encode("utf-8", "replace")
    return kc_is_handshake_failure_text(b) != 0
