# Table of contents of the native consumer (kipconsumer/_consumer.pyx and the unit files it includes):
# the C declarations only the consumer uses, its two state machines (MemberState, ClosePhase) and the
# classes that own its state, each with its fields and methods. NativeConsumer holds one of each.
# Every field of these classes is written only by the class's own methods (one writer per state,
# tests/test_consumer_structure.py); a state machine's state moves only through its one guarded
# transition method, move(), which raises kipconsumer._transition.IllegalTransitionError (naming both
# states) for a move its table forbids. The rest of the consumer reads the fields and the inline queries. The classes are final, so these
# calls compile to direct C calls: the poll path does no Python attribute lookup for them.
#
#   class            owns                                                 method bodies in
#   CloseControl     ClosePhase, close()'s deadline and queue, request    _consumer_close.pxi
#   Membership       MemberState, subscription, stale partitions, the     _consumer_membership.pxi
#                    ListenerInvoker, the membership counters
#   ListenerInvoker  the application's rebalance listener, `running`      _consumer_listener.pxi
#   AsyncCommits     commit_async()'s queue, callbacks, keys, in_callback  _consumer_commits.pxi
#   SecurityHold     error_cb's security reports, the held typed errors   kipconsumer/_security_hold.py
#                    (one implementation for every client: a Python object)
#   StableOffsets    read_committed current_lag()'s ListOffsets answers   _consumer_offsets.pxi
#   AssignmentChanges the owner's changes of librdkafka's assignment     _consumer_assignment.pxi
#                    (metrics()' lookups wait for none)
#   _Handle          the rd_kafka_t's lifetime (or its hand-over to the reaper)  _consumer.pyx
#   NativeConsumer   the handle, the C core, the configuration, the API   _consumer.pyx; the functions
#                    kipconsumer.consumer calls                           (c, ...) of the .pxi files
#                                                                         are its operations
#
# The C core's per-partition state (kc_partition_t: position, stored offset, pause, trust, fetch
# stop/restart, filter state) and the rebalance barrier are C's (csrc/partition_state.h,
# csrc/rebalance_barrier.h, declared in kipconsumer/_core.pxd): Cython reads their fields and changes
# them only through their setters (kc_ps_*, kc_barrier_*).
cimport cython
from libc.stdint cimport int32_t, int64_t

from posix.types cimport pid_t

from kipconsumer._core cimport kc_consumer_t, kc_heartbeat_monitor_t, kc_partition_t, kc_poll_status_t
from kipconsumer._records cimport ConsumerRecords
from kipconsumer._rdk cimport (rd_kafka_error_t, rd_kafka_message_t, rd_kafka_queue_t, rd_kafka_resp_err_t,
                               rd_kafka_t, rd_kafka_topic_partition_list_t)


# The *assign() answer to a rebalance event, for poll(), close() and the reaper (csrc/rebalance.h).
cdef extern from "rebalance.h" nogil:
    rd_kafka_error_t *kc_answer_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                          const rd_kafka_topic_partition_list_t *parts, int cooperative)


# What close() leaves to a thread of its own: librdkafka's close, the core's and the handle's
# destruction (csrc/consumer_close.h).
cdef extern from "consumer_close.h" nogil:
    ctypedef struct kc_reaper_t:
        kc_heartbeat_monitor_t *hb
    int kc_close_drain_stale(rd_kafka_queue_t *q)
    kc_reaper_t *kc_reaper_new(rd_kafka_t *rk, rd_kafka_queue_t *q, kc_consumer_t *core, int cooperative,
                               int unassigned)
    void kc_reaper_start(kc_reaper_t *r)


cdef enum MemberState:
    # The consumer's place in its group (Membership, _consumer_membership.pxi).
    MEMBER_UNJOINED = 0   # no subscription: manual assign() or nothing; max.poll.interval.ms does not apply
    MEMBER_JOINED = 1     # subscribed; librdkafka joins or is a member, assignments are served
    MEMBER_LEFT = 2       # librdkafka left the group (poll interval expired, or an assignment of a generation
                          # it had left was discarded): commits raise CommitFailedError; the next poll rejoins
    MEMBER_REJOINING = 3  # partitions of a discarded assignment were kept by the group: the next poll() leaves
                          # and joins again


cdef enum ClosePhase:
    # Where close() is (CloseControl, _consumer_close.pxi).
    CLOSE_OPEN = 0        # not closing
    CLOSE_SETTLING = 1    # cooperative: letting a rebalance the member takes part in complete first
    CLOSE_REVOKING = 2    # librdkafka's close started; the final revoke (listener may commit) not yet served
    CLOSE_UNASSIGNED = 3  # the final revoke was answered (full unassign); librdkafka commits, leaves, terminates
    CLOSE_DONE = 4        # closed: every method but close()/wakeup()/metrics() raises IllegalStateError


