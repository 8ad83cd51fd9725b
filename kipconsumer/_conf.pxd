# A librdkafka configuration object from a kipconsumer settings dict (config.py's `rdkafka`): the one
# place the consumers turn validated settings into rd_kafka_conf_set() calls.
from kipconsumer._cstr cimport c_string
from kipconsumer._rdk cimport (RD_KAFKA_CONF_OK, rd_kafka_conf_destroy, rd_kafka_conf_new,
                               rd_kafka_conf_set, rd_kafka_conf_t)


cdef inline rd_kafka_conf_t *conf_from_dict(dict rdkafka) except NULL:
    """A new rd_kafka_conf_t with every key of ``rdkafka`` set (values as str); ConfigError naming the
    key if one is not a C string or librdkafka refuses it (the conf is then destroyed)."""
    from kipconsumer.errors import ConfigError
    cdef char errstr[512]
    cdef rd_kafka_conf_t *conf = rd_kafka_conf_new()
    cdef bytes bkey, bvalue
    for key, value in rdkafka.items():
        try:
            bkey = c_string(key, "configuration key", ConfigError)
            bvalue = c_string(str(value), f"configuration {key!r}: the value", ConfigError, False)
        except BaseException:
            rd_kafka_conf_destroy(conf)
            raise
        if rd_kafka_conf_set(conf, bkey, bvalue, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK:
            rd_kafka_conf_destroy(conf)
            raise ConfigError(f"librdkafka rejected {key!r}: {errstr.decode(errors='replace')}")
    return conf
