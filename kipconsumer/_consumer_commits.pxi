# Commits: the offset store (auto-commit), commit-and-wait, AsyncCommits (commit_async()'s queue and
# callbacks), the committed-offset lookup, and the translation of refused commits into kipconsumer's errors
# (included by _consumer.pyx; AsyncCommits' fields in _consumer.pxd).


cdef int _check_commit_allowed(NativeConsumer c) except -1:
    """Refuses a commit the group would refuse: no group.id, or a member that left (KIP-62)."""
    if not c.has_group:
        raise CommitFailedError("commit requires group.id to be set")
    # max.poll.interval.ms governs group membership only: a consumer with a manual assign() is no
    # member and may take as long as it likes between polls (as in Java).
    if c._membership.subscription and (c._membership.has_left() or kc_poll_timer_expired(&c.core.poll_timer)
                            or rd_kafka_assignment_lost(c.rk)):
        raise CommitFailedError(COMMIT_FAILED_MESSAGE.format(interval=c.max_poll_interval_ms),
                                code="_MAX_POLL_EXCEEDED")
    return 0


cdef rd_kafka_topic_partition_list_t *_offsets_list(dict offsets) except NULL:
    """{TopicPartition: OffsetAndMetadata} -> a new librdkafka list (caller destroys)."""
    cdef rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new(max(1, len(offsets)))
    cdef rd_kafka_topic_partition_t *e
    cdef bytes md
    try:
        for tp, om in offsets.items():
            e = rd_kafka_topic_partition_list_add(lst, c_string(tp.topic, "topic"), tp.partition)
            e.offset = om.offset
            if om.metadata:
                md = om.metadata.encode()
                e.metadata = rd_kafka_mem_malloc(NULL, len(md))  # librdkafka frees it with the list
                if e.metadata == NULL:
                    raise MemoryError()
                memcpy(e.metadata, <char *>md, len(md))
                e.metadata_size = len(md)
    except BaseException:
        rd_kafka_topic_partition_list_destroy(lst)
        raise
    return lst


# how often a commit_sync() waiting for its result looks for a refused login or group
cdef int64_t _SECURITY_CHECK_MS = 250


cdef rd_kafka_resp_err_t _commit_and_wait(NativeConsumer c, rd_kafka_topic_partition_list_t *lst,
                                          int64_t deadline, bint interruptible,
                                          rd_kafka_event_t **result) except *:
    """Commits `lst` and waits until `deadline` (kc_now_ms clock) for the result event, stored in
    *result (NULL on timeout; the caller destroys it). Waits in slices, checking for signals between
    them when `interruptible` (the commit goes on if one interrupts). Returns the error of sending the
    commit, if any. When `interruptible` (commit_sync), every _SECURITY_CHECK_MS a refused login or
    group librdkafka reported meanwhile raises its typed error (_check_security) instead of the wait
    going on until librdkafka gives up on the coordinator."""
    cdef rd_kafka_queue_t *q = rd_kafka_queue_new(c.rk)
    cdef rd_kafka_resp_err_t err
    cdef int64_t step
    try:
        err = rd_kafka_commit_queue(c.rk, lst, q, NULL, NULL)
        if err:
            return err
        while True:
            step = deadline
            if interruptible and deadline - kc_now_ms() > _SECURITY_CHECK_MS:
                step = kc_now_ms() + _SECURITY_CHECK_MS
            result[0] = _await_event(q, step, interruptible)
            if result[0] != NULL or kc_now_ms() >= deadline:
                return RD_KAFKA_RESP_ERR_NO_ERROR
            _check_security(c, "commit_sync")
    finally:
        rd_kafka_queue_destroy(q)


cdef tuple _result_error(rd_kafka_event_t *ev):
    """(error, where) of a commit result event: the request's error, else the first partition's
    (`where` names it: " of topic-partition"); error 0 if the commit succeeded."""
    cdef rd_kafka_resp_err_t err = rd_kafka_event_error(ev)
    cdef rd_kafka_topic_partition_list_t *res = rd_kafka_event_topic_partition_list(ev)
    cdef int i
    if err or res == NULL:
        return err, ""
    for i in range(res.cnt):
        if res.elems[i].err:
            return res.elems[i].err, f" of {res.elems[i].topic.decode()}-{res.elems[i].partition}"
    return RD_KAFKA_RESP_ERR_NO_ERROR, ""


