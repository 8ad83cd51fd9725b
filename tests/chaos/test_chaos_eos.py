"""Exactly-once chaos: a transactional Pipeline group on Tansu under member and broker faults.

A producer in this process writes N records (value: a unique id) to a 6-partition source topic of a
Tansu broker while 3 member processes (``eos_member.py``: ``Pipeline`` with
``processing.guarantee=exactly_once_v2``) turn each into one output record ``out-<id>`` on a
6-partition sink topic. Faults, drawn at random (seeded): SIGKILL a member and restart its slot (same
transactional.id, so the new process fences the old one and aborts its open transaction), stall a
member inside its poll loop past ``max.poll.interval.ms`` (SIGUSR1), freeze a member from outside
past it (SIGSTOP, SIGCONT: a zombie that resumes mid-transaction), replace a member (SIGTERM, then a
new member with a new transactional.id), and freeze the broker (SIGSTOP Tansu for longer than the
request timeout, so sends and commits time out). Tansu keeps its log in memory, so it cannot be
restarted, and it has one node, so the coordinator cannot move.

Made deterministic (docs/reliability.md): the first fault is a kill of a member holding an open
transaction with outputs written (SIGUSR2), retried until its successor's ABORT marker is seen; kills,
replacements, stalls and freezes wait until every member reports librdkafka's join state ``steady``
(Tansu 0.6 wedges a group whose elected leader leaves mid-rebalance, and a stalled or frozen member
leaves once its poll interval expired), else they are deferred; a replaced member's transactional.id
is fenced by the driver (Tansu 0.6 never expires an open transaction).

Workaround for the broker's wedge, should it still happen (e.g. a broker freeze meeting a stall): when
no member reported ``steady`` for ``KIP_EOS_CHAOS_WEDGE_S`` (25) seconds while nothing was frozen, the
driver restarts the members in a new group that starts from the old group's committed offsets
(``_recover_wedged_group``), at most 3 times, and counts it (``wedge_recoveries``).

The check: the sink topic read the way a read_committed consumer must read it -- from the COMMIT
and ABORT markers in its log (``tests/txn_log.py``), since Tansu 0.6 does not filter aborted
records for read_committed fetches -- holds every input exactly once: 0 lost, 0 duplicated. The
number of records in aborted transactions is reported (it is what a read_uncommitted reader would
see duplicated).

The classic protocol only: Tansu 0.6 does not serve KIP-848's ConsumerGroupHeartbeat and the
embedded broker (librdkafka's mock), which does, does not apply transactional offset commits.

CI size: ~40 s of faults (~55 s of wall time). ``KIP_EOS_CHAOS_SECONDS=300`` for a longer run;
``KIP_EOS_CHAOS_SEED`` varies the schedule; ``KIP_EOS_CHAOS_GATE=0`` lets member faults hit during
rebalances (to show the wedge); a small ``KIP_EOS_CHAOS_WEDGE_S`` (e.g. 0.3) forces recoveries. The
summary is printed (``pytest -s``) and written as JSON to ``$KIP_CHAOS_OUT`` (default: the tmp dir).
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kc_testing import Tansu
from txn_log import read_committed_log

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.testing import KafkaCluster

HERE = Path(__file__).resolve().parent
MEMBER = HERE / "eos_member.py"
PARTITIONS = 6
SLOTS = 3
CHAOS_SECONDS = float(os.environ.get("KIP_EOS_CHAOS_SECONDS", "40"))
SEED = int(os.environ.get("KIP_EOS_CHAOS_SEED", "5"))
FAULT_GAP_S = float(os.environ.get("KIP_EOS_CHAOS_FAULT_GAP", "2.5"))
MAX_POLL_INTERVAL_MS = 4000
FIRST_KILL_ATTEMPTS = 4
# no member steady for this long, none frozen: Tansu 0.6's wedged group (recovered by the driver)
WEDGE_S = float(os.environ.get("KIP_EOS_CHAOS_WEDGE_S", "25"))
MAX_RECOVERIES = 3
# 0: member faults do not wait for a stable group (to show the wedge and its recovery)
GATED = os.environ.get("KIP_EOS_CHAOS_GATE", "1") != "0"



class Members:
    """Member processes by slot; a slot's transactional.id survives a kill (not a replacement)."""

    def __init__(self, tmp: Path, bootstrap: str, source: str, sink: str, group: str,
                 protocol: str = "classic") -> None:
        self.tmp, self.bootstrap, self.source, self.sink, self.group = tmp, bootstrap, source, sink, group
        self.protocol = protocol
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.txids: dict[int, str] = {}
        self.exits: list[tuple[str, int | None]] = []
        self.started = 0
        self.last_steady = time.monotonic()  # the last time a member reported ``steady`` (SteadyWatch)

    def start(self, slot: int, new_id: bool = False) -> None:
        if new_id or slot not in self.txids:
            self.txids[slot] = f"{self.group}-tx-{slot}-{uuid.uuid4().hex[:6]}"
        self.started += 1
        out = open(self.tmp / f"m{self.started}.out", "wb")  # noqa: SIM115
        err = open(self.tmp / f"m{self.started}.err", "wb")  # noqa: SIM115
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent.parent), env.get("PYTHONPATH", "")])
        self.procs[slot] = subprocess.Popen(
            [sys.executable, str(MEMBER), "--bootstrap", self.bootstrap, "--source", self.source,
             "--sink", self.sink, "--group", self.group, "--txid", self.txids[slot],
             "--max-poll-interval-ms", str(MAX_POLL_INTERVAL_MS),
             "--stall-ms", str(MAX_POLL_INTERVAL_MS + 1500), "--busy-file", str(self.busy_file(slot)),
             "--state-file", str(self.state_file(slot)), "--protocol", self.protocol],
            stdout=out, stderr=err, env=env)

    def busy_file(self, slot: int) -> Path:
        return self.tmp / f"busy-{slot}"

    def state_file(self, slot: int) -> Path:
        return self.tmp / f"state-{slot}"

    def steady(self) -> bool:
        """Every member's poll loop reported librdkafka's join state ``steady`` in the last 0.6 s."""
        for slot, proc in self.procs.items():
            try:
                path = self.state_file(slot)
                if (proc.poll() is not None or time.time() - path.stat().st_mtime > 0.6
                        or path.read_text() != "steady"):
                    return False
            except FileNotFoundError:
                return False
        return True

    def join_state(self, slot: int) -> str:
        """The slot's last reported join state, ``stale`` if not rewritten in the last 0.6 s (a held or
        frozen poll loop), ``exited`` if its process ended."""
        try:
            path = self.state_file(slot)
            if self.procs[slot].poll() is not None:
                return "exited"
            if time.time() - path.stat().st_mtime > 0.6:
                return "stale"
            return path.read_text() or "none"
        except FileNotFoundError:
            return "none"

    def states(self) -> str:
        return ", ".join(f"{slot}: {self.join_state(slot)}" for slot in sorted(self.procs))

    def busy(self, slot: int) -> bool:
        """The slot's member processed a record in the last 50 ms: its transaction is open and holds
        outputs (it commits every 100 ms)."""
        try:
            return time.time() - self.busy_file(slot).stat().st_mtime < 0.05
        except FileNotFoundError:
            return False

    def wait_busy(self, slots: list[int], within: float) -> int | None:
        """The first of ``slots`` found busy within ``within`` seconds, else None."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for slot in slots:
                if self.procs[slot].poll() is None and self.busy(slot):
                    return slot
            time.sleep(0.005)
        return None

    def hold_open(self, slot: int, within: float) -> bool:
        """SIGUSR2: the member's next process() call in a transaction that holds outputs sleeps 1.5 s;
        True once it does (and its earlier outputs had 0.5 s to be written)."""
        holding = Path(str(self.busy_file(slot)) + ".holding")
        holding.unlink(missing_ok=True)
        self.signal(slot, signal.SIGUSR2)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if holding.exists():
                time.sleep(0.5)
                return True
            time.sleep(0.005)
        return False

    def signal(self, slot: int, sig: int) -> None:
        proc = self.procs[slot]
        if proc.poll() is None:
            proc.send_signal(sig)

    def reap(self, slot: int, timeout: float) -> int | None:
        proc = self.procs[slot]
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        self.exits.append((self.txids[slot], proc.returncode))
        return proc.returncode

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for slot in self.procs:
            self.reap(slot, 30)


class SteadyWatch(threading.Thread):
    """Records in ``members.last_steady`` the last time any member reported the join state ``steady``
    (checked every 0.2 s), for the wedge check."""

    def __init__(self, members: Members) -> None:
        super().__init__(daemon=True)
        self.members = members
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            if any(self.members.join_state(slot) == "steady" for slot in list(self.members.procs)):
                self.members.last_steady = time.monotonic()


class Brokers:
    """What the driver does to the brokers. Tansu: one in-memory node, so only a freeze (SIGSTOP);
    real Kafka (``KafkaCluster`` of 3 nodes, topics with replication factor 3 and
    ``min.insync.replicas=2``): a node frozen, a node SIGKILLed and restarted, and the group's
    coordinator SIGKILLed so that the coordinator moves."""

    def __init__(self, tansu: Tansu | None = None, cluster: KafkaCluster | None = None) -> None:
        self.tansu, self.cluster = tansu, cluster
        self.bootstrap = tansu.bootstrap if tansu is not None else cluster.bootstrap_servers  # type: ignore[union-attr]
        self.frozen_node: int | None = None

    @property
    def kinds(self) -> list[str]:
        base = ["kill", "kill", "stall", "freeze", "replace", "broker_freeze"]
        return base if self.cluster is None else [*base, "broker_kill", "coordinator_move"]

    @property
    def gate(self) -> bool:
        """Member faults wait for a stable group: only Tansu 0.6 needs it (its wedge, docs/broker.md)."""
        return GATED and self.tansu is not None

    def create_topic(self, partitions: int) -> str:
        if self.tansu is not None:
            return self.tansu.create_topic(partitions)
        assert self.cluster is not None
        name = f"chaos-{uuid.uuid4().hex[:10]}"
        self.cluster.create_topic(name, partitions, 3, {"min.insync.replicas": "2"})
        return name

    def freeze(self, rng: random.Random) -> str:
        if self.tansu is not None:
            self.tansu.proc.send_signal(signal.SIGSTOP)
            return "tansu"
        assert self.cluster is not None
        self.frozen_node = rng.choice(self.cluster.node_ids)
        self.cluster.pause_broker(self.frozen_node)
        return f"node {self.frozen_node}"

    def thaw(self) -> None:
        if self.tansu is not None:
            self.tansu.proc.send_signal(signal.SIGCONT)
        elif self.cluster is not None and self.frozen_node is not None:
            self.cluster.resume_broker(self.frozen_node)
            self.frozen_node = None

    def kill(self, node_id: int) -> None:
        assert self.cluster is not None
        self.cluster.kill_broker(node_id)

    def restart(self, node_id: int) -> None:
        assert self.cluster is not None
        self.cluster.start_broker(node_id)

    def coordinator(self, group: str) -> int:
        assert self.cluster is not None
        described = self.cluster.admin().describe_consumer_groups([group])[group].result(10)
        return int(described.coordinator.id)


def _wedged(members: Members, frozen: list[tuple[float, int | str | None]]) -> bool:
    """No member reported ``steady`` for ``WEDGE_S`` seconds while nothing was frozen: the group is
    stuck in a rebalance. A frozen member or broker resets the clock (the rebalance it causes is
    expected), so does a recovery."""
    if frozen:
        members.last_steady = max(members.last_steady, time.monotonic())
        return False
    return time.monotonic() - members.last_steady > WEDGE_S


def _recover_wedged_group(bootstrap: str, members: Members, source: str, recoveries: int,
                          event: Any) -> None:
    """Gets a group wedged by Tansu 0.6 going again, as an operator would (a workaround for the
    broker's bug, docs/reliability.md): once the elected leader left mid-rebalance, Tansu 0.6 answers
    every JoinGroup of that group naming the departed leader and every SyncGroup with
    REBALANCE_IN_PROGRESS for good, and restarted members rejoin the same wedged state. So: stop every
    member (SIGTERM: close), fence their transactional.ids (no transaction stays open, so the group's
    committed offsets are stable), copy the group's committed offsets to a new group id, and start the
    members again in that group with their transactional.ids. Nothing is skipped or read twice: the
    new group starts exactly at the offsets the old one committed with its outputs."""
    event(f"wedge: no member steady for {WEDGE_S:.0f} s ({members.states()}); recovery {recoveries}")
    for slot in members.procs:
        members.signal(slot, signal.SIGCONT)
        members.signal(slot, signal.SIGTERM)
    for slot in list(members.procs):
        members.reap(slot, 30)
    for txid in sorted(set(members.txids.values())):
        _fence(bootstrap, txid)
    old = members.group
    members.group = f"{old.split('~')[0]}~r{recoveries}"
    committed = _copy_committed_offsets(bootstrap, old, members.group, source, list(range(PARTITIONS)))
    for slot in sorted(members.procs):
        members.start(slot)
    members.last_steady = time.monotonic()
    event(f"  members restarted in group {members.group} from {old}'s committed offsets {committed}")


def _copy_committed_offsets(bootstrap: str, old: str, new: str, topic: str,
                            partitions: list[int]) -> dict[int, int | None]:
    """Commits the group ``old``'s committed offsets of ``topic`` as those of the group ``new`` (which
    has no members yet) and returns them (None: unset in ``old``, left unset in ``new``)."""
    committed = _committed(bootstrap, old, topic, partitions)
    offsets = {TopicPartition(topic, p): off for p, off in committed.items() if off is not None}
    if offsets:
        conf = {"bootstrap.servers": bootstrap, "group.id": new, "enable.auto.commit": False}
        with KafkaConsumer(conf) as c:
            c.assign(list(offsets))
            c.commit_sync(offsets, timeout=30)
    return committed


def _produce(bootstrap: str, topic: str, n: int, seconds: float, errors: list[BaseException]) -> None:
    try:
        with KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                            "delivery.timeout.ms": 120000}) as p:
            start = time.monotonic()
            futures = []
            for i in range(n):
                futures.append(p.send(topic, value=b"%d" % i, key=b"k%d" % i))
                if i % 100 == 99:
                    ahead = start + seconds * (i + 1) / n - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
            p.flush(130)
            failed = [f.exception() for f in futures if f.exception() is not None]
            if failed:
                errors.append(RuntimeError(f"{len(failed)} source records failed, first: {failed[0]!r}"))
    except BaseException as exc:  # noqa: BLE001
        errors.append(exc)


def _ranges(ids: list[int]) -> str:
    """'3-7,12' for [3, 4, 5, 6, 7, 12] (the first 20 runs), for the summary of duplicates."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in runs[:20])
    return text + (",..." if len(runs) > 20 else "")


