# cython: language_level=3
"""Thin wrapper over librdkafka's mock cluster (``rd_kafka_mock_*``).

``MockCluster`` owns a private producer handle (``rd_kafka_t``, no brokers, logs silenced) and the
``rd_kafka_mock_cluster_t`` created on it.  Every C call runs without the GIL.  Argument checking that
needs Kafka knowledge (ApiKey and error names, broker ids) lives in ``kipconsumer.broker``; this module
only refuses what would be unsafe in C (NULL strings, negative counts, calls after ``destroy()``) and
turns librdkafka error codes into ``KafkaError``.
"""

from libc.stdint cimport int16_t, int32_t
from libc.stdlib cimport malloc, free

from kipconsumer._cstr cimport c_string
from kipconsumer._rdk cimport (
    rd_kafka_t, rd_kafka_conf_t, rd_kafka_mock_cluster_t, rd_kafka_resp_err_t, rd_kafka_err_desc,
    RD_KAFKA_PRODUCER, RD_KAFKA_CONF_OK, RD_KAFKA_RESP_ERR_NO_ERROR,
    rd_kafka_conf_new, rd_kafka_conf_destroy, rd_kafka_conf_set, rd_kafka_conf_set_log_cb,
    rd_kafka_new, rd_kafka_destroy, rd_kafka_err2name, rd_kafka_err2str, rd_kafka_get_err_descs,
    rd_kafka_mock_cluster_new, rd_kafka_mock_cluster_destroy, rd_kafka_mock_cluster_bootstraps,
    rd_kafka_mock_topic_create, rd_kafka_mock_partition_set_leader, rd_kafka_mock_broker_set_down,
    rd_kafka_mock_broker_set_up, rd_kafka_mock_broker_set_rtt, rd_kafka_mock_push_request_errors_array,
    rd_kafka_mock_clear_request_errors, rd_kafka_mock_coordinator_set, rd_kafka_mock_topic_set_error,
    rd_kafka_mock_group_initial_rebalance_delay_ms,
)

from kipconsumer._logring cimport drain_logs, kc_log_cb
from kipconsumer._process cimport foreign_process, this_process

from kipconsumer._fork import foreign_error
from kipconsumer.errors import ConfigError, IllegalStateError, KafkaError


def error_table():
    """Every error code the loaded librdkafka knows: list of ``(code, name, description)``.

    Names are librdkafka's enum names without the ``RD_KAFKA_RESP_ERR_`` prefix; librdkafka-internal
    errors are negative and start with an underscore (``_TRANSPORT``), broker errors are the Kafka
    protocol error codes.
    """
    cdef const rd_kafka_err_desc *descs = NULL
    cdef size_t cnt = 0
    cdef size_t i
    rd_kafka_get_err_descs(&descs, &cnt)
    out = []
    for i in range(cnt):
        if descs[i].name == NULL:
            continue
        desc = descs[i].desc.decode("utf-8", "replace") if descs[i].desc != NULL else ""
        out.append((<int>descs[i].code, descs[i].name.decode("utf-8", "replace"), desc))
    return out


cdef _raise_err(rd_kafka_resp_err_t err, str what):
    name = rd_kafka_err2name(err).decode("utf-8", "replace")
    text = rd_kafka_err2str(err).decode("utf-8", "replace")
    raise KafkaError(f"{what}: {name} ({text})", code=name)


# Limits of librdkafka's mock (re-exported and documented by kipconsumer.broker).
MAX_BROKERS = 1000
MAX_PARTITIONS = 100_000


cdef bytes _cstr(object value, str argname):
    return c_string(value, argname, ConfigError)


