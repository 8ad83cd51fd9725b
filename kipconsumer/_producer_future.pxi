# ProduceFuture, the future send() returns: its state in C fields (_FutureCore), created without
# __init__ and untracked by the cycle collector, completed by the delivery path
# (_producer_delivery.pxi) with plain C stores unless someone waits on it (included by _producer.pyx).


_tuple_new = tuple.__new__


cdef inline void _gc_track(object o) noexcept:
    """Hands o back to the cycle collector (it must never be tracked twice)."""
    if not PyObject_GC_IsTracked(o):
        PyObject_GC_Track(o)


_FINISHED = _futures_base.FINISHED
_PENDING = _futures_base.PENDING


_RUNNING = _futures_base.RUNNING
_CANCELLED = _futures_base.CANCELLED
_CANCELLED_AND_NOTIFIED = _futures_base.CANCELLED_AND_NOTIFIED
_STATE_NAMES = (_PENDING, _RUNNING, _CANCELLED, _CANCELLED_AND_NOTIFIED, _FINISHED)
_future_done = Future.done
_future_cancelled = Future.cancelled
_future_running = Future.running
_future_result = Future.result
_future_exception = Future.exception


cdef class _FutureCore:
    """C part of ProduceFuture: the record's registry entry and the future's state, in C fields.

    ``concurrent.futures.Future`` keeps its state in instance attributes (``_state``, ``_result``,
    ``_exception``); here they are properties over C fields, so that the delivery thread completes
    a future with plain C stores and the instance ``__dict__`` is never created unless someone
    waits on the future. The RecordMetadata of a delivered record is built on first access from
    the fields the delivery report filled (topic, partition, offset, timestamp, sizes).
    """

    cdef inline object _metadata(self):
        if self.md_pending:
            self.res = _tuple_new(RecordMetadata, (self.topic, self.partition, self.offset,
                                                   self.timestamp, self.rec.key_size,
                                                   self.rec.value_size))
            self.md_pending = False
            self.topic = None
        return self.res

    @property
    def _state(self):
        return _STATE_NAMES[self.st]

    @_state.setter
    def _state(self, value):
        self.st = _STATE_NAMES.index(value)

    @property
    def _result(self):
        return self._metadata()

    @_result.setter
    def _result(self, value):
        self.md_pending = False
        self.topic = None
        self.res = value

    @property
    def _exception(self):
        return self.exc

    @_exception.setter
    def _exception(self, value):
        self.exc = value

    # Fast paths for completed futures: no condition is created (Future's methods take it).
    def cancelled(self):
        """Always False once completed (a record cannot be withdrawn)."""
        if self.st == _ST_FINISHED:
            return False
        return _future_cancelled(self)

    def running(self):
        if self.st == _ST_FINISHED:
            return False
        return _future_running(self)

    def done(self):
        """True once the record is acknowledged or failed."""
        if self.st == _ST_FINISHED:
            return True
        return _future_done(self)

    def result(self, timeout=None):
        """The record's RecordMetadata; waits at most ``timeout`` seconds (None: no limit)."""
        if self.st == _ST_FINISHED:
            if self.exc is not None:
                raise self.exc
            return self._metadata()
        return _future_result(self, timeout)

    def exception(self, timeout=None):
        """The exception the record failed with, or None; waits like ``result()``."""
        if self.st == _ST_FINISHED:
            return self.exc
        return _future_exception(self, timeout)


class ProduceFuture(_FutureCore, Future):
    """The future returned by ``send()``: a ``concurrent.futures.Future[RecordMetadata]``.

    It is completed exactly once, by the producer (never by the caller); ``cancel()`` returns
    False because a record handed to the producer cannot be withdrawn.

    Cheap to create and complete: ``Future.__init__`` builds a ``threading.Condition`` per future,
    which costs more than the whole native send path. Here the state lives in C fields (see
    ``_FutureCore``), and the condition and the waiter and callback lists are created on first use
    (``__getattr__``), which also sets the C flag ``lazy_ready``. A future whose ``lazy_ready`` is
    still False when its delivery report arrives has no waiter and no done-callback, so it is
    completed by setting its C fields directly. Both steps run without releasing the GIL between
    the check and the update (this module is compiled), so a waiter either finds the result or is
    notified. ``done()``, ``result()`` and ``exception()`` of a completed future answer without
    creating the condition.

    Futures are created untracked by the cycle collector: until someone waits on one or it fails,
    it only refers to str and ints, so it cannot be part of a reference cycle, and hundreds of
    thousands of pending futures would otherwise make every garbage collection pass slower. It is
    tracked again as soon as ``__getattr__`` creates its condition or it is completed with an
    exception (whose traceback may form cycles).
    """

    def __init__(self):
        pass

    def __getattr__(self, name):
        if name == "_condition" or name == "_waiters" or name == "_done_callbacks":
            cond = threading.Condition()
            waiters = []
            callbacks = []
            d = self.__dict__
            # no Python code runs from here to the return: atomic under the GIL
            d.setdefault("_waiters", waiters)
            d.setdefault("_done_callbacks", callbacks)
            d.setdefault("_condition", cond)
            (<_FutureCore>self).lazy_ready = True
            _gc_track(self)
            return d[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def cancel(self):
        return False


cdef object _ProduceFuture_type = ProduceFuture
cdef tuple _EMPTY = ()