# KIP-848: how long commit_sync() waits before it sends a commit refused for a stale epoch again
cdef int _STALE_EPOCH_BACKOFF_MS = 50


cdef bint _stale_member_epoch(rd_kafka_event_t *ev):
    """A commit result refused with STALE_MEMBER_EPOCH (KIP-848), as a whole or for a partition."""
    cdef rd_kafka_topic_partition_list_t *res = rd_kafka_event_topic_partition_list(ev)
    cdef int i
    if _err_name(rd_kafka_event_error(ev)) == "STALE_MEMBER_EPOCH":
        return True
    if res != NULL:
        for i in range(res.cnt):
            if res.elems[i].err and _err_name(res.elems[i].err) == "STALE_MEMBER_EPOCH":
                return True
    return False


cdef _commit_result(NativeConsumer c, rd_kafka_event_t *ev, str what):
    """Raises the typed error of a failed commit result event (_commit_error)."""
    err, where = _result_error(ev)
    if err:
        _commit_error(c, err, what + where)


cdef _commit_error(NativeConsumer c, rd_kafka_resp_err_t err, str what):
    """Raises the error a refused commit means for the application: RebalanceInProgressError
    (retriable: poll() completes the rebalance, then commit again), CommitFailedError (the member is
    no longer in the group's generation) or KafkaError/KafkaTimeoutError."""
    c._membership.commit_failed()
    if (err in (RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION,
                RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID)
            and c._membership.subscription and not c._close.closing()):
        # The group is rebalancing, or has moved on without this member: hold records back until the
        # rebalance is served (kc_consumer_rebalance_pending), as when a heartbeat learns it.
        kc_barrier_commit_refused(&c.core.barrier, kc_now_ms())
    if (err == RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION and c._membership.subscription
            and not c._membership.has_left()
            and c._cooperative() and not rd_kafka_assignment_lost(c.rk)):
        # Cooperative: the commit carried the generation before a rebalance this member takes part in
        # (it keeps its partitions). As in Java, retriable.
        raise RebalanceInProgressError(
            f"{what} failed: the consumer's generation is stale because the group is completing "
            f"a rebalance this member takes part in. Call poll() to complete the rebalance, "
            f"then retry the commit.", code=_err_name(err))
    if _err_name(err) == "STALE_MEMBER_EPOCH":
        raise RebalanceInProgressError(
            f"{what} failed: the member epoch it carried is stale because the group is reconciling "
            f"this member's assignment (KIP-848). Call poll(), then retry the commit.",
            code=_err_name(err))
    if err == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS:
        if c._membership.listener.running:
            hint = ("The coordinator refused it while the group is joining (Kafka accepts "
                    "commits from current members then; librdkafka's mock cluster does not): "
                    "records after the last successful commit will be redelivered.")
        else:
            hint = ("Call poll() to complete the rebalance (commit in on_partitions_revoked), "
                    "then retry.")
        raise RebalanceInProgressError(
            f"{what} failed: offset commit cannot be completed since the consumer group is "
            f"rebalancing. {hint}", code=_err_name(err))
    _check_security(c, what)  # a commit that failed because the login or the group was refused
    refused = c._security.group_refused
    if refused is not None and _err_name(err) == "_WAIT_COORD":
        # librdkafka found no coordinator because the group's ACLs refused it (poll() said so)
        raise GroupAuthorizationError(f"{what} failed: {refused}", code="GROUP_AUTHORIZATION_FAILED",
                                      group_id=refused.group_id)
    if err in _GROUP_GONE_ERRORS or err == RD_KAFKA_RESP_ERR__STATE:
        if (c._membership.has_left() or c._membership.poll_interval_expiries
                or kc_poll_timer_expired(&c.core.poll_timer)):
            why = COMMIT_FAILED_MESSAGE.format(interval=c.max_poll_interval_ms)
        else:
            why = ("The group rebalanced (a member joined, left or was evicted) and this "
                   "member's generation is no longer current; its partitions may have moved "
                   "to another member. Commit in on_partitions_revoked to avoid redelivery.")
        raise CommitFailedError(
            f"{what} failed with {_err_name(err)}: the member is no longer part of the "
            f"group's current generation. {why}", code=_err_name(err))
    c._raise(err, what)