@cython.final
cdef class CloseControl:
    # Where close() is, and what the calls made inside it share (_consumer_close.pxi). The one writer
    # of its fields: `phase` moves only through move(), which refuses an illegal move; everything else
    # reads it through the queries.
    cdef readonly ClosePhase phase
    cdef int64_t deadline_ms             # REVOKING/UNASSIGNED: when close() must return (kc_now_ms clock)
    cdef rd_kafka_queue_t *q             # REVOKING/UNASSIGNED: the queue librdkafka's close posts events to
    cdef bint requested                  # close() from another thread waits for the running call

    cpdef int move(self, ClosePhase to) except -1
    cdef int settling(self) except -1
    cdef int revoking(self, int64_t deadline_ms, rd_kafka_queue_t *q) except -1
    cdef int unassigned(self) except -1
    cdef int done(self) except -1
    cdef void request(self) noexcept

    cdef inline bint is_open(self) noexcept:
        return self.phase == CLOSE_OPEN

    cdef inline bint closing(self) noexcept:
        """Past the settle, not closed: listeners may still commit; rebalance events are the close's."""
        return self.phase == CLOSE_REVOKING or self.phase == CLOSE_UNASSIGNED

    cdef inline bint is_unassigned(self) noexcept:
        return self.phase == CLOSE_UNASSIGNED

    cdef inline bint is_done(self) noexcept:
        return self.phase == CLOSE_DONE


cdef class _Handle:
    # Owns the rd_kafka_t: destroys it when the consumer and every batch holding its messages are gone.
    cdef rd_kafka_t *rk
    cdef kc_reaper_t *reaper             # set: the rest of the close and the destruction go to the reaper
    cdef kc_heartbeat_monitor_t *hb      # the core's heartbeat monitor, freed after rd_kafka_destroy
    cdef pid_t pid                       # the process rk belongs to: elsewhere it is leaked (_process.pxd)


cdef class ListenerInvoker:
    # Calls the application's rebalance listener (_consumer_listener.pxi).
    cdef object listener          # the RebalanceListener, or None
    cdef int running              # > 0 while a listener method runs (poll()/close() are refused there)

    cdef assigned(self, list tps)
    cdef revoked(self, list tps, bint lost)


@cython.final
cdef class StableOffsets:
    # read_committed current_lag(): last stable offsets asked for without waiting (_consumer_offsets.pxi).
    cdef rd_kafka_queue_t *q             # answers of the ListOffsets requests (made on the first one)
    cdef dict known                      # TopicPartition -> last stable offset last answered
    cdef set pending                     # TopicPartitions with a request in flight
    cdef bint closed                     # destroy() ran: no queue and no request any more

    cdef serve_answers(self)
    cdef request(self, rd_kafka_t *rk, const char *topic, int32_t partition, object tp)
    cdef void destroy(self) noexcept


@cython.final
cdef class AssignmentChanges:
    # The owner thread's changes of librdkafka's assignment (_consumer_assignment.pxi): metrics() looks
    # partitions up in librdkafka only between them (_may_look_up).
    cdef readonly unsigned long seq      # +1 when a change starts, +1 when it ends: odd while one runs

    cdef void begin(self) noexcept
    cdef void end(self) noexcept

    cdef inline bint none_since(self, unsigned long mark) noexcept:
        """No change ran when `seq` was `mark`, and none started since."""
        return self.seq == mark and mark % 2 == 0


@cython.final
cdef class AsyncCommits:
    # commit_async()'s results and the callbacks waiting for them (_consumer_commits.pxi).
    cdef rd_kafka_queue_t *q             # results of commit_async(); wakes the consumer's eventfd
    cdef dict callbacks                  # key -> (callback, offsets, None); key < 0: an empty commit (done)
    cdef long seq                        # last key
    cdef int in_callback                 # > 0 while a callback runs

    cdef void open(self, rd_kafka_t *rk, int wake_fd) noexcept
    cdef long sent(self, object callback, dict offsets) except -1
    cdef completed(self, object callback)
    cdef forget(self, long key)
    cdef run(self, object callback, dict offsets, object exc)
    cdef void detach(self) noexcept
    cdef void destroy(self) noexcept


