# Group membership: Membership (MemberState and its transitions), the librdkafka calls that change it,
# and the rebalance events librdkafka hands to poll()
# (included by _consumer.pyx; MemberState and Membership's fields in _consumer.pxd).
#
#   UNJOINED --subscribe--> JOINED --poll interval expired / stale assignment--> LEFT
#   LEFT --assignment served--> JOINED --partitions of a discarded assignment kept--> REJOINING
#   REJOINING --next poll(): unsubscribe + subscribe--> JOINED        any --unsubscribe--> UNJOINED
#   REJOINING --poll interval expired / stale assignment--> LEFT      (_MEMBER_MOVES: every legal move)


# The legal moves of MemberState, one bit per target state (Membership.move); staying is always legal.
cdef unsigned _MEMBER_MOVES[4]
_MEMBER_MOVES[<int>MEMBER_UNJOINED] = (1 << MEMBER_JOINED)
_MEMBER_MOVES[<int>MEMBER_JOINED] = (1 << MEMBER_UNJOINED) | (1 << MEMBER_LEFT) | (1 << MEMBER_REJOINING)
_MEMBER_MOVES[<int>MEMBER_LEFT] = (1 << MEMBER_UNJOINED) | (1 << MEMBER_JOINED)
_MEMBER_MOVES[<int>MEMBER_REJOINING] = (1 << MEMBER_UNJOINED) | (1 << MEMBER_JOINED) | (1 << MEMBER_LEFT)
_MEMBER_STATE_NAMES = ("UNJOINED", "JOINED", "LEFT", "REJOINING")


cdef class Membership:
    """The consumer's place in its group (MemberState) and what goes with it: the subscription, the
    partitions of a discarded assignment, the rebalance listener and the membership counters. This
    class is the only writer of every one of its fields (tests/test_consumer_structure.py): the
    consumer reports events to the methods below, which update the fields and move the state
    through move(), the one guarded transition (IllegalTransitionError for a move the table above
    forbids). The librdkafka calls that cause the events are the functions below, which call these
    once librdkafka has accepted them."""

    def __cinit__(self):
        self.subscription = set()
        self.stale_parts = set()
        self.listener = ListenerInvoker(None)
        self.state = MEMBER_UNJOINED

    cpdef int move(self, MemberState to) except -1:
        """The one assignment of `state`: refuses (IllegalTransitionError, naming both states) a move
        that is not in _MEMBER_MOVES."""
        if to != self.state and not (0 <= <int>to <= MEMBER_REJOINING and _MEMBER_MOVES[<int>self.state] >> to & 1):
            raise IllegalTransitionError("MemberState", _MEMBER_STATE_NAMES[<int>self.state],
                                         _MEMBER_STATE_NAMES[<int>to] if 0 <= <int>to <= MEMBER_REJOINING
                                         else str(<int>to))
        self.state = to
        return 0

    cdef int subscribed(self, list topics, object listener) except -1:
        """UNJOINED -> JOINED (a new subscription replaces the old one; LEFT/REJOINING are kept)."""
        self.listener = ListenerInvoker(listener)
        self.subscription = set(topics)
        if self.state == MEMBER_UNJOINED:
            self.move(MEMBER_JOINED)
        return 0

    cdef int unsubscribed(self) except -1:
        """any -> UNJOINED."""
        self.subscription = set()
        return self.move(MEMBER_UNJOINED)

    cdef int poll_interval_expired(self) except -1:
        """JOINED/REJOINING -> LEFT because poll() was not called within max.poll.interval.ms (KIP-62):
        librdkafka left the group without the application (it rejoins on the next poll by itself).
        Counted in any state; an UNJOINED member (the report outlived its subscription) stays."""
        self.poll_interval_expiries += 1
        if self.state != MEMBER_UNJOINED:
            self.move(MEMBER_LEFT)
        return 0

    cdef int assignment_discarded(self, list tps, list owned) except -1:
        """JOINED/REJOINING -> LEFT: an assignment of a generation the member had left was answered
        but not served (_discard_stale_assignment); its partitions `tps` and the ones the member held,
        `owned`, may still be held by librdkafka."""
        self.stale_parts.update(tps)
        self.stale_parts.update(owned)
        return self.move(MEMBER_LEFT)

    cdef int assignment_received(self, list tps, bint cooperative) except -1:
        """A new assignment is being served: its partitions `tps` (all stale partitions, if eager)
        are no longer stale. The state moves once librdkafka accepted it (assignment_served)."""
        if not cooperative:
            self.stale_parts.clear()
        self.stale_parts.difference_update(tps)
        return 0

    cdef int assignment_served(self) except -1:
        """LEFT -> JOINED: an assignment of the current generation is being served."""
        if self.state == MEMBER_LEFT:
            self.move(MEMBER_JOINED)
        return 0

    cdef list revocation_received(self, list tps):
        """Partitions `tps` are revoked or lost: returns the ones to report to the listener (those of
        a discarded assignment were never reported, or were already reported lost) and forgets them
        as stale."""
        report = [tp for tp in tps if tp not in self.stale_parts] if self.stale_parts else tps
        self.stale_parts.difference_update(tps)
        return report

    cdef int rejoin_needed(self) except -1:
        """JOINED -> REJOINING (see _rejoin_if_stale_parts_kept); an UNJOINED member (the assignment
        outlived its subscription) has nothing to rejoin and stays."""
        if self.state != MEMBER_UNJOINED:
            self.move(MEMBER_REJOINING)
        return 0

    cdef int rejoined(self) except -1:
        """REJOINING -> JOINED: as _member_rejoin starts to leave and join the group again."""
        return self.move(MEMBER_JOINED)

    cdef void rejoin_subscribed(self) noexcept:
        """_member_rejoin's subscribe was accepted: no partition of a discarded assignment is held."""
        self.stale_parts.clear()

    cdef void assignment_counted(self) noexcept:
        """One assignment served (its listener included); see rebalance_timed for the time."""
        self.rebalances += 1

    cdef void rebalance_timed(self, int64_t us) noexcept:
        """A rebalance event (any) took `us` to serve, its listener included."""
        self.rebalance_us += us

    cdef void records_dropped(self, size_t n) noexcept:
        """Buffered records dropped with their revoked or lost partitions."""
        self.revoked_records_dropped += n

    cdef void commit_failed(self) noexcept:
        """The broker or librdkafka refused a commit (sync or async)."""
        self.commit_failures += 1

    cdef void stale_epoch_retried(self) noexcept:
        """commit_sync() retried after STALE_MEMBER_EPOCH (KIP-848)."""
        self.stale_epoch_retries += 1


