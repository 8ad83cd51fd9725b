# close(): the cooperative settle, librdkafka's asynchronous close served on the caller's thread, the
# final revoke, and the hand-over of what is left to the reaper (csrc/consumer_close.c)
# (included by _consumer.pyx; ClosePhase and CloseControl's fields in _consumer.pxd).
#
#   OPEN --(cooperative, partitions held)--> SETTLING --> REVOKING --final revoke answered--> UNASSIGNED
#   REVOKING/UNASSIGNED --librdkafka closed, or the deadline (reaper takes over)--> DONE


# The legal moves of ClosePhase, one bit per target phase (CloseControl.move); staying is always legal.
cdef unsigned _CLOSE_MOVES[5]
_CLOSE_MOVES[<int>CLOSE_OPEN] = (1 << CLOSE_SETTLING) | (1 << CLOSE_REVOKING) | (1 << CLOSE_DONE)
_CLOSE_MOVES[<int>CLOSE_SETTLING] = (1 << CLOSE_REVOKING) | (1 << CLOSE_DONE)
_CLOSE_MOVES[<int>CLOSE_REVOKING] = (1 << CLOSE_UNASSIGNED) | (1 << CLOSE_DONE)
_CLOSE_MOVES[<int>CLOSE_UNASSIGNED] = (1 << CLOSE_DONE)
_CLOSE_MOVES[<int>CLOSE_DONE] = 0
_CLOSE_PHASE_NAMES = ("OPEN", "SETTLING", "REVOKING", "UNASSIGNED", "DONE")


cdef class CloseControl:
    """Where close() is (ClosePhase), and what the calls made inside close() share with it: its
    deadline (a listener's commit_sync() is capped by it) and the queue librdkafka's close posts events
    to. request_close() from another thread sets `requested`. This class is the only writer of its
    fields; the phase moves only through move(), the one guarded transition (IllegalTransitionError
    for a move the table above forbids), called by the transition methods below. The rest of the
    consumer asks the inline queries declared in _consumer.pxd (is_open, closing, is_unassigned,
    is_done)."""

    cpdef int move(self, ClosePhase to) except -1:
        """The one assignment of `phase`: refuses (IllegalTransitionError, naming both phases) a move
        that is not in _CLOSE_MOVES."""
        if to != self.phase and not (0 <= <int>to <= CLOSE_DONE and _CLOSE_MOVES[<int>self.phase] >> to & 1):
            raise IllegalTransitionError("ClosePhase", _CLOSE_PHASE_NAMES[<int>self.phase],
                                         _CLOSE_PHASE_NAMES[<int>to] if 0 <= <int>to <= CLOSE_DONE else str(<int>to))
        self.phase = to
        return 0

    cdef int settling(self) except -1:
        """OPEN -> SETTLING: a cooperative member lets a rebalance it takes part in complete first."""
        return self.move(CLOSE_SETTLING)

    cdef int revoking(self, int64_t deadline_ms, rd_kafka_queue_t *q) except -1:
        """OPEN/SETTLING -> REVOKING: librdkafka's close is about to start on `q`; calls inside close()
        (a listener's commit) end by `deadline_ms` at the latest."""
        self.move(CLOSE_REVOKING)
        self.deadline_ms = deadline_ms
        self.q = q
        return 0

    cdef int unassigned(self) except -1:
        """REVOKING -> UNASSIGNED: the final revoke was answered with a full unassign."""
        return self.move(CLOSE_UNASSIGNED)

    cdef int done(self) except -1:
        """any -> DONE: closed for the application (librdkafka may still finish on the reaper)."""
        self.q = NULL
        return self.move(CLOSE_DONE)

    cdef void request(self) noexcept:
        """close() was called from another thread (NativeConsumer.request_close); any thread."""
        self.requested = True