def _abort_markers(bootstrap: str, topic: str) -> int:
    deadline = time.monotonic() + 20
    while True:  # a node of a real cluster may be down: its partitions' leaders move
        try:
            return sum(pl.abort_markers for pl in read_committed_log(bootstrap, topic, PARTITIONS).values())
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _abort_markers_grow(bootstrap: str, topic: str, before: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if _abort_markers(bootstrap, topic) > before:
            return True
        time.sleep(0.5)
    return False


def _group_stable(members: Members, frozen: list[tuple[float, int | str | None]],
                  within: float = 5.0) -> bool:
    """No member is frozen and every member's group join state stays ``steady`` for 1 s (waited for up to
    ``within`` seconds): no rebalance is in progress. Tansu 0.6 wedges a group whose elected leader leaves
    or dies between its JoinGroup answer and its SyncGroup (docs/reliability.md), so kills and
    replacements wait for this."""
    if frozen:
        return False
    deadline = time.monotonic() + within
    since: float | None = None
    while time.monotonic() < deadline:
        if members.steady():
            since = since or time.monotonic()
            if time.monotonic() - since >= 1.0:
                return True
        else:
            since = None
        time.sleep(0.05)
    return False


def _fence(bootstrap: str, txid: str) -> None:
    """Aborts the transaction a replaced member may have left open under ``txid`` (an id never used
    again), as an operator would: a producer with that id calls ``init_transactions()``, which fences
    the old producer and aborts its open transaction. Kafka expires such a transaction after
    ``transaction.timeout.ms``; Tansu 0.6 never does, and while it is open the group's committed
    offsets read back as unset, so the group would stall (docs/reliability.md)."""
    deadline = time.monotonic() + 60
    with KafkaProducer({"bootstrap.servers": bootstrap, "transactional.id": txid}) as p:
        while True:
            try:
                p.init_transactions(timeout=10)
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise


def _committed(bootstrap: str, group: str, topic: str, partitions: list[int]) -> dict[int, int | None]:
    """The group's committed offsets (None: unset), for the drain's failure message."""
    with KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}) as c:
        got = c.committed([TopicPartition(topic, p) for p in partitions], timeout=5)
    return {p: None if (om := got.get(TopicPartition(topic, p))) is None else om.offset for p in partitions}