cdef class MockCluster:
    """A librdkafka mock cluster with ``num_brokers`` brokers listening on 127.0.0.1.

    Broker ids are ``1..num_brokers``.  ``destroy()`` (idempotent, also run on deallocation) shuts the
    listeners down; any later call raises ``IllegalStateError``.

    Served by threads of the process that created it (``pid``): in a child made by ``fork()`` every
    call raises ``IllegalStateError`` naming that process, and ``destroy()`` and the deallocation leave
    the parent's cluster alone (nothing is freed in the child).
    """

    def __cinit__(self, int num_brokers=3, int initial_rebalance_delay_ms=0):
        self.rk = NULL
        self.mcluster = NULL
        self.pid = this_process()
        if num_brokers < 1 or num_brokers > MAX_BROKERS:
            # more brokers than free file descriptors makes the mock abort the process
            raise ConfigError(f"num_brokers: must be in 1..{MAX_BROKERS}, got {num_brokers}")
        if initial_rebalance_delay_ms < 0:
            raise ConfigError(
                f"initial_rebalance_delay_ms: must be >= 0, got {initial_rebalance_delay_ms}")
        self.num_brokers = num_brokers

        cdef char errstr[512]
        cdef rd_kafka_conf_t *conf = rd_kafka_conf_new()
        for key, val in ((b"client.id", b"kipconsumer-mock-cluster"),):
            if rd_kafka_conf_set(conf, key, val, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK:
                rd_kafka_conf_destroy(conf)
                raise KafkaError("mock cluster handle configuration failed: "
                                 + errstr.decode("utf-8", "replace"))
        rd_kafka_conf_set_log_cb(conf, kc_log_cb)  # to Python logging: drain_logs() in every call

        cdef rd_kafka_t *rk
        with nogil:
            rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr))
        if rk == NULL:
            rd_kafka_conf_destroy(conf)   # not taken over on failure
            raise KafkaError("cannot create the mock cluster's handle: "
                             + errstr.decode("utf-8", "replace"))
        self.rk = rk

        cdef rd_kafka_mock_cluster_t *mc
        with nogil:
            mc = rd_kafka_mock_cluster_new(rk, num_brokers)
        if mc == NULL:
            with nogil:
                rd_kafka_destroy(rk)
            self.rk = NULL
            raise KafkaError(f"cannot create a mock cluster with num_brokers={num_brokers} "
                             "(no free ports on 127.0.0.1?)")
        self.mcluster = mc
        cdef int32_t delay = initial_rebalance_delay_ms
        with nogil:
            rd_kafka_mock_group_initial_rebalance_delay_ms(mc, delay)

    def __dealloc__(self):
        self._destroy()

    cdef void _destroy(self) noexcept:
        cdef rd_kafka_mock_cluster_t *mc = self.mcluster
        cdef rd_kafka_t *rk = self.rk
        self.mcluster = NULL
        self.rk = NULL
        if foreign_process(self.pid):
            return  # the parent's threads serve it: joining them here would hang (leaked instead)
        with nogil:
            if mc != NULL:
                rd_kafka_mock_cluster_destroy(mc)
            if rk != NULL:
                rd_kafka_destroy(rk)

    cdef rd_kafka_mock_cluster_t *_mc(self) except NULL:
        if foreign_process(self.pid):
            raise foreign_error("EmbeddedBroker", self.pid)
        drain_logs()
        if self.mcluster == NULL:
            raise IllegalStateError("the mock cluster is destroyed")
        return self.mcluster

    def destroy(self):
        """Stop every broker and free the cluster. Idempotent. In another process than ``pid`` (a
        child made by ``fork()``): forgets the cluster without stopping it (the parent's to stop)."""
        cdef bint foreign = foreign_process(self.pid)
        self._destroy()
        if not foreign:
            drain_logs()

    @property
    def closed(self):
        return self.mcluster == NULL

    def bootstraps(self):
        """The cluster's ``bootstrap.servers`` string (``"127.0.0.1:port,..."``)."""
        cdef rd_kafka_mock_cluster_t *mc = self._mc()
        cdef const char *s
        with nogil:
            s = rd_kafka_mock_cluster_bootstraps(mc)
        return s.decode("utf-8")

    def set_initial_rebalance_delay_ms(self, int delay_ms):
        """Delay of the first JoinGroup response of a new group (librdkafka >= 2.x mock)."""
        if delay_ms < 0:
            raise ConfigError(f"delay_ms: must be >= 0, got {delay_ms}")
        cdef rd_kafka_mock_cluster_t *mc = self._mc()
        cdef int32_t d = delay_ms
        with nogil:
            rd_kafka_mock_group_initial_rebalance_delay_ms(mc, d)

    def topic_create(self, topic, int partitions, int replication_factor):
        """Create ``topic``; raises ``KafkaError`` (code ``TOPIC_ALREADY_EXISTS``) if it exists."""
        cdef bytes t = _cstr(topic, "topic")
        if partitions < 1 or partitions > MAX_PARTITIONS:
            # the mock allocates every partition at once and aborts when that fails
            raise ConfigError(f"partitions: must be in 1..{MAX_PARTITIONS}, got {partitions}")
        if replication_factor < 1:
            raise ConfigError(f"replication_factor: must be >= 1, got {replication_factor}")
        cdef rd_kafka_mock_cluster_t *mc = self._mc()
        cdef const char *ct = t
        cdef rd_kafka_resp_err_t err
        with nogil:
            err = rd_kafka_mock_topic_create(mc, ct, partitions, replication_factor)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR:
            _raise_err(err, f"topic_create(topic={topic!r}, partitions={partitions}, "
                            f"replication_factor={replication_factor})")

    def partition_set_leader(self, topic, int32_t partition, int32_t broker_id):
        """Move the leadership of ``topic[partition]`` to ``broker_id`` (-1: no leader)."""
        cdef bytes t = _cstr(topic, "topic")
        if partition < 0:
            raise ConfigError(f"partition: must be >= 0, got {partition}")
        cdef rd_kafka_mock_cluster_t *mc = self._mc()
        cdef const char *ct = t
        cdef rd_kafka_resp_err_t err
        with nogil:
            err = rd_kafka_mock_partition_set_leader(mc, ct, partition, broker_id)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR:
            _raise_err(err, f"partition_set_leader(topic={topic!r}, partition={partition}, "
                            f"broker_id={broker_id})")

    def broker_set_down(self, int32_t broker_id):
        """Close the broker's connections and stop accepting new ones (the port is kept)."""
        cdef rd_kafka_mock_cluster_t *mc = self._mc()
        cdef rd_kafka_resp_err_t err
        with nogil:
            err = rd_kafka_mock_broker_set_down(mc, broker_id)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR:
            _raise_err(err, f"broker_set_down(broker_id={broker_id})")

    def broker_set_up(self, int32_t broker_id):
        """Accept connections again on the broker's port."""
        cdef rd_kafka_mock_cluster_t *mc = self._mc()
        cdef rd_kafka_resp_err_t err
        with nogil:
            err = rd_kafka_mock_broker_set_up(mc, broker_id)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR:
            _raise_err(err, f"broker_set_up(broker_id={broker_id})")

    def broker_set_rtt(self, int32_t broker_id, int rtt_ms):
        """Delay every response of ``broker_id`` by ``rtt_ms`` milliseconds (0 = no delay)."""
        if rtt_ms < 0:
            raise ConfigError(f"rtt_ms: must be >= 0, got {rtt_ms}")
        cdef rd_kafka_mock_cluster_t *mc = self._mc()
        cdef rd_kafka_resp_err_t err
        with nogil:
            err = rd_kafka_mock_broker_set_rtt(mc, broker_id, rtt_ms)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR:
            _raise_err(err, f"broker_set_rtt(broker_id={broker_id}, rtt_ms={rtt_ms})")

    def push_request_errors(self, int api_key, errors):
        """Make the next ``len(errors)`` requests of type ``api_key`` (to any broker) fail with
        ``errors`` in order (an error of 0 lets one request through)."""
        if api_key < 0 or api_key > 32767:
            raise ConfigError(f"api_key: must be in 0..32767, got {api_key}")
        codes = [int(e) for e in errors]
        cdef size_t cnt = len(codes)
        if cnt == 0:
            return
        cdef rd_kafka_mock_cluster_t *mc = self._mc()
        cdef rd_kafka_resp_err_t *arr = <rd_kafka_resp_err_t *>malloc(cnt * sizeof(rd_kafka_resp_err_t))
        if arr == NULL:
            raise MemoryError()
        cdef size_t i
        cdef int16_t ak = <int16_t>api_key
        try:
            for i in range(cnt):
                arr[i] = <rd_kafka_resp_err_t>(<int>codes[i])
            with nogil:
                rd_kafka_mock_push_request_errors_array(mc, ak, cnt, arr)
        finally:
            free(arr)

    def clear_request_errors(self, int api_key):
        """Drop every error still queued for ``api_key`` by ``push_request_errors``."""
        if api_key < 0 or api_key > 32767:
            raise ConfigError(f"api_key: must be in 0..32767, got {api_key}")
        cdef rd_kafka_mock_cluster_t *mc = self._mc()
        cdef int16_t ak = <int16_t>api_key
        with nogil:
            rd_kafka_mock_clear_request_errors(mc, ak)

    def coordinator_set(self, key_type, key, int32_t broker_id):
        """Make ``broker_id`` the coordinator of ``key`` (``key_type``: "group" or "transaction")."""
        cdef bytes kt = _cstr(key_type, "key_type")
        cdef bytes k = _cstr(key, "key")
        cdef rd_kafka_mock_cluster_t *mc = self._mc()
        cdef const char *ckt = kt
        cdef const char *ck = k
        cdef rd_kafka_resp_err_t err
        with nogil:
            err = rd_kafka_mock_coordinator_set(mc, ckt, ck, broker_id)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR:
            _raise_err(err, f"coordinator_set(key_type={key_type!r}, key={key!r}, broker_id={broker_id})")

    def topic_set_error(self, topic, int error):
        """Make Metadata responses report ``error`` for ``topic`` (0 clears it).

        librdkafka's mock creates the topic (default partition count) if it does not exist."""
        cdef bytes t = _cstr(topic, "topic")
        cdef rd_kafka_mock_cluster_t *mc = self._mc()
        cdef const char *ct = t
        cdef rd_kafka_resp_err_t e = <rd_kafka_resp_err_t>error
        with nogil:
            rd_kafka_mock_topic_set_error(mc, ct, e)
