"""A real Apache Kafka 4.x cluster on loopback for tests: KRaft nodes as JVM processes, no Docker.

``KafkaCluster(brokers=1|3)`` runs each node as a combined broker+controller (``kafka.Kafka``) on
127.0.0.1, from jars resolved once with Maven (``kipconsumer.testing._distribution``). Storage is
formatted at start; the configs are made for fast tests (no initial rebalance delay, small internal
topics with replication factor ``min(3, brokers)``, short minimum session timeouts, share groups on).
The cluster is ready when every node answers metadata. Each node's log is
``<base_dir>/node-<id>/server.log`` and stays after :meth:`KafkaCluster.stop` (the data is removed
unless ``base_dir`` was given; what a killed process left in a temporary folder is removed by a later
cluster: ``kipconsumer.testing._base_dirs``). Every JVM is gone when the cluster stops, when the
interpreter exits (also for a cluster dropped without ``stop()``), or when this process dies (the
kernel's parent-death signal). A cluster belongs to the process that started it: a child made by
``fork()`` never stops it (see :class:`KafkaCluster`).
"""

from __future__ import annotations

import atexit
import base64
import logging
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from kipconsumer import _fork
from kipconsumer._validate import check_topic_name
from kipconsumer.errors import ConfigError, IllegalStateError
from kipconsumer.testing import _args
from kipconsumer.testing._base_dirs import make_base_dir, sweep_stale
from kipconsumer.testing._certs import CertPair, TestCA
from kipconsumer.testing._distribution import KafkaDistribution, find_java, resolve_distribution
from kipconsumer.testing._errors import KafkaClusterError
from kipconsumer.testing._process import free_ports, port_open, spawn_tied, terminate

__all__ = ["KafkaCluster"]

_log = logging.getLogger("kipconsumer.testing")
# librdkafka's retries while a fresh cluster loads its coordinators are expected: shown where the
# application configured logging, not through logging's last-resort stderr handler
_ADMIN_LOG: Any = logging.getLogger("kipconsumer.testing.admin")
_ADMIN_LOG.addHandler(logging.NullHandler())
# Started and not stopped: held strongly, so that a cluster dropped without stop() is still stopped
# (its data removed) at interpreter exit
_live: set[KafkaCluster] = set()

_LOG4J2 = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
      - name: kafka.server.BrokerServer
        level: INFO
      - name: org.apache.kafka.controller.QuorumController
        level: INFO
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
"""


def _stop_all_at_exit() -> None:
    for cluster in list(_live):
        cluster.stop()


atexit.register(_stop_all_at_exit)


def _forget_in_child() -> None:
    """After fork(), in the child: the clusters are the parent's (stop() there returns at once). Their
    confluent-kafka AdminClients are leaked, never destroyed here: librdkafka's destroy joins threads
    that exist only in the parent (seen: SIGSEGV at the child's exit)."""
    for cluster in list(_live):
        admin, cluster._admin = cluster._admin, None
        if admin is not None:
            _fork.leak(admin)
    _live.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class _Node:
    """One KRaft node: its id, ports, folders and (while running) its JVM."""

    def __init__(
        self,
        node_id: int,
        port: int,
        controller_port: int,
        home: Path,
        sasl_ssl_port: int = 0,
        ssl_port: int = 0,
    ) -> None:
        self.node_id = node_id
        self.port = port
        self.controller_port = controller_port
        self.sasl_ssl_port = sasl_ssl_port  # 0: no SASL_SSL listener
        self.ssl_port = ssl_port  # 0: no SSL (mTLS) listener
        self.home = home
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_file: IO[bytes] | None = None
        self.paused = False

    @property
    def properties(self) -> Path:
        return self.home / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.home / "server.log"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])


