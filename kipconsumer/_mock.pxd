# Table of contents of kipconsumer/_mock.pyx: the embedded broker's handle on librdkafka's mock cluster.
from posix.types cimport pid_t

from kipconsumer._rdk cimport rd_kafka_mock_cluster_t, rd_kafka_t


cdef class MockCluster:
    cdef rd_kafka_t *rk                       # the producer handle that owns the mock cluster
    cdef rd_kafka_mock_cluster_t *mcluster    # the cluster; NULL once destroyed
    cdef readonly int num_brokers             # broker ids are 1..num_brokers
    cdef readonly pid_t pid                   # the process whose threads serve it (_process.pxd)

    cdef void _destroy(self) noexcept                   # destroys the cluster and the handle (idempotent);
                                                        # in another process: forgets them (leaked)
    cdef rd_kafka_mock_cluster_t *_mc(self) except NULL # the cluster, or IllegalStateError once destroyed
                                                        # or in another process