def _source_consumed(bootstrap: str, group: str, topic: str, n_per_partition: dict[int, int]) -> bool:
    with KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}) as c:
        try:
            got = c.committed([TopicPartition(topic, p) for p in n_per_partition], timeout=5)
        except Exception:  # noqa: BLE001 - e.g. a coordinator answer delayed by a frozen broker
            return False
    return all((om := got.get(TopicPartition(topic, p))) is not None and om.offset >= end
               for p, end in n_per_partition.items())


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    """High watermarks from fetch responses (Tansu 0.6 answers ListOffsets(latest) with a lower
    offset: measured with kipconsumer and confluent-kafka alike)."""
    return {p: pl.high_watermark for p, pl in read_committed_log(bootstrap, topic, PARTITIONS).items()}


def run_eos_chaos(brokers: Brokers, tmp: Path, seconds: float, seed: int,
                  protocol: str = "classic") -> dict[str, Any]:
    rng = random.Random(seed)
    n = max(12_000, int(seconds * 600))
    source, sink = brokers.create_topic(PARTITIONS), brokers.create_topic(PARTITIONS)
    group = f"eos-chaos-{uuid.uuid4().hex[:8]}"
    members = Members(tmp, brokers.bootstrap, source, sink, group, protocol)
    watch = SteadyWatch(members)
    try:
        return _run(brokers, members, watch, rng, n, seconds, seed, source, sink)
    finally:
        watch.stopped.set()
        for proc in members.procs.values():  # a failed run leaves no member behind
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def _run(brokers: Brokers, members: Members, watch: SteadyWatch, rng: random.Random, n: int, seconds: float,
         seed: int, source: str, sink: str) -> dict[str, Any]:
    faults: collections.Counter[str] = collections.Counter()
    events: list[str] = []  # the fault log (fault-log.txt in the tmp dir)
    t0 = time.monotonic()

    def event(text: str) -> None:
        events.append(f"{time.monotonic() - t0:7.2f} {text}")

    kills_busy = 0  # kills of a member that was processing (mid-transaction)
    kills_aborted = 0  # kills whose open transaction was seen aborted (checked until one was)
    recoveries = 0  # wedged groups recovered (_recover_wedged_group)
    errors: list[BaseException] = []
    for slot in range(SLOTS):
        members.start(slot)
    members.last_steady = time.monotonic() + 10.0  # the first join takes a few seconds on Tansu
    watch.start()
    time.sleep(3.0)
    producer = threading.Thread(target=_produce, args=(brokers.bootstrap, source, n, seconds * 0.8, errors))
    producer.start()
    end = time.monotonic() + seconds
    # (thaw at, who): a member slot, None for a frozen broker, "node:<id>" for a killed node (restarted)
    frozen: list[tuple[float, int | str | None]] = []
    schedule: list[str] = ["kill"]  # first a verified kill mid-transaction; then every kind once per round
    while time.monotonic() < end:
        time.sleep(min(rng.expovariate(1.0 / FAULT_GAP_S), 3 * FAULT_GAP_S))
        now = time.monotonic()
        for thaw_at, who in [f for f in frozen if f[0] <= now]:
            frozen.remove((thaw_at, who))
            if who is None:
                brokers.thaw()
            elif isinstance(who, str):
                brokers.restart(int(who.split(":")[1]))
                event(f"restart {who}")
            else:
                members.signal(who, signal.SIGCONT)
        if recoveries < MAX_RECOVERIES and _wedged(members, frozen):
            recoveries += 1
            _recover_wedged_group(brokers.bootstrap, members, source, recoveries, event)
            continue
        slot = rng.randrange(SLOTS)
        if any(who == slot or not isinstance(who, int) for _, who in frozen):
            continue
        if not schedule:
            schedule = list(brokers.kinds)
            rng.shuffle(schedule)
        kind = schedule.pop()
        faults[kind] += 1
        first_kill = kind == "kill" and kills_aborted == 0
        gated = brokers.gate and kind not in ("broker_freeze", "broker_kill", "coordinator_move")
        if gated and not _group_stable(members, frozen, 20.0 if first_kill else 5.0):
            # Tansu 0.6 keeps a member that leaves (LeaveGroup) between its JoinGroup answer as the
            # elected leader and its SyncGroup as the leader of every later generation: the group
            # never assigns again (docs/reliability.md). A killed or replaced member leaves, and so
            # does a stalled or frozen one once its poll interval expired (KIP-62): every member
            # fault waits for a stable group, so that no member leaves while the group rebalances.
            faults[kind] -= 1
            faults[f"{kind}_deferred"] += 1
            if first_kill:
                schedule.append(kind)  # next
            else:
                schedule.insert(0, kind)  # tried again after the other kinds of this round
            event(f"{kind} slot {slot} deferred: a rebalance is in progress or a member is frozen "
                  f"({members.states()})")
        elif kind == "kill":
            unfrozen = [s for s in range(SLOTS) if all(who != s for _, who in frozen)]
            for attempt in range(1, FIRST_KILL_ATTEMPTS + 1):
                if attempt > 1 and not _group_stable(members, frozen, 20.0):
                    event("  the group did not become stable again within 20 s")
                    break
                verify = kills_aborted == 0
                markers = _abort_markers(brokers.bootstrap, members.sink) if verify else 0
                # the kill waits for a member that is processing: its transaction is open and holds outputs
                busy = members.wait_busy(unfrozen if verify else [slot], 20.0 if verify else 3.0)
                target = slot if busy is None else busy
                if verify and busy is not None:
                    # until one kill was seen aborted: the member holds its open transaction (a slow
                    # process() after outputs of the same transaction were sent) and is killed then
                    busy = target if members.hold_open(target, 5.0) else None
                members.signal(target, signal.SIGKILL)
                kills_busy += busy is not None
                event(f"kill slot {target} ({members.txids[target]}), processing: {busy is not None}")
                members.reap(target, 10)
                time.sleep(rng.uniform(0.2, 1.5))
                members.start(target)
                if not verify:
                    break
                # the restarted member (same transactional.id) aborts the killed one's transaction: the
                # ABORT markers the check relies on must appear (until one kill showed it, it is retried)
                if busy is not None and _abort_markers_grow(brokers.bootstrap, members.sink, markers, 15.0):
                    kills_aborted += 1
                    event("  its open transaction was aborted (ABORT markers in the sink)")
                    break
                event(f"  no ABORT marker followed (attempt {attempt}): its outputs had not reached the log")
                if attempt < FIRST_KILL_ATTEMPTS:
                    faults[kind] += 1
        elif kind == "stall":
            event(f"stall slot {slot}")
            members.signal(slot, signal.SIGUSR1)
        elif kind == "freeze":
            event(f"freeze slot {slot}")
            members.signal(slot, signal.SIGSTOP)
            frozen.append((now + MAX_POLL_INTERVAL_MS / 1000 + rng.uniform(1.0, 3.0), slot))
        elif kind == "replace":
            old_txid = members.txids[slot]
            members.signal(slot, signal.SIGTERM)
            rc = members.reap(slot, 30)
            members.start(slot, new_id=True)
            _fence(brokers.bootstrap, old_txid)
            event(f"replace slot {slot} ({old_txid} exited {rc}; fenced)")
        elif kind == "broker_freeze":
            event(f"broker_freeze {brokers.freeze(rng)}")
            frozen.append((now + rng.uniform(2.0, 7.0), None))
        elif kind in ("broker_kill", "coordinator_move"):
            assert brokers.cluster is not None
            try:
                node = (brokers.coordinator(members.group) if kind == "coordinator_move"
                        else rng.choice(brokers.cluster.node_ids))
            except Exception as e:  # noqa: BLE001 - the coordinator lookup itself may time out
                faults[kind] -= 1
                event(f"{kind}: no coordinator found ({e})")
                continue
            brokers.kill(node)
            event(f"{kind}: SIGKILL node {node}")
            frozen.append((now + rng.uniform(3.0, 8.0), f"node:{node}"))
    for _, who in frozen:
        if who is None:
            brokers.thaw()
        elif isinstance(who, str):
            brokers.restart(int(who.split(":")[1]))
        else:
            members.signal(who, signal.SIGCONT)
    producer.join(180)
    assert not errors, errors
    for slot, proc in members.procs.items():  # every slot running for the drain
        if proc.poll() is not None:
            members.exits.append((members.txids[slot], proc.returncode))
            members.start(slot)
    ends = _ends(brokers.bootstrap, source)
    assert sum(ends.values()) == n
    event(f"drain: source ends {ends}")
    drain_deadline = time.monotonic() + 120
    try:
        while not _source_consumed(brokers.bootstrap, members.group, source, ends):
            if recoveries < MAX_RECOVERIES and _wedged(members, []):
                recoveries += 1
                _recover_wedged_group(brokers.bootstrap, members, source, recoveries, event)
                drain_deadline = time.monotonic() + 120
            if time.monotonic() >= drain_deadline:
                committed = _committed(brokers.bootstrap, members.group, source, sorted(ends))
                raise AssertionError(f"the group did not consume the whole source in 120 s: committed "
                                     f"{committed}, ends {ends}, member join states {members.states()}; "
                                     f"fault log: {members.tmp}/fault-log.txt")
            time.sleep(1.0)
    finally:
        event("drain ended")
        (members.tmp / "fault-log.txt").write_text("\n".join(events) + "\n")
    members.stop_all()
    log = read_committed_log(brokers.bootstrap, sink, PARTITIONS)
    counts = collections.Counter(v for pl in log.values() for _, _, v in pl.committed)
    expected = {b"out-%d" % i for i in range(n)}
    summary = {
        "t0": t0,
        "protocol": members.protocol,
        "broker": "tansu" if brokers.tansu is not None else f"kafka x{len(brokers.cluster.node_ids)}",  # type: ignore[union-attr]
        "seed": seed,
        "seconds": seconds,
        "records": n,
        "faults": dict(faults),
        "members_started": members.started,
        "wedge_recoveries": recoveries,
        "kills_mid_transaction": kills_busy,
        "kills_seen_aborted": kills_aborted,
        "lost": len(expected - set(counts)),
        "duplicated": sum(c - 1 for c in counts.values() if c > 1),
        "unexpected": len(set(counts) - expected),
        "aborted_records_in_log": sum(pl.aborted for pl in log.values()),
        "abort_markers": sum(pl.abort_markers for pl in log.values()),
        "commit_markers": sum(pl.commit_markers for pl in log.values()),
        "open_records_in_log": sum(pl.open for pl in log.values()),
        "member_exit_codes": collections.Counter(str(rc) for _, rc in members.exits),
        "duplicated_ids": _ranges(sorted(int(v[4:]) for v, c in counts.items() if c > 1 and v in expected)),
    }
    return summary