cdef class AsyncCommits:
    """commit_async()'s result queue (it wakes the consumer's eventfd, so an event loop waiting on it
    learns of results without polling) and the callbacks waiting for those results, each under the key
    its commit carries as librdkafka's opaque. `in_callback` > 0 while a callback runs: the consumer
    refuses poll(), subscribe(), unsubscribe(), assign() and close() there."""

    def __cinit__(self):
        self.callbacks = {}

    cdef void open(self, rd_kafka_t *rk, int wake_fd) noexcept:
        self.q = rd_kafka_queue_new(rk)
        rd_kafka_queue_io_event_enable(self.q, wake_fd, &_COMMIT_EVENT, sizeof(_COMMIT_EVENT))

    cdef long sent(self, object callback, dict offsets) except -1:
        """The key of a commit about to be sent; its result runs `callback` (None: nothing to run)."""
        self.seq += 1
        self.callbacks[self.seq] = (callback, offsets, None)
        return self.seq

    cdef completed(self, object callback):
        """An empty commit: complete at once, its callback runs on the next serve."""
        self.seq += 1
        self.callbacks[-self.seq] = (callback, {}, None)

    cdef forget(self, long key):
        """The commit of `key` was not sent."""
        del self.callbacks[key]

    cdef run(self, object callback, dict offsets, object exc):
        self.in_callback += 1
        try:
            callback(offsets, exc)
        finally:
            self.in_callback -= 1

    cdef void detach(self) noexcept:
        """Stops results from writing to the eventfd, which the core closes when freed."""
        if self.q != NULL:
            rd_kafka_queue_io_event_enable(self.q, -1, NULL, 0)

    cdef void destroy(self) noexcept:
        self.detach()
        if self.q != NULL:
            rd_kafka_queue_destroy(self.q)
            self.q = NULL


cdef _serve_commit_callbacks(NativeConsumer c, int timeout_ms=0):
    """Runs the callbacks of commit_async() calls whose results librdkafka reported."""
    cdef AsyncCommits commits = c._commits
    cdef rd_kafka_event_t *ev
    cdef long key
    while commits.callbacks:
        with nogil:
            ev = rd_kafka_queue_poll(commits.q, timeout_ms)
        if ev == NULL:
            break
        key = <long>rd_kafka_event_opaque(ev)
        entry = commits.callbacks.pop(key, None)
        exc = None
        try:
            _commit_result(c, ev, "commit_async")
        except KafkaError as e:
            exc = e
        finally:
            rd_kafka_event_destroy(ev)
        if entry is not None and entry[0] is not None:
            commits.run(entry[0], entry[1], exc)
    # empty commits complete at once
    for key in [k for k in commits.callbacks if k < 0]:
        cb, offs, _ = commits.callbacks.pop(key)
        commits.run(cb, offs, None)


cdef _finish_commit_callbacks(NativeConsumer c):
    """Runs every commit_async() callback still due, once: the results librdkafka has (all of them once
    its close is done: it waits for commits in flight), a KafkaTimeoutError for the others."""
    cdef AsyncCommits commits = c._commits
    _serve_commit_callbacks(c, 0)
    for key in list(commits.callbacks):
        cb, offsets, _ = commits.callbacks.pop(key)
        if cb is not None:
            try:
                commits.run(cb, offsets,
                            KafkaTimeoutError("the commit did not complete before close() returned"))
            except BaseException as exc:
                c._keep_exception(exc)


