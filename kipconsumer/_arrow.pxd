# Declarations of the Arrow C data interface builders in csrc/ (arrow_batch.c, arrow_headers.c),
# cimported by _records.pyx only.
from libc.stddef cimport size_t

from kipconsumer._rdk cimport rd_kafka_message_t


cdef extern from "arrow_batch.h" nogil:
    struct ArrowSchema:
        void (*release)(ArrowSchema *)
    struct ArrowArray:
        void (*release)(ArrowArray *)
    int KC_ARROW_WITH_TIMESTAMP_TYPE
    int kc_arrow_build(rd_kafka_message_t *const *msgs, size_t n, int flags,
                       ArrowSchema *schema_out, ArrowArray *array_out,
                       char *errbuf, size_t errlen)


cdef extern from "arrow_headers.h" nogil:
    int kc_arrow_build_headers(rd_kafka_message_t *const *msgs, size_t n, ArrowSchema *schema_out,
                               ArrowArray *array_out, char *errbuf, size_t errlen)