@pytest.fixture(scope="module")
def kafka3() -> Iterator[KafkaCluster]:
    """A 3-node real Kafka cluster for this module's chaos runs."""
    with KafkaCluster(brokers=3) as cluster:
        yield cluster


@pytest.mark.kafka
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_exactly_once_chaos_on_kafka(kafka3: KafkaCluster, tmp_path: Path, protocol: str) -> None:
    """Real Kafka, 3 nodes: member kills, stalls, freezes and replacements, a node frozen, a node
    SIGKILLed and restarted, the group coordinator SIGKILLed (it moves); classic and KIP-848."""
    _check_chaos(run_eos_chaos(Brokers(cluster=kafka3), tmp_path, CHAOS_SECONDS, SEED, protocol), tmp_path,
                 expect_broker_kills=True)


@pytest.mark.interop
@pytest.mark.skipif(os.environ.get("KIP_EOS_CHAOS_TANSU") != "1",
                    reason="Tansu 0.6's run (its wedge workarounds): KIP_EOS_CHAOS_TANSU=1")
def test_exactly_once_chaos(tansu: Tansu, tmp_path: Path) -> None:
    _check_chaos(run_eos_chaos(Brokers(tansu=tansu), tmp_path, CHAOS_SECONDS, SEED), tmp_path,
                 expect_broker_kills=False)