cdef rd_kafka_resp_err_t _committed_lookup(NativeConsumer c, rd_kafka_topic_partition_list_t *lst,
                                           int64_t deadline, bint interruptible) except *:
    """Fills lst's offsets (and metadata) with the group's committed offsets (RD_KAFKA_OFFSET_INVALID
    where none), waiting until `deadline` (kc_now_ms clock); in slices checking for signals when
    `interruptible`. Asked with librdkafka's ListConsumerGroupOffsets on a queue of its own (the
    group's OffsetFetch, as rd_kafka_committed() sends; stable offsets only with read_committed, as
    KIP-447 requires). Returns the request's or the group's error; RD_KAFKA_RESP_ERR__TIMED_OUT when
    no answer came in time."""
    cdef rd_kafka_ListConsumerGroupOffsets_t *req = NULL
    cdef rd_kafka_AdminOptions_t *opts = NULL
    cdef rd_kafka_queue_t *q = NULL
    cdef rd_kafka_event_t *ev = NULL
    cdef rd_kafka_topic_partition_list_t *ask = NULL
    cdef const rd_kafka_group_result_t **groups
    cdef const rd_kafka_topic_partition_list_t *res
    cdef const rd_kafka_error_t *gerr
    cdef rd_kafka_topic_partition_t *e
    cdef rd_kafka_error_t *error
    cdef rd_kafka_resp_err_t err
    cdef size_t cnt = 0
    cdef char errstr[256]
    cdef int i
    for i in range(lst.cnt):
        lst.elems[i].offset = RD_KAFKA_OFFSET_INVALID
    ask = rd_kafka_topic_partition_list_copy(lst)
    if ask == NULL:
        raise MemoryError()
    try:
        req = rd_kafka_ListConsumerGroupOffsets_new(c._group_id, ask)
        opts = rd_kafka_AdminOptions_new(c.rk, RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS)
        if req == NULL or opts == NULL:
            raise MemoryError()
        rd_kafka_AdminOptions_set_request_timeout(opts, _admin_request_timeout_ms(deadline), errstr,
                                                  sizeof(errstr))
        if c._read_committed:
            error = rd_kafka_AdminOptions_set_require_stable_offsets(opts, 1)
            if error != NULL:
                rd_kafka_error_destroy(error)
        q = rd_kafka_queue_new(c.rk)
        rd_kafka_ListConsumerGroupOffsets(c.rk, &req, 1, opts, q)
        ev = _await_event(q, deadline, interruptible)
        if ev == NULL:
            return RD_KAFKA_RESP_ERR__TIMED_OUT
        err = rd_kafka_event_error(ev)
        if err:
            return err
        groups = rd_kafka_ListConsumerGroupOffsets_result_groups(
            rd_kafka_event_ListConsumerGroupOffsets_result(ev), &cnt)
        if cnt < 1:
            raise KafkaError("committed: librdkafka returned no result for the group")
        gerr = rd_kafka_group_result_error(groups[0])
        if gerr != NULL:
            return rd_kafka_error_code(gerr)
        res = rd_kafka_group_result_partitions(groups[0])
        for i in range(res.cnt if res != NULL else 0):
            e = rd_kafka_topic_partition_list_find(lst, res.elems[i].topic, res.elems[i].partition)
            if e == NULL:
                continue
            e.err = res.elems[i].err
            e.offset = res.elems[i].offset if res.elems[i].offset >= 0 else RD_KAFKA_OFFSET_INVALID
            if res.elems[i].metadata != NULL and res.elems[i].metadata_size and e.metadata == NULL:
                e.metadata = rd_kafka_mem_malloc(NULL, res.elems[i].metadata_size)  # librdkafka frees it with lst
                if e.metadata != NULL:
                    memcpy(e.metadata, res.elems[i].metadata, res.elems[i].metadata_size)
                    e.metadata_size = res.elems[i].metadata_size
        return RD_KAFKA_RESP_ERR_NO_ERROR
    finally:
        if ev != NULL:
            rd_kafka_event_destroy(ev)
        if q != NULL:
            rd_kafka_queue_destroy(q)
        if opts != NULL:
            rd_kafka_AdminOptions_destroy(opts)
        if req != NULL:
            rd_kafka_ListConsumerGroupOffsets_destroy(req)
        rd_kafka_topic_partition_list_destroy(ask)
