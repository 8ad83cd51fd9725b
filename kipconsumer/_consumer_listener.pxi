# ListenerInvoker: the one place the application's rebalance listener is called
# (included by _consumer.pyx; fields in _consumer.pxd).


cdef class ListenerInvoker:
    """Calls the application's RebalanceListener on the thread running poll() or close().

    Contract: on_partitions_assigned gets newly assigned partitions; revoked partitions go to
    on_partitions_revoked, or to on_partitions_lost when the assignment was lost (the member left
    or was evicted) and the listener has that method, as in Java. Nothing is called for an empty
    list, except a revoke of an empty assignment (Java calls onPartitionsRevoked then too).
    While a method runs, `running` > 0: the consumer refuses poll(), subscribe(), unsubscribe(),
    assign() and close() there."""

    def __cinit__(self, listener=None):
        self.listener = listener

    cdef assigned(self, list tps):
        if self.listener is None:
            return
        self.running += 1
        try:
            self.listener.on_partitions_assigned(tps)
        finally:
            self.running -= 1

    cdef revoked(self, list tps, bint lost):
        if self.listener is None:
            return
        self.running += 1
        try:
            if lost and hasattr(self.listener, "on_partitions_lost"):
                self.listener.on_partitions_lost(tps)
            else:
                self.listener.on_partitions_revoked(tps)
        finally:
            self.running -= 1
