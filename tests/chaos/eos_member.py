"""One member of an exactly-once pipeline group (run as a separate process).

    python tests/chaos/eos_member.py --bootstrap S --source T --sink U --group G --txid ID
        [--protocol classic|consumer] [--max-poll-interval-ms 4000] [--commit-interval-ms 100]

Runs ``kipconsumer.streams.Pipeline`` with ``processing.guarantee=exactly_once_v2``: each input
record (value: its id) gives one output record whose value is ``out-<id>``. ``--txid`` is the
producer's transactional.id: a replacement started with the same id fences its predecessor and
aborts its open transaction at once.

Signals: SIGTERM -> leave the loop and ``close()`` (commits the open transaction), exit 0;
SIGUSR1 -> the next ``process()`` call sleeps ``--stall-ms`` (past ``max.poll.interval.ms``), inside
the poll loop; SIGUSR2 -> the next ``process()`` call of a transaction that already holds records
touches ``<busy-file>.holding`` and sleeps ``--hold-ms`` (less than half of the poll interval: the
transaction stays open with outputs written, the driver kills the member then). Prints one JSON
line of the pipeline's metrics on exit. ``--exit-after-idle S``: leave once no record was processed
for S seconds (after at least one). ``--busy-file F``: touched while records are processed (the
chaos driver kills a member mid-transaction). ``--state-file F``: librdkafka's group join state
(``steady`` when no rebalance is in progress), rewritten every 200 ms by the poll loop.
``KIP_EOS_MEMBER_LOG=INFO``: the pipeline's log on stderr; ``KIP_EOS_MEMBER_DEBUG=cgrp``: librdkafka
debug contexts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from kipconsumer.streams import Pipeline


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--txid", required=True)
    ap.add_argument("--protocol", default="classic", choices=["classic", "consumer"])
    ap.add_argument("--max-poll-interval-ms", type=int, default=4000)
    ap.add_argument("--commit-interval-ms", type=int, default=100)
    ap.add_argument("--stall-ms", type=int, default=5500)
    ap.add_argument("--exit-after-idle", type=float, default=0.0)
    ap.add_argument("--busy-file", default="", help="touched (every 50 ms at most) while processing")
    ap.add_argument("--hold-ms", type=int, default=1500)
    ap.add_argument("--state-file", default="", help="librdkafka's group join state, every 200 ms")
    args = ap.parse_args(argv)

    stop = False
    stall = False
    last_record = [0.0]
    last_touch = [0.0]

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    def on_stall(signum: int, frame: object) -> None:
        nonlocal stall
        stall = True

    hold = False
    txn_records = [0, -1]  # records processed in the open transaction; transactions ended when counted

    def on_hold(signum: int, frame: object) -> None:
        nonlocal hold
        hold = True

    if os.environ.get("KIP_EOS_MEMBER_LOG"):  # e.g. INFO: the pipeline's log on stderr, timestamped
        logging.basicConfig(level=os.environ["KIP_EOS_MEMBER_LOG"], stream=sys.stderr,
                            format="%(asctime)s %(name)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, on_stall)
    signal.signal(signal.SIGUSR2, on_hold)

    def process(record: object) -> list[tuple[bytes | None, bytes]]:
        nonlocal stall, hold
        if stall:
            stall = False
            time.sleep(args.stall_ms / 1000.0)
        # the driver's view of the transaction (test code: a private attribute)
        txn = pipeline._guarantee.txn  # type: ignore[attr-defined]
        ended = txn.commits + txn.aborts
        if ended != txn_records[1]:
            txn_records[:] = [0, ended]
        if hold and txn_records[0] > 0:
            # the transaction is open and holds outputs of earlier records: process() is slow now
            # (less than half of max.poll.interval.ms), the driver kills the member meanwhile
            hold = False
            if args.busy_file:
                Path(args.busy_file + ".holding").touch()
            time.sleep(args.hold_ms / 1000.0)
        txn_records[0] += 1
        now = time.monotonic()
        if args.busy_file and now - last_touch[0] > 0.05:
            with open(args.busy_file, "a"):
                os.utime(args.busy_file)
            last_touch[0] = now
        last_record[0] = now
        value = record.value  # type: ignore[attr-defined]
        return [(record.key, b"out-" + value)]  # type: ignore[attr-defined]

    conf: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "processing.guarantee": "exactly_once_v2",
        "commit.interval.ms": args.commit_interval_ms,
        "max.poll.interval.ms": args.max_poll_interval_ms,
        "producer.transactional.id": args.txid,
        "producer.transaction.timeout.ms": 10_000,
        "producer.request.timeout.ms": 5_000,
        "task.timeout.ms": 60_000,
    }
    if args.state_file:
        def on_stats(doc: str) -> None:  # on the poll thread: stale while the loop is held
            state = json.loads(doc).get("cgrp", {}).get("join_state", "")
            tmp = args.state_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(state)
            os.replace(tmp, args.state_file)

        conf["consumer.statistics.interval.ms"] = 200
        conf["consumer.stats_cb"] = on_stats
    if os.environ.get("KIP_EOS_MEMBER_DEBUG"):  # librdkafka debug contexts of the consumer, e.g. cgrp
        conf["debug"] = os.environ["KIP_EOS_MEMBER_DEBUG"]
    if args.protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["session.timeout.ms"] = 3_000
        conf["heartbeat.interval.ms"] = 500

    def done() -> bool:
        if stop:
            return True
        idle = args.exit_after_idle
        return bool(idle and last_record[0] and time.monotonic() - last_record[0] > idle)

    pipeline = Pipeline(conf, args.source, process, args.sink)
    try:
        pipeline.run(until=done)
    finally:
        pipeline.close()
        m = pipeline.metrics()
        print(json.dumps({k: m[k] for k in ("records_processed", "commits", "commit_failures",
                                            "transactions_committed", "transactions_aborted", "rewinds")}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