cdef _member_subscribed(NativeConsumer c, list topics, listener):
    """Subscribes librdkafka, then Membership.subscribed."""
    _rdk_subscribe(c, topics, "subscribe")
    c._membership.subscribed(topics, listener)


cdef _member_unsubscribed(NativeConsumer c):
    """any -> UNJOINED: librdkafka leaves the group; the revoke is served before this returns."""
    cdef rd_kafka_resp_err_t err
    cdef bint subscribed = bool(c._membership.subscription)
    if c.auto_commit:
        c._store_positions(None)
    c._assignment.begin()
    with nogil:
        err = rd_kafka_unsubscribe(c.rk)
    c._assignment.end()
    c._membership.unsubscribed()
    if err:
        c._raise(err, "unsubscribe")
    if subscribed:
        _serve_revoke_held(c)
    else:  # as in Java, unsubscribe() also clears partitions given to assign()
        c.assign([])


cdef _member_rejoin(NativeConsumer c):
    """REJOINING -> JOINED: leaves the group and joins it again with the same subscription: the
    listener gets on_partitions_revoked for what the member holds (it may commit), no record is
    handed out meanwhile, and the next poll()s join."""
    cdef rd_kafka_resp_err_t err
    c._membership.rejoined()
    topics = sorted(c._membership.subscription)
    if not topics:
        return
    if c.auto_commit:
        c._store_positions(None)
    c._assignment.begin()
    with nogil:
        err = rd_kafka_unsubscribe(c.rk)
    c._assignment.end()
    if err:
        c._raise(err, "rejoin (unsubscribe)")
    _serve_revoke_held(c)
    _rdk_subscribe(c, topics, "rejoin (subscribe)")
    c._membership.rejoin_subscribed()


cdef _serve_revoke_held(NativeConsumer c):
    """After rd_kafka_unsubscribe(): serves the revoke now (the listener runs inside the caller, as in
    Java), handing out no record meanwhile (it would be lost to the application, its position
    advanced past)."""
    deadline = kc_now_ms() + c.default_api_timeout_ms
    c.core.hold_records = 1
    try:
        while c.core.fb.n and kc_now_ms() < deadline:
            c._poll_core(KC_WAIT_SLICE_MS)
            PyErr_CheckSignals()  # interrupted, the revoke is served by the next poll()
    finally:
        c.core.hold_records = 0


