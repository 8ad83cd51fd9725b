# cython: language_level=3
"""``OwnerThread``: the one-owner-thread contract of the client facades (``KafkaConsumer``,
``KafkaShareConsumer``), one implementation for every client (one thread at a time,
``ConcurrentAccessError`` for a second one); ``kipconsumer._owned.owned`` runs a facade method under it.

Signal-proof by construction: the contract's state lives here, in C, and each operation runs as
one C call under the GIL with no Python bytecode inside, so no signal handler can run in the middle
of one (CPython runs handlers only between bytecodes). A call's ownership is taken by ``enter()`` and
given back by ``leave()`` or ``unwind()``, whichever way the call ends (``kipconsumer._owned.owned``);
``close()`` and ``begin_close()`` take, and give back or hand on, within the one C call. The Python
code the operations call (the facade's hooks) runs either before anything is taken or inside a
``try`` of this C code that gives it back. A ``close()`` of another thread waits on a C condition
(csrc/owner_gate.h) without the GIL, in slices, checking for signals between them, and holds nothing
while it waits.
"""

from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc

from kipconsumer._clock cimport KC_NO_DEADLINE, kc_deadline_us, kc_now_us, kc_slice_end_us

from kipconsumer.errors import ConcurrentAccessError, IllegalStateError


cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident()


cdef extern from "owner_gate.h" nogil:
    ctypedef struct kc_owner_gate_t:
        pass
    void kc_owner_gate_init(kc_owner_gate_t *g)
    void kc_owner_gate_destroy(kc_owner_gate_t *g)
    uint64_t kc_owner_gate_generation(kc_owner_gate_t *g)
    void kc_owner_gate_open(kc_owner_gate_t *g)
    void kc_owner_gate_wait(kc_owner_gate_t *g, uint64_t seen, int64_t until_us)