@cython.final
cdef class Membership:
    # The consumer's place in its group and what goes with it (_consumer_membership.pxi). The one
    # writer of every field below: the consumer reports events to its methods, and `state` moves only
    # through move(), which refuses an illegal move; the rest reads the fields and the queries.
    cdef readonly MemberState state
    cdef set subscription                # the topics of subscribe(), empty when unsubscribed
    cdef set stale_parts                 # partitions of a discarded assignment librdkafka may still hold
    cdef ListenerInvoker listener        # the application's rebalance listener
    # the membership counters (readonly: written by the methods below only)
    cdef readonly long rebalances        # assignments served
    cdef readonly int64_t rebalance_us   # time spent serving rebalance events (listener included)
    cdef readonly long commit_failures   # commits (sync or async) the broker or librdkafka refused
    cdef readonly long poll_interval_expiries   # times librdkafka left the group for max.poll.interval.ms
    cdef readonly long stale_epoch_retries      # commit_sync() retries after STALE_MEMBER_EPOCH (KIP-848)
    cdef readonly long revoked_records_dropped  # buffered records dropped with their revoked or lost partitions

    cpdef int move(self, MemberState to) except -1
    cdef int subscribed(self, list topics, object listener) except -1
    cdef int unsubscribed(self) except -1
    cdef int poll_interval_expired(self) except -1
    cdef int assignment_discarded(self, list tps, list owned) except -1
    cdef int assignment_received(self, list tps, bint cooperative) except -1
    cdef int assignment_served(self) except -1
    cdef list revocation_received(self, list tps)
    cdef int rejoin_needed(self) except -1
    cdef int rejoined(self) except -1
    cdef void rejoin_subscribed(self) noexcept
    cdef void assignment_counted(self) noexcept
    cdef void rebalance_timed(self, int64_t us) noexcept
    cdef void records_dropped(self, size_t n) noexcept
    cdef void commit_failed(self) noexcept
    cdef void stale_epoch_retried(self) noexcept

    cdef inline bint has_left(self) noexcept:
        return self.state == MEMBER_LEFT

    cdef inline bint rejoin_pending(self) noexcept:
        return self.state == MEMBER_REJOINING


cdef class NativeConsumer:
    # --- the librdkafka handle and the C core (csrc/consumer_core.h)
    cdef rd_kafka_t *rk
    cdef _Handle _handle                 # destroys rk once no batch holds its messages
    cdef kc_consumer_t *core             # fetch buffer, poll timer, heartbeat monitor, eventfd
    cdef rd_kafka_message_t **out        # max.poll.records slots for one poll's records
    cdef pid_t pid                       # the process rk belongs to: elsewhere it is leaked (_process.pxd)
    # --- configuration
    cdef readonly int64_t max_poll_interval_ms
    cdef readonly int64_t default_api_timeout_ms
    cdef readonly bint auto_commit
    cdef readonly bint has_group         # the application gave a group.id
    cdef bytes _group_id                 # group.id (or the private one of an assign-only consumer)
    cdef bint _cooperative_cfg           # cooperative-sticky, or group.protocol=consumer (KIP-848)
    cdef bint _read_committed            # isolation.level=read_committed (stable offsets only)
    cdef int _reset_policy               # auto.offset.reset: RESET_LATEST, RESET_EARLIEST or RESET_NONE
    cdef object _key_deser               # key.deserializer / value.deserializer (None: raw bytes),
    cdef object _value_deser             # handed to every batch poll() returns
    cdef int64_t _session_timeout_ms     # for the close settle's bound
    cdef int64_t _heartbeat_interval_ms  # for the close settle's bound
    # --- the state of each concern, owned by its class (see the table above)
    cdef Membership _membership          # MemberState, subscription, listener, counters
    cdef AsyncCommits _commits           # commit_async()'s result queue and callbacks
    cdef CloseControl _close             # ClosePhase, close()'s deadline and queue, request_close()
    cdef object _security                # SecurityHold: refused logins and groups, raised by poll() and
                                         # the calls (kipconsumer._security_hold)
    cdef StableOffsets _lso              # current_lag()'s last stable offsets (read_committed)
    cdef AssignmentChanges _assignment   # the owner's *assign() calls, for metrics()' lookups
    # --- poll and the rest
    cdef bint _in_poll                   # inside poll()'s wait loop (a signal handler may run there)
    cdef object _pending_exc             # an exception of a callback, raised when the call returns
    cdef ConsumerRecords _last_batch     # what the last poll() returned, until the next one starts:
    cdef int64_t _last_gen               # unreturn() rewinds it if it never reached the caller (core.polls)
    cdef object _stats_cb                # the application's stats_cb(json: str), or None
    cdef object _stats                   # summary of the last statistics (kipconsumer._stats), or None

    cdef int _check_open(self) except -1
    cdef int _check_not_in_callback(self, str method) except -1
    cdef object _raise(self, rd_kafka_resp_err_t err, str what, str detail=*, tuple topics=*)
    cdef _raise_pending(self)
    cdef _keep_exception(self, BaseException exc)
    cdef bint _cooperative(self) noexcept
    cdef _store_positions(self, object only)
    cdef kc_poll_status_t _poll_core(self, int timeout_ms) except *
    cdef void _destroy(self) noexcept
    cdef _on_stats(self, str doc)