cdef _rdk_subscribe(NativeConsumer c, list topics, str what):
    cdef rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new(len(topics))
    cdef rd_kafka_resp_err_t err
    try:
        for t in topics:
            rd_kafka_topic_partition_list_add(lst, c_string(t, "topic"), RD_KAFKA_PARTITION_UA)
    except BaseException:
        rd_kafka_topic_partition_list_destroy(lst)
        raise
    err = rd_kafka_subscribe(c.rk, lst)
    rd_kafka_topic_partition_list_destroy(lst)
    if err:
        c._raise(err, what)


# ---------------------------------------------------------------- rebalance events (poll thread)
cdef void _on_rebalance(NativeConsumer c, rd_kafka_resp_err_t err,
                        rd_kafka_topic_partition_list_t *parts) except *:
    """One rebalance event, answered with the *assign() call librdkafka waits for."""
    if c._close.closing():
        _on_rebalance_closing(c, err, parts)
        return
    cdef bint cooperative = c._cooperative()
    cdef int64_t start_us = kc_now_us()
    tps = _tp_list(parts)
    kc_barrier_rebalanced(&c.core.barrier, start_us // 1000)
    try:
        if err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS and c._membership.subscription and _left_before_assign(c):
            _discard_stale_assignment(c, parts, tps, cooperative)
        elif err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            _serve_assignment(c, parts, tps, cooperative)
        else:
            _serve_revocation(c, err, parts, tps, cooperative)
    finally:
        c._membership.rebalance_timed(kc_now_us() - start_us)


cdef _serve_assignment(NativeConsumer c, rd_kafka_topic_partition_list_t *parts, list tps,
                       bint cooperative):
    cdef rd_kafka_error_t *error
    c._membership.assignment_received(tps, cooperative)
    _buffer_partitions(c, parts)
    _start_at_committed(c, parts)
    c._membership.assignment_served()
    c._assignment.begin()
    error = kc_answer_rebalance(c.rk, RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, parts, cooperative)
    c._assignment.end()
    _raise_error(error, "incremental assign")
    if cooperative and c._membership.stale_parts:
        _rejoin_if_stale_parts_kept(c)
    c._membership.assignment_counted()
    log.info("partitions assigned: %s", tps)
    c._membership.listener.assigned(tps)


cdef _serve_revocation(NativeConsumer c, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                       list tps, bint cooperative):
    cdef bint lost = rd_kafka_assignment_lost(c.rk)
    cdef kc_partition_t *p
    cdef int i
    for i in range(parts.cnt):
        p = kc_ps_find(&c.core.fb, parts.elems[i].topic, parts.elems[i].partition)
        if p != NULL:
            c._membership.records_dropped(p.len)
            kc_ps_purge(&c.core.fb, p)
    report = c._membership.revocation_received(tps)
    try:
        if not lost and c.auto_commit:
            c._store_positions(tps)
        if report or not tps:
            c._membership.listener.revoked(report, lost)
    finally:
        c._assignment.begin()
        _drop_error(kc_answer_rebalance(c.rk, err, parts, cooperative))
        c._assignment.end()
        for i in range(parts.cnt):
            kc_ps_remove(&c.core.fb, parts.elems[i].topic, parts.elems[i].partition)
        log.info("partitions %s: %s", "lost" if lost else "revoked", tps)


cdef bint _left_before_assign(NativeConsumer c) except -1:
    """True if this member has no member id while an assignment is being served: librdkafka left the
    group after the SyncGroup that produced the assignment and before the application polled. It
    still waits for the *assign() call (rdkafka_cgrp.c rd_kafka_cgrp_max_poll_interval_check_tmr_cb
    leaves and resets the member id, but skips the revoke while an assign call is pending), and would
    start fetching a generation that is gone: the partitions already belong to other members."""
    cdef char *mid = rd_kafka_memberid(c.rk)
    if mid == NULL:
        return False
    empty = mid[0] == 0
    rd_kafka_mem_free(c.rk, mid)
    return empty


cdef _discard_stale_assignment(NativeConsumer c, rd_kafka_topic_partition_list_t *parts, list tps,
                               bint cooperative):
    """Serves an assignment of a generation this member has left (see _left_before_assign): librdkafka
    gets exactly the *assign() call it waits for (docs/reliability.md, "Discarded assignments"), but
    nothing is fetched or handed out, the listener is not told of it, and the partitions the member
    still holds are lost (on_partitions_lost): as in Java, after the poll interval expired the member
    gives up its assignment and rejoins (librdkafka does on its next heartbeat). Until librdkafka's
    "lost" revoke, records fetched for partitions not in the buffer are dropped."""
    owned = sorted(c.assignment())
    c._assignment.begin()
    _drop_error(kc_answer_rebalance(c.rk, RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, parts, cooperative))
    c._assignment.end()
    c._membership.assignment_discarded(tps, owned)
    _drop_buffered_partitions(c)
    log.warning("assignment %s discarded: the member left the group (max.poll.interval.ms exceeded, or "
                "its session expired) before it was served; partitions lost: %s; rejoining", tps, owned)
    if owned:
        c._membership.listener.revoked(owned, True)


cdef _drop_buffered_partitions(NativeConsumer c):
    """Removes every partition from the fetch buffer, counting its records as revoked."""
    while c.core.fb.n:
        c._membership.records_dropped(kc_ps_at(&c.core.fb, 0).len)
        topic = <bytes>kc_ps_at(&c.core.fb, 0).topic
        kc_ps_remove(&c.core.fb, topic, kc_ps_at(&c.core.fb, 0).partition)


cdef int _buffer_partitions(NativeConsumer c, const rd_kafka_topic_partition_list_t *lst) except -1:
    """Adds lst's partitions to the fetch buffer (see kc_consumer_add_partition)."""
    cdef int i
    for i in range(lst.cnt):
        if kc_consumer_add_partition(c.core, lst.elems[i].topic, lst.elems[i].partition) == NULL:
            raise MemoryError()
    return 0


cdef int _start_at_committed(NativeConsumer c, const rd_kafka_topic_partition_list_t *lst) except -1:
    """Sets the floor of lst's newly assigned partitions to their committed offsets (see
    below_committed in consumer_core.c): as in Java, a new assignment starts at the committed offsets
    and fetched data of other positions is discarded, whatever librdkafka's fetcher delivers. The
    lookup (_committed_lookup) is bounded by a quarter of max.poll.interval.ms, at most 2 s; without
    an answer, nothing is filtered. Not interruptible: librdkafka waits for this event's answer."""
    cdef rd_kafka_topic_partition_list_t *q
    cdef kc_partition_t *p
    cdef int i
    cdef int tmo = <int>min(2000, max(100, c.max_poll_interval_ms // 4))
    if lst.cnt == 0:
        return 0
    q = rd_kafka_topic_partition_list_copy(lst)
    if q == NULL:
        raise MemoryError()
    try:
        err = _committed_lookup(c, q, kc_now_ms() + tmo, False)
        if err:
            log.debug("committed offsets of the new assignment not known (%s): not filtered",
                      _err_name(err))
            return 0
        for i in range(q.cnt):
            if q.elems[i].err or q.elems[i].offset < 0:
                continue
            p = kc_ps_find(&c.core.fb, q.elems[i].topic, q.elems[i].partition)
            if p != NULL:
                kc_ps_start_floor(p, q.elems[i].offset)
    finally:
        rd_kafka_topic_partition_list_destroy(q)
    return 0


cdef _rejoin_if_stale_parts_kept(NativeConsumer c):
    """Cooperative: partitions dropped by _discard_stale_assignment that librdkafka still holds once a
    new generation is assigned. librdkafka's "lost" revoke for them does not always come, it rejoins
    owning them, and the sticky assignor gives them back: nothing would ever fetch them for the
    application. The member rejoins from the next poll() instead (_member_rejoin): the partitions go
    to whoever the assignor picks and start from the committed offsets (docs/reliability.md)."""
    cdef rd_kafka_topic_partition_list_t *held = NULL
    if rd_kafka_assignment(c.rk, &held) != RD_KAFKA_RESP_ERR_NO_ERROR or held == NULL:
        return
    try:
        kept = sorted(tp for tp in _tp_list(held) if tp in c._membership.stale_parts)
    finally:
        rd_kafka_topic_partition_list_destroy(held)
    if kept:
        c._membership.rejoin_needed()
        log.warning("partitions %s were kept by the group for this member after a discarded "
                    "assignment, but are not fetched: rejoining the group", kept)
