"""``python -m kipconsumer.testing kafka|embedded``: run a test cluster from the shell.

Prints ``BOOTSTRAP=<servers>`` as the first line on stdout once the cluster answers, then runs until
SIGTERM or SIGINT (exit 0). ``kafka`` is real Apache Kafka (KafkaCluster); ``embedded`` is librdkafka's
mock cluster (the same as ``python -m kipconsumer.broker``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kipconsumer.broker import add_topic_argument, check_topic_specs, stop_on_signals
from kipconsumer.broker import main as embedded_main
from kipconsumer.errors import ConfigError
from kipconsumer.testing._distribution import DEFAULT_KAFKA_VERSION
from kipconsumer.testing._errors import KafkaClusterError
from kipconsumer.testing.kafka_cluster import KafkaCluster


def _kafka(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kipconsumer.testing kafka",
        description="Run a real Apache Kafka cluster (KRaft, JVM processes on 127.0.0.1) "
        "until SIGTERM/SIGINT.",
    )
    parser.add_argument(
        "--brokers", type=int, default=1, metavar="N", help="number of nodes, 1..9 (default 1)"
    )
    parser.add_argument(
        "--version", default=None,
        help="Apache Kafka release, 3.7.0 to 4.4.x; X.Y is that line's newest patch "
        f"(default: $KIPCONSUMER_KAFKA_VERSION, $KAFKA_VERSION or {DEFAULT_KAFKA_VERSION})",
    )
    parser.add_argument(
        "--kafka-home", default=None, metavar="DIR", help="a Kafka installation to run instead"
    )
    parser.add_argument("--base-dir", default=None, metavar="DIR", help="keep configs, data and logs here")
    add_topic_argument(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.brokers <= 9:
        parser.error(f"--brokers: must be in 1..9, got {args.brokers}")
    check_topic_specs(parser, args.topic, args.brokers)
    try:
        cluster = KafkaCluster(
            args.brokers, version=args.version, kafka_home=args.kafka_home, base_dir=args.base_dir
        )
    except ConfigError as e:
        parser.error(str(e))
    stop = stop_on_signals()
    try:
        cluster.start()
    except ConfigError as e:  # a release Maven Central does not serve
        parser.error(str(e))
    except KafkaClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    with cluster:
        for name, partitions, rf in args.topic:
            cluster.create_topic(name, partitions, rf)
        sys.stdout.write(f"BOOTSTRAP={cluster.bootstrap_servers}\n")
        sys.stdout.flush()
        print(
            f"Apache Kafka {cluster.version}, nodes {cluster.node_ids}, logs in {cluster.base_dir}",
            file=sys.stderr,
        )
        sys.stderr.flush()
        while not stop.wait(0.2):
            pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or args[0] not in ("kafka", "embedded"):
        print(
            "usage: python -m kipconsumer.testing {kafka|embedded} [options]"
            "  (--help after the word for options)",
            file=sys.stderr,
        )
        return 0 if args and args[0] in ("-h", "--help") else 2
    if args[0] == "kafka":
        return _kafka(args[1:])
    return embedded_main(args[1:])


if __name__ == "__main__":
    sys.exit(main())
