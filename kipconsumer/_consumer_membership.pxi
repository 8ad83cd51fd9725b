# Group membership: Membership (MemberState and its transitions), the librdkafka calls that change it,
# and the rebalance events librdkafka hands to poll()
# (included by _consumer.pyx; MemberState and Membership's fields in _consumer.pxd).
#
#   UNJOINED --subscribe--> JOINED --poll interval expired / stale assignment--> LEFT
#   LEFT --assignment served--> JOINED --partitions of a discarded assignment kept--> REJOINING
#   REJOINING --next poll(): unsubscribe + subscribe--> JOINED        any --unsubscribe--> UNJOINED


cdef class Membership:
    """The consumer's place in its group (MemberState) and what goes with it: the subscription, the
    partitions of a discarded assignment, the rebalance listener and the membership counters. Each
    state transition is one method here, the only code that assigns the state; the librdkafka calls
    that cause them are the functions below, which call these once librdkafka has accepted them."""

    def __cinit__(self):
        self.subscription = set()
        self.stale_parts = set()
        self.listener = ListenerInvoker(None)
        self.state = MEMBER_UNJOINED

    cdef subscribed(self, list topics, object listener):
        """UNJOINED -> JOINED (a new subscription replaces the old one; LEFT/REJOINING are kept)."""
        self.listener = ListenerInvoker(listener)
        self.subscription = set(topics)
        if self.state == MEMBER_UNJOINED:
            self.state = MEMBER_JOINED

    cdef unsubscribed(self):
        """any -> UNJOINED."""
        self.subscription = set()
        self.state = MEMBER_UNJOINED

    cdef void left(self) noexcept:
        """JOINED/REJOINING -> LEFT: librdkafka left the group without the application (it rejoins on
        the next poll by itself). Buffered records are dropped: their partitions belong to others now."""
        self.state = MEMBER_LEFT

    cdef void poll_interval_expired(self) noexcept:
        """-> LEFT because poll() was not called within max.poll.interval.ms (KIP-62)."""
        self.poll_interval_expiries += 1
        self.left()

    cdef void assignment_served(self) noexcept:
        """LEFT -> JOINED: an assignment of the current generation is being served."""
        if self.state == MEMBER_LEFT:
            self.state = MEMBER_JOINED

    cdef void rejoin_needed(self) noexcept:
        """JOINED -> REJOINING (see _rejoin_if_stale_parts_kept)."""
        self.state = MEMBER_REJOINING

    cdef void rejoined(self) noexcept:
        """REJOINING -> JOINED: as _member_rejoin starts to leave and join the group again."""
        self.state = MEMBER_JOINED


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
    with nogil:
        err = rd_kafka_unsubscribe(c.rk)
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
    with nogil:
        err = rd_kafka_unsubscribe(c.rk)
    if err:
        c._raise(err, "rejoin (unsubscribe)")
    _serve_revoke_held(c)
    _rdk_subscribe(c, topics, "rejoin (subscribe)")
    c._membership.stale_parts.clear()


cdef _serve_revoke_held(NativeConsumer c):
    """After rd_kafka_unsubscribe(): serves the revoke now (the listener runs inside the caller, as in
    Java), handing out no record meanwhile (it would be lost to the application, its position
    advanced past)."""
    deadline = kc_now_ms() + c.default_api_timeout_ms
    c.core.hold_records = 1
    try:
        while c.core.fb.n and kc_now_ms() < deadline:
            c._poll_core(_SIGNAL_SLICE_MS)
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
    c.core.barrier.last_rebalance_ms = start_us // 1000
    try:
        if err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS and c._membership.subscription and _left_before_assign(c):
            _discard_stale_assignment(c, parts, tps, cooperative)
        elif err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            _serve_assignment(c, parts, tps, cooperative)
        else:
            _serve_revocation(c, err, parts, tps, cooperative)
    finally:
        c._membership.rebalance_us += kc_now_us() - start_us


cdef _serve_assignment(NativeConsumer c, rd_kafka_topic_partition_list_t *parts, list tps,
                       bint cooperative):
    if not cooperative:
        c._membership.stale_parts.clear()
    c._membership.stale_parts.difference_update(tps)
    _buffer_partitions(c, parts)
    _start_at_committed(c, parts)
    c._membership.assignment_served()
    _raise_error(kc_answer_rebalance(c.rk, RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, parts, cooperative),
                 "incremental assign")
    if cooperative and c._membership.stale_parts:
        _rejoin_if_stale_parts_kept(c)
    c._membership.rebalances += 1
    log.info("partitions assigned: %s", tps)
    c._membership.listener.assigned(tps)


cdef _serve_revocation(NativeConsumer c, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                       list tps, bint cooperative):
    cdef bint lost = rd_kafka_assignment_lost(c.rk)
    cdef kc_partition_t *p
    cdef int i
    for i in range(parts.cnt):
        p = kc_fb_find(&c.core.fb, parts.elems[i].topic, parts.elems[i].partition)
        if p != NULL:
            c._membership.revoked_records_dropped += p.len
            kc_fb_purge(&c.core.fb, p)
    # partitions of a discarded assignment were never reported, or were already reported lost
    report = [tp for tp in tps if tp not in c._membership.stale_parts] if c._membership.stale_parts else tps
    c._membership.stale_parts.difference_update(tps)
    try:
        if not lost and c.auto_commit:
            c._store_positions(tps)
        if report or not tps:
            c._membership.listener.revoked(report, lost)
    finally:
        _drop_error(kc_answer_rebalance(c.rk, err, parts, cooperative))
        for i in range(parts.cnt):
            kc_fb_remove(&c.core.fb, parts.elems[i].topic, parts.elems[i].partition)
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
    _drop_error(kc_answer_rebalance(c.rk, RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, parts, cooperative))
    c._membership.stale_parts.update(tps)
    c._membership.stale_parts.update(owned)
    _drop_buffered_partitions(c)
    c._membership.left()
    log.warning("assignment %s discarded: the member left the group (max.poll.interval.ms exceeded, or "
                "its session expired) before it was served; partitions lost: %s; rejoining", tps, owned)
    if owned:
        c._membership.listener.revoked(owned, True)


cdef _drop_buffered_partitions(NativeConsumer c):
    """Removes every partition from the fetch buffer, counting its records as revoked."""
    while c.core.fb.n:
        c._membership.revoked_records_dropped += c.core.fb.parts[0].len
        topic = <bytes>c.core.fb.parts[0].topic
        kc_fb_remove(&c.core.fb, topic, c.core.fb.parts[0].partition)


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
            p = kc_fb_find(&c.core.fb, q.elems[i].topic, q.elems[i].partition)
            if p != NULL and p.position == KC_POSITION_UNKNOWN and p.len == 0:
                p.filters.floor = q.elems[i].offset
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
