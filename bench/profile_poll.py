"""Profiles a consumer client of bench/workers.py with py-spy and prints the top frames.

    python bench/profile_poll.py [--client kipconsumer-iter] [--broker kafka|tansu|mock] [--records 1000000]
                            [--partitions 12] [--rate 500] [--native] [--top 25] [--out DIR]

Starts the broker, fills one topic (100 B values), then runs ``py-spy record --format raw`` around one
worker process and sums the collapsed stacks: "self" is the share of samples whose innermost frame is
that function, "total" the share of samples that have it anywhere on the stack. --native adds C frames
(Cython modules, librdkafka) where py-spy can unwind them. Writes the collapsed stacks (and, with
--svg, a flame graph) to --out (default bench/results/profile/).
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def py_spy() -> str | None:
    exe = Path(sys.executable).parent / "py-spy"
    return str(exe) if exe.exists() else shutil.which("py-spy")


def loop_focus() -> str:
    """Regex matching stacks inside the poll loop of workers.py's kipconsumer client (found in the source,
    so it survives edits): the lines from `while got < want` to before `c.close()`."""
    lines = (_common.HERE / "workers.py").read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("def kipconsumer_client"))
    first = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("while got < want"))
    last = next(i for i in range(first, len(lines)) if lines[i].strip() == "c.close()")
    return r"workers\.py:(" + "|".join(str(n + 1) for n in range(first, last)) + r")\)"


def top_frames(raw: Path, top: int, focus: str = "") -> dict[str, Any]:
    self_c: collections.Counter[str] = collections.Counter()
    total_c: collections.Counter[str] = collections.Counter()
    n = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        if focus and not re.search(focus, stack):
            continue
        k = int(count)
        n += k
        frames = [f.strip() for f in stack.split(";") if f.strip()]
        if not frames:
            continue
        self_c[frames[-1]] += k
        for f in set(frames):
            total_c[f] += k
    return {
        "samples": n,
        "self": [(f, c / n) for f, c in self_c.most_common(top)] if n else [],
        "total": [(f, c / n) for f, c in total_c.most_common(top)] if n else [],
    }


def run(args: argparse.Namespace, broker: Any = None) -> dict[str, Any]:
    exe = py_spy()
    if exe is None:
        res: dict[str, Any] = {"skipped": "py-spy not found (pip install py-spy)"}
        print_top(args.client, res)
        return res
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    own = broker is None
    if own:
        broker = _common.start_broker(args.broker)
    try:
        topic = f"profile-{args.partitions}p"
        if args.topic:
            topic = args.topic
        else:
            broker.create_topic(topic, args.partitions)
            per = [
                args.records // args.partitions + (1 if p < args.records % args.partitions else 0)
                for p in range(args.partitions)
            ]
            _common.fill_partitions(broker.bootstrap, topic, per, 100)
        raw = out_dir / f"{args.client}.collapsed.txt"
        cmd = [exe, "record", "--format", "raw", "--rate", str(args.rate), "--output", str(raw)]
        if args.native:
            cmd.append("--native")
        else:
            cmd.append("--nonblocking")  # no pauses of the profiled process (not possible with --native)
        cmd += [
            "--",
            sys.executable,
            str(_common.HERE / "workers.py"),
            args.client,
            broker.bootstrap,
            topic,
            str(args.partitions),
            str(args.records),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 or not raw.exists():
            res = {"skipped": f"py-spy failed: {proc.stderr.strip()[-300:]}"}
            print_top(args.client, res)
            return res
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        focus = loop_focus() if args.focus is None else args.focus
        res = top_frames(raw, args.top, focus)
        res["focus"] = focus
        res["worker_result"] = lines[-1] if lines else None
        res["collapsed"] = str(raw)
        if args.svg:
            svg = out_dir / f"{args.client}.svg"
            opts = ["--native"] if args.native else ["--nonblocking"]
            subprocess.run(
                [
                    *cmd[:2],
                    "--format",
                    "flamegraph",
                    "--rate",
                    str(args.rate),
                    "--output",
                    str(svg),
                    *opts,
                    *cmd[cmd.index("--") :],
                ],
                capture_output=True,
                timeout=300,
            )
            res["flamegraph"] = str(svg)
    finally:
        if own:
            broker.stop()
    print_top(args.client, res)
    return res


def print_top(client: str, res: dict[str, Any]) -> None:
    if "skipped" in res:
        print(f"profile {client}: skipped: {res['skipped']}")
        return
    print(
        f"\npy-spy profile of {client} ({res['samples']} samples in the consume loop"
        f"{' (stacks matching ' + repr(res['focus']) + ')' if res.get('focus') else ''}; "
        f"worker: {res['worker_result']})"
    )
    print(f"{'self':>6}  frame")
    for f, share in res["self"]:
        print(f"{share:6.1%}  {f}")
    print(f"{'total':>6}  frame")
    for f, share in res["total"]:
        print(f"{share:6.1%}  {f}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--client", default="kipconsumer-iter")
    ap.add_argument("--broker", choices=["kafka", "tansu", "mock"], default="kafka")
    _common.add_kafka_version_argument(ap)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--rate", type=int, default=500, help="samples per second")
    ap.add_argument("--native", action="store_true", help="include native (C) frames")
    ap.add_argument("--svg", action="store_true", help="also write a flame graph (a second run)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument(
        "--focus",
        help="regex: keep only stacks matching it (default: the poll loop of bench/workers.py's "
        "kipconsumer client, located in its source; not imports, set-up or close); '' keeps all",
    )
    ap.add_argument("--out", default=str(_common.HERE / "results" / "profile"))
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    return ap


def main() -> int:
    res = run(parser().parse_args())
    return 1 if "skipped" in res else 0


if __name__ == "__main__":
    sys.exit(main())