class KafkaCluster:
    """A real Apache Kafka cluster of ``brokers`` KRaft nodes (1 to 9) on 127.0.0.1.

    Starts on :meth:`start` or on entering the ``with`` block; :meth:`stop` (idempotent, also at
    interpreter exit) ends every JVM. ``version`` picks the release fetched from Maven Central
    (default ``$KIPCONSUMER_KAFKA_VERSION`` or 4.2.1); ``kafka_home`` (or ``$KAFKA_HOME``) runs a
    Kafka installation instead. ``broker_config`` adds or overrides server properties on every node.
    ``base_dir`` keeps data and logs there (default: a temporary folder whose data is removed at
    stop; its logs stay).

    ``sasl_ssl=True`` adds, beside PLAINTEXT, a SASL_SSL listener (SCRAM-SHA-256/512, PLAIN,
    OAUTHBEARER with Kafka's unsecured JWT validator) and an SSL listener that requires a client
    certificate (mTLS), with certificates for ``127.0.0.1`` and ``localhost`` made at start by a CA
    of the cluster's own (:attr:`ca_location`; :attr:`ca` issues more), and turns Kafka's ACL
    authorizer on. PLAINTEXT clients are ``User:ANONYMOUS``, a super user (so is the controller);
    every other principal needs ACLs (:meth:`grant`). PLAIN users are fixed at start:
    ``plain_users`` (default one user ``"kipconsumer"`` with a random password, :attr:`plain_users`);
    SCRAM users are made with :meth:`create_scram_user`. ``openssl`` must be installed.
    ``oauth_jwks_url`` (with ``sasl_ssl``) makes the SASL_SSL listener check OAUTHBEARER tokens as a
    production broker does: signed JWTs whose keys the JWKS endpoint at that URL publishes (Kafka's
    ``OAuthBearerValidatorCallbackHandler``; the principal is the ``sub`` claim; the URL is allowed
    with the JVM property ``org.apache.kafka.sasl.oauthbearer.allowed.urls``). The endpoint must
    answer before :meth:`start`; unsigned tokens are then refused.

    Raises :class:`~kipconsumer.testing.KafkaClusterError` when Java or Maven is missing, the jars
    cannot be fetched, or a node does not come up within ``start_timeout`` seconds (the message has
    the tail of that node's log).

    Bad arguments raise :class:`~kipconsumer.errors.ConfigError` naming the argument and the allowed
    values (``kipconsumer.testing._args``).

    A child made by ``fork()`` inherits the object, not the cluster: the JVMs are the starting
    process's children. In the child, :meth:`stop` (also leaving the ``with`` block, and the
    interpreter's exit) returns at once and leaves the cluster running, its data in place; the
    addresses and paths (``bootstrap_servers``, ``node_ids``, ``log_path()``, ...) still read; the
    calls that control or administer it raise ``IllegalStateError`` naming the starting process.

    Not thread-safe beyond this: the node-control methods may be called from any one thread at a time.
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        version: str | None = None,
        kafka_home: str | os.PathLike[str] | None = None,
        broker_config: Mapping[str, object] | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        heap: str = "512m",
        start_timeout: float = 120.0,
        sasl_ssl: bool = False,
        plain_users: Mapping[str, str] | None = None,
        oauth_jwks_url: str | None = None,
    ) -> None:
        _args.check_brokers(brokers)
        _args.check_version(version)
        _args.check_heap(heap)
        _args.check_seconds(start_timeout, "start_timeout")
        if broker_config is not None and not isinstance(broker_config, Mapping):
            raise ConfigError(
                f"broker_config: expected a mapping of server properties, got {broker_config!r}"
            )
        self._brokers = brokers
        self._sasl_ssl = bool(sasl_ssl)
        if oauth_jwks_url is not None:
            if not self._sasl_ssl:
                raise ConfigError("oauth_jwks_url: needs sasl_ssl=True (it configures the SASL_SSL listener)")
            if not isinstance(oauth_jwks_url, str) or not oauth_jwks_url.startswith(("http://", "https://")):
                raise ConfigError(
                    f"oauth_jwks_url: expected an http:// or https:// URL, got {oauth_jwks_url!r}"
                )
        self._oauth_jwks_url = oauth_jwks_url
        self._plain_users = (
            _args.check_plain_users(plain_users) if plain_users is not None
            else {"kipconsumer": secrets.token_hex(12)}
        )
        self._ca: TestCA | None = None
        self._server_cert: CertPair | None = None
        self._client_cert: CertPair | None = None
        self._version_wanted = version
        self._kafka_home = kafka_home
        self._extra = {str(k): _prop(v) for k, v in (broker_config or {}).items()}
        self._base_given = base_dir is not None
        self._base = Path(base_dir) if base_dir is not None else None
        self._heap = heap
        self._start_timeout = float(start_timeout)
        self._dist: KafkaDistribution | None = None
        self._java = ""
        self._nodes: dict[int, _Node] = {}
        self._cluster_id = _new_cluster_id()
        self._state = "new"  # new -> running -> stopped; written by start() and stop() only
        self._owner: int | None = None  # the process that started the JVMs (their parent)
        self._lock = threading.RLock()
        self._admin: Any = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> KafkaCluster:
        """Fetch the jars if needed, format storage, start every node and wait until each answers
        metadata. No-op when running; IllegalStateError after :meth:`stop` and in a child made by
        ``fork()``. A temporary cluster first removes what dead processes' clusters left behind
        (``kipconsumer.testing._base_dirs``)."""
        self._check_owner()
        with self._lock:
            if self._state == "running":
                return self
            if self._state == "stopped":
                raise IllegalStateError("KafkaCluster is stopped; create a new one")
            self._java = find_java()
            self._dist = resolve_distribution(self._version_wanted, self._kafka_home)
            if self._base is None:
                sweep_stale()
                self._base = make_base_dir()
            self._base.mkdir(parents=True, exist_ok=True)
            (self._base / "log4j2.yaml").write_text(_LOG4J2)
            per = 4 if self._sasl_ssl else 2
            ports = free_ports(per * self._brokers)
            if self._sasl_ssl:
                self._make_certificates()
            for i in range(self._brokers):
                node_id = i + 1
                home = self._base / f"node-{node_id}"
                home.mkdir(exist_ok=True)
                p = ports[per * i : per * (i + 1)] + [0, 0]
                self._nodes[node_id] = _Node(node_id, p[0], p[1], home, p[2], p[3])
            for node in self._nodes.values():
                node.properties.write_text(self._server_properties(node))
            self._state = "running"
            self._owner = os.getpid()
            _live.add(self)
            try:
                self._format_storage()
                for node in self._nodes.values():
                    self._launch(node)
                deadline = time.monotonic() + self._start_timeout
                for node in self._nodes.values():
                    self._wait_listening(node, deadline)
                self._wait_brokers_registered(set(self._nodes), deadline)
                self._warm_coordinators(deadline)
            except BaseException:
                self.stop()
                raise
            _log.info(
                "Kafka %s cluster of %d node(s) at %s", self.version, self._brokers, self.bootstrap_servers
            )
            return self

    def stop(self) -> None:
        """End every JVM (SIGTERM, SIGKILL after 10 s) and remove the data of a temporary cluster;
        the logs stay. Idempotent. In a child made by ``fork()``: returns at once (the cluster is the
        starting process's; it keeps running, its data stays)."""
        if self._foreign_owner() is not None:
            return  # before the lock: a thread of the parent may have held it at the fork
        with self._lock:
            if self._state == "stopped":
                return
            self._state = "stopped"
            _live.discard(self)
            self._admin = None
            procs = [n for n in self._nodes.values() if n.proc is not None]
            for node in procs:
                assert node.proc is not None
                if node.proc.poll() is None:
                    for sig in (signal.SIGCONT, signal.SIGTERM):
                        try:
                            os.kill(node.proc.pid, sig)
                        except ProcessLookupError:
                            pass
            for node in procs:
                assert node.proc is not None
                terminate(node.proc, 10.0)
                if node.log_file is not None:
                    node.log_file.close()
            if self._base is not None and not self._base_given:
                for node in self._nodes.values():
                    shutil.rmtree(node.home / "data", ignore_errors=True)

    close = stop

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.bootstrap_servers if self._state == "running" else self._state
        owner = self._foreign_owner()
        if owner is not None:
            where += f", of process {owner}"
        return f"KafkaCluster(brokers={self._brokers}, {where})"

    def _foreign_owner(self) -> int | None:
        """The process that started the cluster if it is not this one (a child made by fork())."""
        owner = self._owner
        return owner if owner is not None and owner != os.getpid() else None

    def _check_owner(self) -> None:
        owner = self._foreign_owner()
        if owner is not None:
            raise IllegalStateError(
                f"this KafkaCluster was started by process {owner} and cannot be controlled from process "
                f"{os.getpid()} (a child made by fork()): its JVMs are that process's children, which "
                f"stops them. Its addresses (bootstrap_servers, ...) still work here; start a "
                f"KafkaCluster of the child's own to control one."
            )

    # -- what tests read ---------------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:p1,...`` of every node's PLAINTEXT listener (starts the cluster if new)."""
        self._ensure_running()
        return ",".join(f"127.0.0.1:{n.port}" for n in self._nodes.values())

    @property
    def node_ids(self) -> list[int]:
        """The ``node.id`` of each node (the broker ids that metadata reports as leaders)."""
        self._ensure_running()
        return sorted(self._nodes)

    @property
    def version(self) -> str:
        """The Apache Kafka release the nodes run, e.g. ``"4.2.1"``."""
        self._ensure_running()
        assert self._dist is not None
        return self._dist.version

    @property
    def base_dir(self) -> Path:
        """The folder of the nodes' configs, data and logs (the logs stay after :meth:`stop`)."""
        if self._state == "new":
            self.start()
        assert self._base is not None
        return self._base

    def log_path(self, node_id: int) -> Path:
        """The log file of node ``node_id`` (its JVM's stdout and stderr); it stays after :meth:`stop`."""
        return self._node(node_id, started=self._state == "new").log_path

    def pid(self, node_id: int) -> int | None:
        """The process id of node ``node_id``'s JVM while it runs (for CPU accounting), else None."""
        self._check_owner()  # only the parent can tell (reap) its children
        node = self._node(node_id)
        return node.proc.pid if node.running() and node.proc is not None else None

    def port(self, node_id: int) -> int:
        """The PLAINTEXT port of node ``node_id``."""
        return self._node(node_id).port

    # -- security (sasl_ssl=True) -----------------------------------------------------------------
    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """``127.0.0.1:p1,...`` of every node's SASL_SSL listener (``sasl_ssl=True`` only)."""
        self._ensure_secured()
        return ",".join(f"127.0.0.1:{n.sasl_ssl_port}" for n in self._nodes.values())

    @property
    def ssl_bootstrap_servers(self) -> str:
        """``127.0.0.1:p1,...`` of every node's SSL listener, which requires a client certificate
        signed by :attr:`ca_location` (mTLS; the principal is ``User:CN=<common name>``)."""
        self._ensure_secured()
        return ",".join(f"127.0.0.1:{n.ssl_port}" for n in self._nodes.values())

    @property
    def ca_location(self) -> str:
        """The PEM file of the CA that signed the brokers' certificates (librdkafka's ``ssl.ca.location``)."""
        self._ensure_secured()
        assert self._ca is not None
        return str(self._ca.ca_location)

    @property
    def ca(self) -> TestCA:
        """The cluster's CA, to issue more certificates (e.g. ``ca.issue("bob")`` for mTLS as
        ``User:CN=bob``)."""
        self._ensure_secured()
        assert self._ca is not None
        return self._ca

    @property
    def client_certificate(self) -> CertPair:
        """A client certificate (common name ``client``) for the SSL listener; the principal is
        ``User:CN=client``."""
        self._ensure_secured()
        assert self._client_cert is not None
        return self._client_cert

    @property
    def plain_users(self) -> dict[str, str]:
        """The SASL/PLAIN users and their passwords (fixed at start)."""
        return dict(self._plain_users)

    def create_scram_user(
        self, name: str, password: str, mechanism: str = "SCRAM-SHA-256", *, timeout: float = 30.0
    ) -> None:
        """Create or update SCRAM user ``name`` (``SCRAM-SHA-256`` or ``SCRAM-SHA-512``) through the
        admin API and wait until the brokers know it."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        mechs = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
        if mechanism not in mechs:
            raise ConfigError(f"mechanism: expected one of {sorted(mechs)}, got {mechanism!r}")
        _args.check_seconds(timeout, "timeout")
        self._ensure_secured()
        info = ScramCredentialInfo(mechs[mechanism], 4096)
        upsert = UserScramCredentialUpsertion(name, info, password.encode())
        self.admin().alter_user_scram_credentials([upsert])[name].result(timeout)

        def known() -> bool:  # the controller has it; wait until the broker's metadata does
            described = self.admin().describe_user_scram_credentials([name])[name].result(timeout)
            return any(i.mechanism == mechs[mechanism] for i in described.scram_credential_infos)

        deadline = time.monotonic() + timeout
        _wait_until(known, deadline, f"create_scram_user({name!r}): not visible on the brokers")

    def grant(
        self,
        principal: str,
        resource: str,
        name: str = "kafka-cluster",
        operation: str = "ALL",
        *,
        prefixed: bool = False,
        timeout: float = 30.0,
    ) -> None:
        """Allow ``principal`` (e.g. ``"User:alice"``) ``operation`` (Kafka's name: ``ALL``,
        ``READ``, ``WRITE``, ``DESCRIBE``, ``IDEMPOTENT_WRITE``...) on ``resource`` (``"topic"``,
        ``"group"``, ``"transactional_id"`` or ``"cluster"``) ``name`` (literal, or a prefix when
        ``prefixed``) from any host, and wait until the brokers apply it."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AclBinding,
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        kinds = {
            "topic": ResourceType.TOPIC,
            "group": ResourceType.GROUP,
            "transactional_id": ResourceType.TRANSACTIONAL_ID,
            "cluster": ResourceType.BROKER,
        }
        if resource not in kinds:
            raise ConfigError(f"resource: expected one of {sorted(kinds)}, got {resource!r}")
        _args.check_seconds(timeout, "timeout")
        try:
            op = AclOperation[operation.upper()]
        except KeyError:
            raise ConfigError(
                f"operation: expected an ACL operation such as READ or ALL, got {operation!r}"
            ) from None
        self._ensure_secured()
        pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
        binding = AclBinding(kinds[resource], name, pattern, principal, "*", op, AclPermissionType.ALLOW)
        self.admin().create_acls([binding])[binding].result(timeout)
        wanted = AclBindingFilter(kinds[resource], name, pattern, principal, "*", op, AclPermissionType.ALLOW)
        _wait_until(
            lambda: bool(self.admin().describe_acls(wanted).result(timeout)),
            time.monotonic() + timeout,
            f"grant({principal!r}, {resource!r}, {name!r}): not applied",
        )

    def _ensure_secured(self) -> None:
        if not self._sasl_ssl:
            raise IllegalStateError(
                "this KafkaCluster has no secured listeners: create it with sasl_ssl=True"
            )
        self._ensure_running()

    def _make_certificates(self) -> None:
        assert self._base is not None
        self._ca = TestCA(self._base / "tls")
        self._server_cert = self._ca.issue("broker")
        self._client_cert = self._ca.issue("client")

    def _security_properties(self, node: _Node) -> dict[str, str]:
        assert self._server_cert is not None and self._ca is not None
        jaas = "org.apache.kafka.common.security"
        scram = f"{jaas}.scram.ScramLoginModule required;"
        plain_users = " ".join(f'user_{u}="{p}"' for u, p in self._plain_users.items())
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
            f"SASL_SSL://127.0.0.1:{node.sasl_ssl_port},SSL://127.0.0.1:{node.ssl_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port},SASL_SSL://127.0.0.1:{node.sasl_ssl_port},"
            f"SSL://127.0.0.1:{node.ssl_port}",
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN,OAUTHBEARER",
            "listener.name.sasl_ssl.plain.sasl.jaas.config":
                f"{jaas}.plain.PlainLoginModule required {plain_users};",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config":
                f"{jaas}.oauthbearer.OAuthBearerLoginModule required;",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self._server_cert.keystore_pem()),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self._ca.ca_location),
            "listener.name.ssl.ssl.client.auth": "required",
            **self._jwks_properties(),
        }  # fmt: skip

    def _jwks_properties(self) -> dict[str, str]:
        if self._oauth_jwks_url is None:
            return {}
        prefix = "listener.name.sasl_ssl.oauthbearer."
        return {
            f"{prefix}sasl.server.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            f"{prefix}sasl.oauthbearer.jwks.endpoint.url": self._oauth_jwks_url,
            "sasl.oauthbearer.jwks.endpoint.url": self._oauth_jwks_url,
        }  # fmt: skip

    # -- topics ------------------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        """Create topic ``name`` and wait until every partition has a leader. ``replication_factor``
        defaults to ``min(3, brokers)``. Raises ConfigError for bad arguments, KafkaError (with
        Kafka's error name in ``code``) if Kafka refuses, e.g. ``TOPIC_ALREADY_EXISTS``."""
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        from kipconsumer.errors import KafkaError

        check_topic_name(name, "name")
        _args.check_partitions(partitions)
        rf = _args.check_replication_factor(
            min(3, self._brokers) if replication_factor is None else replication_factor, self._brokers)
        _args.check_seconds(timeout, "timeout")
        topic = NewTopic(name, num_partitions=partitions, replication_factor=rf, config=dict(config or {}))
        future = self.admin().create_topics([topic], operation_timeout=timeout)[name]
        try:
            future.result(timeout)
        except Exception as e:
            err: Any = e.args[0] if e.args else None
            code = err.name() if hasattr(err, "name") else None
            text = err.str() if hasattr(err, "str") else str(e)
            raise KafkaError(f"create_topic({name!r}): {text}", code=code) from e
        self._wait_leaders(name, partitions, time.monotonic() + timeout)

    def admin(self) -> Any:
        """A confluent-kafka ``AdminClient`` on the PLAINTEXT listeners (a super user), for users,
        ACLs and configs in tests."""
        self._check_owner()  # the parent's client would hang here; before the lock (see stop())
        with self._lock:
            self._ensure_running()
            if self._admin is None:
                from confluent_kafka.admin import AdminClient

                self._admin = AdminClient(
                    {
                        "bootstrap.servers": self.bootstrap_servers,
                        "logger": _ADMIN_LOG,
                        "log.connection.close": False,
                    }
                )
            return self._admin

    def set_group_config(self, group_id: str, config: Mapping[str, object], *, timeout: float = 30.0) -> None:
        """Set dynamic configs of group ``group_id`` (incrementalAlterConfigs on a GROUP resource), e.g. a
        share group's ``share.auto.offset.reset``, ``share.record.lock.duration.ms``,
        ``share.session.timeout.ms``, ``share.heartbeat.interval.ms``. Raises KafkaError if Kafka refuses."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
        )

        from kipconsumer.errors import KafkaError

        _args.check_seconds(timeout, "timeout")
        entries = [ConfigEntry(str(k), _prop(v), incremental_operation=AlterConfigOpType.SET)
                   for k, v in config.items()]
        resource = ConfigResource(ConfigResource.Type.GROUP, group_id, incremental_configs=entries)
        future = self.admin().incremental_alter_configs([resource], request_timeout=timeout)[resource]
        try:
            future.result(timeout)
        except Exception as e:
            raise KafkaError(f"set_group_config({group_id!r}): {e}") from e

    # -- faults ------------------------------------------------------------------------------------
    def kill_broker(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (broker and controller) and reap it."""
        self._check_owner()
        node = self._node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()
        node.paused = False

    def start_broker(self, node_id: int, *, timeout: float | None = None) -> None:
        """Restart node ``node_id`` on the same ports and data and wait until it is registered
        again. No-op if it runs."""
        self._check_owner()
        if timeout is not None:
            _args.check_seconds(timeout, "timeout")
        node = self._node(node_id)
        if node.running():
            return
        deadline = time.monotonic() + (self._start_timeout if timeout is None else timeout)
        self._launch(node)
        self._wait_listening(node, deadline)
        self._wait_brokers_registered({node_id}, deadline)

    def pause_broker(self, node_id: int) -> None:
        """SIGSTOP node ``node_id``: it keeps its connections but answers nothing."""
        self._check_owner()
        node = self._node(node_id)
        if not node.running():
            raise IllegalStateError(f"node_id: node {node_id} is not running")
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGSTOP)
        node.paused = True

    def resume_broker(self, node_id: int) -> None:
        """SIGCONT node ``node_id``."""
        self._check_owner()
        node = self._node(node_id)
        if node.running():
            assert node.proc is not None
            os.kill(node.proc.pid, signal.SIGCONT)
        node.paused = False

    # -- internals ---------------------------------------------------------------------------------
    def _ensure_running(self) -> None:
        if self._state == "new":
            self.start()
        elif self._state == "stopped":
            raise IllegalStateError("KafkaCluster is stopped; create a new one")

    def _node(self, node_id: int, *, started: bool = True) -> _Node:
        _args.check_node_id(node_id, self._brokers)
        if started:
            self._ensure_running()
        node = self._nodes.get(node_id)
        if node is None:
            raise ConfigError(f"node_id: expected one of {sorted(self._nodes)}, got {node_id!r}")
        return node

    def _server_properties(self, node: _Node) -> str:
        rf = min(3, self._brokers)
        min_isr = min(2, rf)
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self._nodes.values())
        assert self._base is not None
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(node.home / "data"),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min_isr),
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": str(min_isr),
            "share.coordinator.state.topic.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",
            "group.consumer.min.session.timeout.ms": "3000",
            "group.consumer.session.timeout.ms": "10000",
            "group.consumer.min.heartbeat.interval.ms": "500",
            "group.consumer.heartbeat.interval.ms": "1000",
            # lower bounds only (the defaults stay): share groups may set short locks, sessions and
            # heartbeats as group configs (set_group_config), as share-group tests do
            "group.share.min.record.lock.duration.ms": "1000",
            "group.share.min.session.timeout.ms": "3000",
            "group.share.min.heartbeat.interval.ms": "500",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "transaction.remove.expired.transaction.cleanup.interval.ms": "5000",
        }
        if self._sasl_ssl:
            props.update(self._security_properties(node))
        props.update(self._extra)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _format_storage(self) -> None:
        assert self._dist is not None
        procs = []
        for node in self._nodes.values():
            cmd = [self._java, "-Xmx256m", "-cp", self._dist.classpath, "kafka.tools.StorageTool", "format",
                   "-t", self._cluster_id, "-c", str(node.properties), "--feature", "share.version=1",
                   "--ignore-formatted"]  # fmt: skip
            procs.append((node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        for node, proc in procs:
            try:
                out, _ = proc.communicate(timeout=self._start_timeout)
            except subprocess.TimeoutExpired:
                for _, p in procs:
                    p.kill()
                    p.wait()
                raise KafkaClusterError(
                    f"formatting node {node.node_id}'s storage took longer than start_timeout="
                    f"{self._start_timeout} s") from None
            if proc.returncode != 0:
                text = out.decode(errors="replace")[-3000:]
                raise KafkaClusterError(f"formatting node {node.node_id}'s storage failed:\n{text}")

    def _launch(self, node: _Node) -> None:
        assert self._dist is not None and self._base is not None
        if node.log_file is not None:
            node.log_file.close()
        node.log_file = open(node.log_path, "ab")
        cmd = [self._java, "-Xms128m", f"-Xmx{self._heap}", "-XX:+UseSerialGC", "-XX:-UsePerfData",
               "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self._base / 'log4j2.yaml'}",
               *self._jvm_properties(),
               "-cp", self._dist.classpath, "kafka.Kafka", str(node.properties)]  # fmt: skip
        node.proc = spawn_tied(cmd, cwd=str(node.home), stdout=node.log_file)
        node.paused = False

    def _jvm_properties(self) -> list[str]:
        if self._oauth_jwks_url is None:
            return []
        return [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self._oauth_jwks_url}"]

    def _check_alive(self, node: _Node) -> None:
        if node.proc is not None and node.proc.poll() is not None:
            raise KafkaClusterError(
                f"Kafka node {node.node_id} exited with {node.proc.returncode} at start; "
                f"its log ({node.log_path}) ends:\n{node.log_tail()}"
            )

    def _wait_listening(self, node: _Node, deadline: float) -> None:
        while not port_open(node.port):
            self._check_alive(node)
            if time.monotonic() > deadline:
                raise KafkaClusterError(
                    f"Kafka node {node.node_id} did not listen on 127.0.0.1:{node.port} in time; "
                    f"its log ({node.log_path}) ends:\n{node.log_tail()}"
                )
            time.sleep(0.1)

    def _wait_brokers_registered(self, node_ids: set[int], deadline: float) -> None:
        """Until every node of ``node_ids`` answers metadata that lists all of them."""
        from confluent_kafka.admin import AdminClient

        for node_id in sorted(node_ids):
            node = self._nodes[node_id]
            probe = AdminClient(
                {
                    "bootstrap.servers": f"127.0.0.1:{node.port}",
                    "logger": _ADMIN_LOG,
                    "log.connection.close": False,
                }
            )
            seen: set[int] = set()
            while True:
                self._check_alive(node)
                try:
                    md = probe.list_topics(timeout=2.0)
                    seen = set(md.brokers)
                    if node_ids <= seen and node_id in seen:
                        break
                except Exception:  # not answering yet
                    pass
                if time.monotonic() > deadline:
                    raise KafkaClusterError(
                        f"Kafka node {node_id} did not register in time (metadata lists {sorted(seen)}); "
                        f"its log ({node.log_path}) ends:\n{node.log_tail()}"
                    )
                time.sleep(0.2)

    def _warm_coordinators(self, deadline: float) -> None:
        """Create and load ``__consumer_offsets`` and ``__transaction_state`` before the first test
        does. A fresh cluster creates them on the first FindCoordinator; until they are loaded,
        librdkafka's first group member waits for its coordinator (seen: a consumer's seek right
        after assign() refused for 90 s), and the first transactional producer retries."""
        from confluent_kafka import Producer

        # DescribeGroups, not OffsetFetch: librdkafka 2.16's AdminClient crashes (rd_kafka_cgrp_op on a
        # client without a group) when ListConsumerGroupOffsets is answered COORDINATOR_LOAD_IN_PROGRESS
        admin = self.admin()
        while True:
            try:
                described = admin.describe_consumer_groups(["kipconsumer-warm-up"])["kipconsumer-warm-up"]
                described.result(5)
                break
            except Exception as e:
                if time.monotonic() > deadline:
                    raise KafkaClusterError(f"the group coordinator did not come up in time: {e}") from e
                time.sleep(0.2)
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "transactional.id": "kipconsumer-warm-up",
                "logger": _ADMIN_LOG,
            }
        )
        try:
            producer.init_transactions(max(1.0, deadline - time.monotonic()))
        except Exception as e:
            raise KafkaClusterError(f"the transaction coordinator did not come up in time: {e}") from e
        finally:
            producer.flush(0)

    def _wait_leaders(self, topic: str, partitions: int, deadline: float) -> None:
        def led() -> bool:
            md = self.admin().list_topics(topic, timeout=2.0).topics.get(topic)
            return (
                md is not None
                and md.error is None
                and len(md.partitions) == partitions
                and all(p.leader >= 0 for p in md.partitions.values())
            )

        _wait_until(led, deadline, f"create_topic({topic!r}): partitions had no leader")


def _wait_until(check: Callable[[], bool], deadline: float, what: str) -> None:
    """Calls ``check`` every 50 ms until it returns true (an exception counts as not yet); raises
    KafkaTimeoutError("<what> in time") once ``deadline`` (time.monotonic()) passed."""
    from kipconsumer.errors import KafkaTimeoutError

    while True:
        try:
            if check():
                return
        except Exception:  # not propagated yet
            pass
        if time.monotonic() > deadline:
            raise KafkaTimeoutError(f"{what} in time")
        time.sleep(0.05)


def _new_cluster_id() -> str:
    """A random KRaft cluster id (a url-safe base64 UUID) that does not start with '-': the storage
    tool's argument parser would take it for an option ("expected one argument", 1 start in 64)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _prop(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