def _check_chaos(summary: dict[str, Any], tmp_path: Path, expect_broker_kills: bool) -> None:
    summary["wall_s"] = round(time.monotonic() - summary.pop("t0"), 1)
    out = Path(os.environ.get("KIP_CHAOS_OUT", str(tmp_path)))
    out.mkdir(parents=True, exist_ok=True)
    name = f"chaos-eos-{summary['protocol']}-{summary['broker'].split()[0]}.json"
    (out / name).write_text(json.dumps(summary, indent=1, default=str))
    print("\nexactly-once chaos:", json.dumps(summary, default=str))
    assert summary["lost"] == 0, summary
    assert summary["duplicated"] == 0, summary
    assert summary["unexpected"] == 0, summary
    # members exit by themselves only on SIGTERM (0); -9: killed; -15: SIGTERM before the handler was set;
    # 1 only with ProducerFencedError: a member whose open transaction outlived transaction.timeout.ms
    # (a freeze on top of commits timing out while a node restarts) is fenced by the coordinator's
    # epoch bump, seen once in CI; the Pipeline does not yet recover from that (closing note of stop 33)
    fenced = sum(1 for err in tmp_path.glob("m*.err")
                 if "kipconsumer.errors.ProducerFencedError" in (err.read_text(errors="replace").strip()
                                                                  .splitlines() or [""])[-1])
    assert set(summary["member_exit_codes"]) <= {"0", "-9", "-15", "1"}, summary
    assert summary["member_exit_codes"].get("1", 0) <= fenced, summary
    assert summary["faults"].get("kill", 0) >= 1, summary
    # kills wait for a member that is processing; the first ones until one was seen aborted by its successor
    assert summary["kills_mid_transaction"] >= 1 and summary["kills_seen_aborted"] >= 1, summary
    # members were killed with open transactions, aborted by their successors: the markers the check
    # relies on are in the log (a reader ignoring them would count these records twice)
    assert summary["abort_markers"] >= 1 and summary["aborted_records_in_log"] >= 1, summary
    if expect_broker_kills:
        # real Kafka needs none of Tansu's wedge workarounds
        assert summary["wedge_recoveries"] == 0, summary
        node_kills = summary["faults"].get("broker_kill", 0) + summary["faults"].get("coordinator_move", 0)
        assert node_kills >= 1, summary


