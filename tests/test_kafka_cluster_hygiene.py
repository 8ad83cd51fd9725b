"""KafkaCluster's argument checks and the removal of what dead processes' clusters left in the temp
folder (issue #38): both without a JVM, so they run in the fast tier. The same behaviours with real
JVMs (a SIGKILLed owner, a dropped cluster, a forked child) are in tests/test_kafka_cluster.py."""

from __future__ import annotations

import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from kipconsumer.errors import ConfigError
from kipconsumer.testing import KafkaCluster, _base_dirs
from kipconsumer.testing._base_dirs import LOG_RETENTION_S, PREFIX, sweep_stale


@pytest.mark.parametrize(("kwargs", "argname"), [
    pytest.param({"version": 421}, "version", id="version=421"),
    pytest.param({"start_timeout": "5"}, "start_timeout", id="start_timeout='5'"),
    pytest.param({"start_timeout": -1}, "start_timeout", id="start_timeout=-1"),
    pytest.param({"start_timeout": 0}, "start_timeout", id="start_timeout=0"),
    pytest.param({"start_timeout": math.nan}, "start_timeout", id="start_timeout=nan"),
    pytest.param({"start_timeout": math.inf}, "start_timeout", id="start_timeout=inf"),
    pytest.param({"start_timeout": True}, "start_timeout", id="start_timeout=True"),
    pytest.param({"heap": "lots"}, "heap", id="heap='lots'"),
    pytest.param({"heap": 512}, "heap", id="heap=512"),
    pytest.param({"sasl_ssl": True, "plain_users": {"u": "p\x00w"}}, "plain_users", id="password-NUL"),
    pytest.param({"sasl_ssl": True, "plain_users": {"u": "p\nw"}}, "plain_users", id="password-newline"),
    pytest.param({"sasl_ssl": True, "plain_users": {"u u": "p"}}, "plain_users", id="user-space"),
    pytest.param({"sasl_ssl": True, "plain_users": {"": "p"}}, "plain_users", id="user-empty"),
    pytest.param({"sasl_ssl": True, "plain_users": {"u": 5}}, "plain_users", id="password-int"),
    pytest.param({"sasl_ssl": True, "plain_users": [("u", "p")]}, "plain_users", id="users-list"),
])
def test_bad_constructor_arguments_are_config_errors_naming_them(
        kwargs: dict[str, Any], argname: str) -> None:
    with pytest.raises(ConfigError, match=f"^{argname}: ") as info:
        KafkaCluster(**kwargs)
    assert any(allowed in str(info.value) for allowed in ("expected", "a name is", "a password is"))
    assert "p\x00w" not in str(info.value) and "p\nw" not in str(info.value)  # a password is never shown


def test_a_password_is_not_shown_in_the_error() -> None:
    with pytest.raises(ConfigError, match="plain_users: user 'u'") as info:
        KafkaCluster(sasl_ssl=True, plain_users={"u": 'topsecret"x'})
    assert "topsecret" not in str(info.value)


@pytest.mark.parametrize(("call", "argname"), [
    pytest.param(lambda k: k.create_topic("t", 2**31), "partitions", id="create_topic-2**31"),
    pytest.param(lambda k: k.create_topic("t", 0), "partitions", id="create_topic-0"),
    pytest.param(lambda k: k.create_topic("t", True), "partitions", id="create_topic-True"),
    pytest.param(lambda k: k.create_topic("t", 1, replication_factor=True), "replication_factor",
                 id="replication_factor=True"),
    pytest.param(lambda k: k.create_topic("t", 1, timeout=-1), "timeout", id="create_topic-timeout=-1"),
    pytest.param(lambda k: k.kill_broker(True), "node_id", id="kill_broker(True)"),
    pytest.param(lambda k: k.kill_broker(0), "node_id", id="kill_broker(0)"),
    pytest.param(lambda k: k.kill_broker(2), "node_id", id="kill_broker(2)"),
    pytest.param(lambda k: k.kill_broker("1"), "node_id", id="kill_broker('1')"),
    pytest.param(lambda k: k.pause_broker(1.0), "node_id", id="pause_broker(1.0)"),
    pytest.param(lambda k: k.start_broker(1, timeout=-1), "timeout", id="start_broker-timeout=-1"),
    pytest.param(lambda k: k.pid(None), "node_id", id="pid(None)"),
])
def test_bad_method_arguments_are_config_errors_before_anything_starts(call: Any, argname: str) -> None:
    """Checked before the cluster would start on first use: no JVM is started for a bad argument
    (``kill_broker(True)`` used to start the cluster and kill node 1)."""
    k = KafkaCluster()
    with pytest.raises(ConfigError, match=f"^{argname}: expected"):
        call(k)
    assert repr(k) == "KafkaCluster(brokers=1, new)"