cdef bint _close_consumer(NativeConsumer c, double timeout) except *:
    """See NativeConsumer.close()."""
    cdef int64_t deadline
    cdef rd_kafka_queue_t *q = NULL
    cdef bint done = False
    deadline = _deadline_ms(timeout)
    # from here on only this thread touches the buffer: no prefetch or stall thread, no owner lock
    with nogil:
        kc_consumer_prefetch_stop(c.core)
        kc_consumer_stall_stop(c.core)
    kc_consumer_release_all(c.core)
    if c._membership.subscription and not c._membership.has_left() and c.core.fb.n and c._cooperative():
        c._close.settling()
        _settle_rebalance(c, kc_now_ms() + min((deadline - kc_now_ms()) // 2, 10_000))
    # Not closed yet while librdkafka leaves the group: the revoke listener runs inside and may still
    # commit (Java allows commitSync() there).
    q = rd_kafka_queue_new(c.rk)
    c._close.revoking(deadline, q)
    try:
        if c.auto_commit and not c._membership.has_left():
            c._store_positions(None)
        done = _close_group(c, q, deadline)
        if done:
            _close_unreported(c)
        _finish_commit_callbacks(c)
    finally:
        if not done and q != NULL and _abandon(c, q):
            q = NULL
        if q != NULL:
            rd_kafka_queue_destroy(q)
        c._close.done()
        c._destroy()
        drain_logs()
    if not done:
        log.warning("close() did not complete within %.3f s (librdkafka was still committing or "
                    "leaving the group, e.g. waiting for an unreachable coordinator): the consumer is "
                    "closed, librdkafka finishes in the background and the group may wait up to "
                    "session.timeout.ms for this member", timeout)
    return done


cdef bint _abandon(NativeConsumer c, rd_kafka_queue_t *q) noexcept:
    """Hands the unfinished librdkafka close (started on `q`; NULL: not started), the core and the
    handle's destruction to the reaper, which starts when the handle is released: at once, or when
    the last batch holding messages of this consumer is freed."""
    cdef kc_reaper_t *r
    if c.rk == NULL or c._handle is None or c._handle.reaper != NULL:
        return False
    r = kc_reaper_new(c.rk, q, c.core, c._cooperative_cfg, c._close.is_unassigned())
    if r == NULL:
        return False
    c._commits.detach()
    c.core = NULL
    c._handle.reaper = r
    return True


cdef void _on_rebalance_closing(NativeConsumer c, rd_kafka_resp_err_t err,
                                rd_kafka_topic_partition_list_t *parts) except *:
    """The first rebalance event served inside close(), whatever it is (the "revoke all" of the
    termination, or an assignment or revocation pending when close() began).

    librdkafka turns the *assign() call that answers it into a full unassign, and nothing in the group
    handle waits for the application after that: it commits (auto-commit), leaves the group and
    terminates. So everything this member owns is revoked here, before that call, while librdkafka
    still waits for it: positions stored (auto-commit), buffers dropped, and the listener's
    on_partitions_revoked (on_partitions_lost if the assignment was lost) gets every owned partition,
    so its commit completes before the handle can terminate. An assignment completing now is not
    reported (as in Java). Events still queued after the call are stale and dropped
    (kc_close_drain_stale); no listener runs after it."""
    cdef bint cooperative = c._cooperative()
    cdef bint lost = rd_kafka_assignment_lost(c.rk)
    cdef kc_partition_t *p
    cdef rd_kafka_queue_t *q
    cdef size_t i
    cdef int stale = 0
    owned = sorted(c.assignment())
    try:
        if not lost and c.auto_commit:
            c._store_positions(None)
        for i in range(c.core.fb.n):
            p = kc_ps_at(&c.core.fb, i)
            c._membership.records_dropped(p.len)
            kc_ps_purge(&c.core.fb, p)
        if owned:
            c._membership.listener.revoked(owned, lost)
    finally:
        c._assignment.begin()
        with nogil:
            _drop_error(kc_answer_rebalance(c.rk, err, parts, cooperative))
        c._assignment.end()
        c._close.unassigned()
        while c.core.fb.n:
            topic = <bytes>kc_ps_at(&c.core.fb, 0).topic
            kc_ps_remove(&c.core.fb, topic, kc_ps_at(&c.core.fb, 0).partition)
        q = c._close.q
        if q != NULL:
            with nogil:
                stale = kc_close_drain_stale(q)
        log.info("close: partitions %s: %s%s", "lost" if lost else "revoked", owned,
                 f" ({stale} stale rebalance event(s) dropped)" if stale else "")


cdef _settle_rebalance(NativeConsumer c, int64_t until):
    """Cooperative close: lets a rebalance this member already takes part in complete before the final
    revoke, so that the listener's commit in on_partitions_revoked reaches a group that accepts it
    (brokers refuse commits while a group joins or completes a rebalance; otherwise the partitions'
    next owners process again what this member did since its previous commit).

    Bounded so that it never makes close() take longer than librdkafka's own close would: a probe
    (_probe_rebalance) tells whether the group rebalances; if librdkafka's heartbeat has seen it too
    (_rejoining), the round is waited for. A member that has not started to rejoin waits only if the
    round it then joins fits in what is left of the settle (session.timeout.ms +
    heartbeat.interval.ms); otherwise it leaves at once, as without the settle, and a commit from its
    listener may then be refused (docs/reliability.md, "Cooperative close"). Until `until` at the
    latest; no record is handed out meanwhile (listeners run). close goes on however it ends."""
    cdef int64_t now
    cdef bint waiting = False  # a round this member takes part in is being waited for
    c.core.hold_records = 1
    try:
        while True:
            now = kc_now_ms()
            if now >= until or not c.core.fb.n:
                return
            if kc_consumer_rebalance_pending(c.core):
                if (not waiting and not _rejoining(c)
                        and c._session_timeout_ms + c._heartbeat_interval_ms > until - now):
                    log.debug("close(): the group rebalances, this member has not rejoined and the "
                              "round may outlast the settle: leaving without waiting for it")
                    return
                waiting = True
                if c._poll_core(_slice(until)) == KC_POLL_EVENT:
                    _log_consumer_errors(c, "close()")
            elif not _probe_rebalance(c, until):
                return
            else:
                waiting = False
    finally:
        c.core.hold_records = 0


cdef _log_consumer_errors(NativeConsumer c, str where):
    """Takes the pending consumer errors and logs them (they are not raised from close())."""
    cdef rd_kafka_message_t *m
    while True:
        m = kc_consumer_take_error(c.core)
        if m == NULL:
            return
        log.debug("%s: %s", where, rd_kafka_err2str(m.err).decode(errors="replace"))
        rd_kafka_message_destroy(m)


cdef bint _rejoining(NativeConsumer c) noexcept:
    """librdkafka's heartbeat has been answered REBALANCE_IN_PROGRESS since the last rebalance this
    member served: it is rejoining the group (it does so by itself, without the application). The
    rule is the barrier's (kc_barrier_rejoining, csrc/rebalance_barrier.h)."""
    return kc_consumer_rejoining(c.core)


cdef bint _probe_rebalance(NativeConsumer c, int64_t until) except -1:
    """Looks up the offsets the group has committed for the partitions this member holds and commits
    exactly those again: nothing changes for the group. True if the coordinator refused the commit
    because the group rebalances (the barrier is then engaged). The answer can take a whole join
    round: the coordinator serves this member's requests in order, after its pending JoinGroup."""
    cdef rd_kafka_topic_partition_list_t *mine
    cdef rd_kafka_topic_partition_list_t *held
    cdef rd_kafka_event_t *ev = NULL
    cdef rd_kafka_resp_err_t err
    cdef int i
    if c.core.fb.n == 0 or until <= kc_now_ms():
        return False
    mine = rd_kafka_topic_partition_list_new(<int>c.core.fb.n)
    held = rd_kafka_topic_partition_list_new(<int>c.core.fb.n)
    try:
        for i in range(c.core.fb.n):
            rd_kafka_topic_partition_list_add(mine, kc_ps_at(&c.core.fb, i).topic, kc_ps_at(&c.core.fb, i).partition)
        if _committed_lookup(c, mine, until, False):
            return False
        for i in range(mine.cnt):
            if not mine.elems[i].err and mine.elems[i].offset >= 0:
                rd_kafka_topic_partition_list_add(held, mine.elems[i].topic,
                                                  mine.elems[i].partition).offset = mine.elems[i].offset
        if held.cnt == 0 or until <= kc_now_ms():
            return False
        err = _commit_and_wait(c, held, until, False, &ev)
        if not err:
            if ev == NULL:
                return False
            err = _result_error(ev)[0]
    finally:
        if ev != NULL:
            rd_kafka_event_destroy(ev)
        rd_kafka_topic_partition_list_destroy(mine)
        rd_kafka_topic_partition_list_destroy(held)
    if err in (RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION):
        kc_barrier_commit_refused(&c.core.barrier, kc_now_ms())
        log.debug("close(): the group is rebalancing (%s); completing it before the final revoke",
                  _err_name(err))
        return True
    return False


cdef bint _close_group(NativeConsumer c, rd_kafka_queue_t *q, int64_t deadline) except *:
    """Starts librdkafka's close on `q` and serves its events until the group handle is terminated
    (True) or the deadline (False). A signal's exception ends it as the deadline does: librdkafka
    finishes in the background."""
    cdef rd_kafka_error_t *error = rd_kafka_consumer_close_queue(c.rk, q)
    cdef rd_kafka_resp_err_t code
    cdef rd_kafka_event_t *ev
    if error != NULL:
        code = rd_kafka_error_code(error)
        msg = rd_kafka_error_string(error).decode(errors="replace")
        rd_kafka_error_destroy(error)
        if code != RD_KAFKA_RESP_ERR__DESTROY:  # __DESTROY: closed already
            # a fatal error: rd_kafka_destroy() then skips the close
            log.warning("consumer close: %s", msg)
        return True
    while not rd_kafka_consumer_closed(c.rk):
        if deadline - kc_now_ms() <= 0:
            return False
        with nogil:
            ev = rd_kafka_queue_poll(q, _slice(deadline))
        if ev == NULL:
            PyErr_CheckSignals()
            continue
        try:
            _close_event(c, ev)
        except BaseException as exc:  # a listener's: raised once closed
            c._keep_exception(exc)
        finally:
            rd_kafka_event_destroy(ev)
    return True


cdef _close_event(NativeConsumer c, rd_kafka_event_t *ev):
    cdef int etype = rd_kafka_event_type(ev)
    cdef rd_kafka_resp_err_t err = rd_kafka_event_error(ev)
    if etype == RD_KAFKA_EVENT_REBALANCE:
        if not c._close.is_unassigned():
            _on_rebalance(c, err, rd_kafka_event_topic_partition_list(ev))
        elif not rd_kafka_consumer_closed(c.rk):
            # posted after close's full unassign (the stale ones were dropped): librdkafka waits for
            # this call
            c._assignment.begin()
            with nogil:
                _drop_error(kc_answer_rebalance(c.rk, err, rd_kafka_event_topic_partition_list(ev),
                                                c._cooperative_cfg))
            c._assignment.end()
    elif etype == RD_KAFKA_EVENT_ERROR and err:
        log.debug("consumer error during close: %s: %s", _err_name(err),
                  rd_kafka_event_error_string(ev).decode(errors="replace"))


cdef _close_unreported(NativeConsumer c):
    """After librdkafka's close: partitions never revoked by an event (librdkafka sends none when the
    assignment was lost, e.g. after max.poll.interval.ms) go to on_partitions_lost. The group handle
    is terminated, so a commit from the listener fails instead of racing it."""
    owned = sorted(c.assignment())
    if not owned or not c._membership.subscription:
        return
    try:
        c._membership.listener.revoked(owned, rd_kafka_assignment_lost(c.rk))
    except BaseException as exc:
        c._keep_exception(exc)