cdef class OwnerThread:
    """The one-owner-thread contract every client facade shares (``KafkaConsumer``,
    ``KafkaShareConsumer``): one thread at a time is in a call; that thread may call again from
    inside (a callback), any other thread gets ``ConcurrentAccessError`` at once, naming both threads
    and the call in progress, and the call in progress goes on. Once a thread closes the client
    (``closer`` set), a new call is refused with ``IllegalStateError`` (``refusal``, formatted with the
    method's name).

    The facade's hooks, all optional: ``admit(method)`` may refuse a call made inside one of the
    owner's own (a callback) by raising; ``hold()`` runs when a thread becomes the owner (if it
    raises, the thread is not the owner), ``unhold()`` when its outermost call ends; ``close(seconds)``
    is the client's own close, run by ``close()`` here, or by the owner's outermost ``leave()`` when
    a ``close()`` of another thread left it to the owner (``defer_close``). ``hold``, ``unhold`` and
    ``close`` should be C methods (a native object's): Python code of theirs could be interrupted by a
    signal after it did its work.
    """

    cdef readonly str client
    cdef readonly str refusal
    cdef object _admit, _hold, _unhold, _close, _refuse
    cdef bint _has_owner, _closing
    cdef unsigned long _owner, _closer
    cdef int _depth
    cdef str _method
    cdef object _close_after  # a close() of another thread left the close to the owner: its timeout
    cdef int _waiters
    cdef kc_owner_gate_t *_gate

    def __cinit__(self, *args, **kwargs):
        self._gate = <kc_owner_gate_t *>malloc(sizeof(kc_owner_gate_t))
        if self._gate == NULL:
            raise MemoryError()
        kc_owner_gate_init(self._gate)

    def __dealloc__(self):
        if self._gate != NULL:
            kc_owner_gate_destroy(self._gate)
            free(self._gate)

    def __init__(self, str client, str refusal, *, admit=None, hold=None, unhold=None, close=None):
        self.client = client
        self.refusal = refusal
        self._admit, self._hold, self._unhold, self._close = admit, hold, unhold, close
        self._method = ""
        self._close_after = None

    def reset(self, refuse=None):
        """No owner, no closer, no close left to the owner, and a fresh gate: also in a child made by
        ``fork()``, where a thread of the parent, which does not exist there, may have been the owner.
        ``refuse``: every later call raises ``refuse()`` and the hooks are dropped (the facade's
        native handle is not usable in that child)."""
        self._has_owner = False
        self._owner = 0
        self._depth = 0
        self._method = ""
        self._closing = False
        self._closer = 0
        self._close_after = None
        self._waiters = 0
        kc_owner_gate_init(self._gate)
        if refuse is not None:
            self._refuse = refuse
            self._admit = self._hold = self._unhold = self._close = None

    # -- what the facades read ---------------------------------------------------------------
    @property
    def owner(self):
        """The owner thread's identity (``threading.get_ident()``), None when no call is in progress."""
        return self._owner if self._has_owner else None

    @property
    def depth(self):
        """How many calls deep the owner is (a call from a callback adds one); 0 without an owner."""
        return self._depth

    @property
    def method(self):
        """The method the owner's outermost call is in (the last one's, once it returned)."""
        return self._method

    @property
    def closer(self):
        """The thread closing the client (or that closed it, for a client that stays closed), or None."""
        return self._closer if self._closing else None

    cpdef bint is_owner(self):
        """True on the thread in a call."""
        return self._has_owner and self._owner == PyThread_get_thread_ident()

    # -- a call ------------------------------------------------------------------------------
    cpdef bint enter(self, str method) except -1:
        """Makes the calling thread the owner for ``method`` (True), or counts one more level of the
        owner's own call (False: a call from a callback inside it; ``admit(method)`` may refuse it by
        raising). Another thread owning it: ``ConcurrentAccessError``; a thread closing it:
        ``IllegalStateError``. Raises with nothing taken."""
        cdef unsigned long me = PyThread_get_thread_ident()
        if self._refuse is not None:
            raise self._refuse()
        if self._has_owner:
            if self._owner == me:
                if self._admit is not None:
                    self._admit(method)
                self._depth += 1
                return False
            raise ConcurrentAccessError(
                f"{self.client} is not safe for multi-threaded access: {method}() was called from "
                f"thread {me} while thread {self._owner} is in {self._method}(). Use the consumer from "
                f"one thread at a time; only wakeup(), close() and metrics() may be called from any "
                f"thread.")
        if self._closing:
            raise IllegalStateError(self.refusal.format(method=method))
        self._own(me, method)
        if self._hold is not None:
            try:
                self._hold()
            except BaseException:
                self._release()
                raise
        return True

    cpdef int level(self):
        """How many calls deep the calling thread is (0: it is not the owner)."""
        return self._depth if self.is_owner() else 0

    cpdef int unwind(self, int level) except -1:
        """Back to ``level`` (a ``level()`` read before an ``enter()``): ``leave()`` once if that
        ``enter()`` took a level, nothing if it raised before taking one."""
        if self.is_owner() and self._depth > level:
            self.leave()
        return 0

    cpdef bint leave(self) except -1:
        """Ends one level of the calling thread's call; True when its outermost call ended: then
        ``unhold()`` runs, the close a ``close()`` of another thread left to this call runs (still
        the owner), and the thread lets go, whatever those raise. Nothing for a thread that is not
        the owner (a child made by ``fork()`` inside a call)."""
        if not self.is_owner():
            return False
        self._depth -= 1
        if self._depth > 0:
            return False
        try:
            if self._unhold is not None:
                self._unhold()
            if self._close_after is not None:
                seconds, self._close_after = self._close_after, None
                try:
                    self._close(seconds)
                finally:
                    self._closing = False
                    self._closer = 0
        finally:
            self._release()
        return True

    cdef void _own(self, unsigned long me, str method):
        self._has_owner = True
        self._owner = me
        self._depth = 1
        self._method = method

    cdef void _release(self):
        self._has_owner = False
        self._owner = 0
        self._depth = 0
        if self._waiters:
            kc_owner_gate_open(self._gate)

    cdef int _wait_for_owner(self, double seconds) except -1:
        """Waits up to ``seconds`` (inf: no bound) while another thread owns the client: 1 once none
        does (or the caller does), 0 at the timeout. Without the GIL in slices; a signal handler's
        exception raised between them propagates, and nothing is held then."""
        cdef int64_t deadline = kc_deadline_us(seconds)
        cdef uint64_t seen
        cdef int64_t until
        cdef unsigned long me = PyThread_get_thread_ident()
        self._waiters += 1
        try:
            while self._has_owner and self._owner != me:
                if deadline != KC_NO_DEADLINE and kc_now_us() >= deadline:
                    return 0
                seen = kc_owner_gate_generation(self._gate)
                until = kc_slice_end_us(deadline)
                with nogil:
                    kc_owner_gate_wait(self._gate, seen, until)
                PyErr_CheckSignals()
            return 1
        finally:
            self._waiters -= 1

    # -- close -------------------------------------------------------------------------------
    def defer_close(self, double seconds):
        """Leaves the close (``close(seconds)``) to the owner's outermost ``leave()``: for a
        ``close()`` of the owner's thread made where it cannot close at once (a signal handler running
        inside a call). The first such timeout stands."""
        if self._close_after is None:
            self._close_after = seconds

    def close(self, double seconds, wake=None):
        """``close()`` of a client that closes under the contract (KafkaConsumer): once no other thread
        is in a call, the calling thread becomes the owner for ``close``, runs ``close(seconds)`` and
        lets go, whatever it raises; None. While another thread is in a call: marks the client
        closing (new calls refused), calls ``wake()`` (a ``poll()`` there returns at once) and waits up
        to ``seconds`` for that call to return; if it does not, the close is left to it (its
        outermost ``leave()`` closes, with this timeout) and the result is ``(owner, method)`` of that
        call, for the caller's warning. A signal's exception during the wait leaves the close to that
        call too, and propagates. On the owner's own thread it defers the close (``defer_close``) and
        wakes. The caller checks a call from the owner's callbacks first."""
        cdef unsigned long me = PyThread_get_thread_ident()
        if self._refuse is not None:
            raise self._refuse()
        if self._has_owner and self._owner == me:
            self.defer_close(seconds)
            if wake is not None:
                wake()
            return None
        if self._has_owner:
            if not self._closing:
                self._closing = True
                self._closer = me
            owner, method = self._owner, self._method
            if wake is not None:
                wake()
            try:
                let_go = self._wait_for_owner(seconds)
            except BaseException:
                if self._has_owner:
                    self.defer_close(seconds)
                raise
            if not let_go:
                if self._closer == me:
                    self.defer_close(seconds)
                return (owner, method)
        self._own(me, "close")
        try:
            self._close(seconds)
        finally:
            self._closing = False
            self._closer = 0
            self._release()
        return None

    def begin_close(self, double seconds, start):
        """``close()`` of a client that stays closed once closing (KafkaShareConsumer): None if a
        thread is closing it or closed it. Otherwise marks it closing by the calling thread (new calls
        refused for good), waits up to ``seconds`` for another thread's call to return, then runs
        ``start()`` (what starts the native close) and returns its result. Undoes the mark, and
        raises, if that wait times out (``IllegalStateError``) or is interrupted by a signal's
        exception, or if ``start()`` raises: a later ``close()`` closes then, so ``start()``'s work
        must be safe to repeat."""
        if self._refuse is not None:
            raise self._refuse()
        if self._closing:
            return None
        self._closing = True
        self._closer = PyThread_get_thread_ident()
        try:
            if not self._wait_for_owner(seconds):
                raise IllegalStateError(f"close() timed out waiting for {self._method}() of thread "
                                        f"{self._owner} to return")
            return start()
        except BaseException:
            self._closing = False
            self._closer = 0
            raise