class GroupMember(threading.Thread):
    """A plain consumer group member on its own thread: polls, records what it got
    (``records[partition]``: offsets in order) and commits after every poll that returned records;
    ``stall(s)`` makes it stop polling for ``s`` seconds (its heartbeats go on); ``join_state`` is
    librdkafka's (statistics every 200 ms)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 3000, "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": MAX_POLL_INTERVAL_MS, "statistics.interval.ms": 200,
            "stats_cb": self._on_stats}
        self.topic = topic
        self.join_state = ""
        self.records: dict[int, list[int]] = collections.defaultdict(list)
        self.stall_s = 0.0
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def _on_stats(self, doc: str) -> None:
        self.join_state = json.loads(doc).get("cgrp", {}).get("join_state", "")

    def stall(self, seconds: float) -> None:
        self.stall_s = seconds

    def run(self) -> None:
        try:
            with KafkaConsumer(self.conf) as c:
                c.subscribe([self.topic])
                while not self.stopped.is_set():
                    if self.stall_s:
                        time.sleep(self.stall_s)
                        self.stall_s = 0.0
                    got = c.poll(0.2)
                    for record in got:
                        self.records[record.partition].append(record.offset)
                    if got:
                        try:
                            c.commit_sync()
                        except Exception:  # noqa: BLE001 - a rebalance or the poll interval: next poll
                            pass
        except BaseException as exc:  # noqa: BLE001
            self.error = exc


def _wait_for(what: str, cond: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        time.sleep(0.1)


def test_tansu_wedged_group_is_recovered_from_its_committed_offsets(tansu: Tansu) -> None:
    """The broker bug behind the exactly-once chaos run's drain stalls, made deterministic, and the
    driver's workaround shown on it. Tansu 0.6 keeps the elected leader of a rebalance that leaves
    the group (LeaveGroup) before its SyncGroup as the leader for good (its rebalancing state never
    drops a departed leader): every later JoinGroup names it, every SyncGroup of the others fails with
    REBALANCE_IN_PROGRESS, and nobody is assigned again. Here: leader A and B consume and commit; A
    stops polling; C joins (the group rebalances, A still its leader); A's poll interval expires, so
    librdkafka leaves the group for it (KIP-62) -- the group must not become stable for 15 s (if it
    does, Tansu is fixed: drop the workaround). Then the recovery of ``_recover_wedged_group``: the
    members stop, the group's committed offsets are copied to a new group, and two new members in it
    consume the rest of the topic from exactly those offsets: nothing skipped, nothing read twice."""
    topic = tansu.create_topic(PARTITIONS)
    group = f"wedge-{uuid.uuid4().hex[:8]}"
    n = 600

    def produce(ids: range) -> None:
        with KafkaProducer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 5}) as producer:
            for i in ids:
                producer.send(topic, value=b"%d" % i, partition=i % PARTITIONS)
            producer.flush(30)

    produce(range(n // 2))  # the other half after the wedge: the new group must read it
    a = GroupMember(tansu.bootstrap, group, topic)
    a.start()
    _wait_for("A steady", lambda: a.join_state == "steady", 30)
    b = GroupMember(tansu.bootstrap, group, topic)
    b.start()
    _wait_for("A and B steady", lambda: a.join_state == b.join_state == "steady", 30)
    time.sleep(2.0)  # A and B commit what they consumed
    a.stall(MAX_POLL_INTERVAL_MS / 1000 + 4.0)
    time.sleep(0.5)
    c = GroupMember(tansu.bootstrap, group, topic)
    c.start()
    _wait_for("the rebalance C's join starts", lambda: b.join_state != "steady", 15)
    time.sleep(MAX_POLL_INTERVAL_MS / 1000 + 0.5)  # A's poll interval expired: it left
    seen = set()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        seen |= {m.join_state for m in (b, c)}
        time.sleep(0.1)
    assert "steady" not in seen, f"the group rebalanced: is Tansu fixed? states seen {seen}"
    for m in (a, b, c):
        m.stopped.set()
    for m in (a, b, c):
        m.join(30)
        assert m.error is None, m.error
    consumed_before = {p: sorted(set(a.records[p] + b.records[p] + c.records[p])) for p in range(PARTITIONS)}
    produce(range(n // 2, n))

    new_group = group + "~r1"
    committed = _copy_committed_offsets(tansu.bootstrap, group, new_group, topic, list(range(PARTITIONS)))
    assert any(off for off in committed.values()), committed
    d, e = GroupMember(tansu.bootstrap, new_group, topic), GroupMember(tansu.bootstrap, new_group, topic)
    d.start()
    e.start()
    per_partition = n // PARTITIONS
    _wait_for("the new group reads to the end",
              lambda: all(len(d.records[p]) + len(e.records[p]) >= per_partition - (committed[p] or 0)
                          for p in range(PARTITIONS)), 60)
    for m in (d, e):
        m.stopped.set()
        m.join(30)
        assert m.error is None, m.error
    for p in range(PARTITIONS):
        start = committed[p] or 0
        assert sorted(d.records[p] + e.records[p]) == list(range(start, per_partition)), (p, start)
        assert set(range(start)) <= set(consumed_before[p]), p  # below the copied offset: consumed before