# -- stale temporary folders ------------------------------------------------------------------------
def _dead_process() -> tuple[int, str]:
    """The pid and start time of a process that has exited."""
    proc = subprocess.Popen(["sleep", "30"])
    started = _base_dirs._start_time(proc.pid)
    proc.kill()
    proc.wait()
    assert started is not None
    return proc.pid, started


def _folder(tmp: Path, name: str, owner: str | None, *, age_s: float = 0.0) -> Path:
    base = tmp / f"{PREFIX}{name}"
    (base / "node-1" / "data" / "t-0").mkdir(parents=True)
    (base / "node-1" / "data" / "t-0" / "00000.log").write_bytes(b"x" * 1000)
    (base / "node-1" / "server.log").write_text("ERROR the reason a start failed\n")
    if owner is not None:
        (base / "owner").write_text(owner + "\n")
    then = time.time() - age_s
    for p in sorted(base.rglob("*"), reverse=True) + [base]:
        os.utime(p, (then, then))
    return base


def test_stale_folders_of_dead_owners_lose_their_data_at_once_and_their_logs_after_a_day(
        tmp_path: Path) -> None:
    dead_pid, dead_start = _dead_process()
    me = f"{os.getpid()} {_base_dirs._start_time(os.getpid())}"
    day = LOG_RETENTION_S
    dead_recent = _folder(tmp_path, "dead-recent", f"{dead_pid} {dead_start}", age_s=60)
    dead_old = _folder(tmp_path, "dead-old", f"{dead_pid} {dead_start}", age_s=day + 60)
    reused_pid = _folder(tmp_path, "reused-pid", f"{os.getpid()} 1", age_s=60)  # this pid, another start
    live = _folder(tmp_path, "live", me, age_s=day + 60)
    unmarked_recent = _folder(tmp_path, "unmarked-recent", None, age_s=60)
    unmarked_old = _folder(tmp_path, "unmarked-old", None, age_s=day + 60)
    other = tmp_path / "someone-elses"
    other.mkdir()

    removed = sweep_stale(tmp_path)

    assert sorted(removed) == sorted([dead_old, unmarked_old])
    assert not dead_old.exists() and not unmarked_old.exists()
    for kept_logs in (dead_recent, reused_pid):  # owner gone: the data goes, the logs stay a day
        assert not (kept_logs / "node-1" / "data").exists()
        assert "the reason a start failed" in (kept_logs / "node-1" / "server.log").read_text()
    for untouched in (live, unmarked_recent):  # a live owner's, or maybe another process's starting now
        assert (untouched / "node-1" / "data" / "t-0" / "00000.log").exists()
    assert other.exists()


def test_a_new_temporary_folder_is_marked_with_its_owner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    base = _base_dirs.make_base_dir()
    assert base.parent == tmp_path and base.name.startswith(PREFIX)
    me = [str(os.getpid()), str(_base_dirs._start_time(os.getpid()))]
    assert (base / "owner").read_text().split() == me
    assert sweep_stale(tmp_path) == [] and base.exists()
