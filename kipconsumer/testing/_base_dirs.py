"""The temporary base folders of KafkaCluster (``kipconsumer-kafka-*`` in the temp folder), who owns
each, and the removal of those their owner left behind.

Rule: each temporary base folder holds a marker (``owner``: the pid and start time of the process
that made it). Its cluster removes the data at ``stop()`` and at interpreter exit; the logs stay. What
a process that could not clean up left behind (SIGKILL, a crash) is removed by the next KafkaCluster
started on the machine, in any process: the data of a folder whose owner is gone at once; the folder
itself, logs included, once nothing in it changed for :data:`LOG_RETENTION_S` (a day), so that the
logs of a failed start or a crash stay readable that long. A folder whose owner lives is never
touched. A folder without a marker (made before markers existed) is removed once idle that long.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

__all__ = ["LOG_RETENTION_S", "PREFIX", "make_base_dir", "sweep_stale"]

PREFIX = "kipconsumer-kafka-"
LOG_RETENTION_S = 24 * 3600.0
_MARKER = "owner"


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks after boot, /proc/<pid>/stat field 22), which
    tells a reused pid apart; "?" where /proc cannot say; None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return "?"
    fields = stat[stat.rfind(")") + 2:].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else "?"


def _alive(pid: int, started: str) -> bool:
    now = _start_time(pid)
    if now is None:
        return False
    if now == "?" or started == "?":
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return now == started


def make_base_dir() -> Path:
    """A new temporary base folder, marked as this process's."""
    base = Path(tempfile.mkdtemp(prefix=PREFIX))
    pid = os.getpid()
    (base / _MARKER).write_text(f"{pid} {_start_time(pid) or '?'}\n")
    return base


def _owner_alive(base: Path) -> bool | None:
    """True or False for a marked folder's owner; None when the folder has no (readable) marker."""
    try:
        pid_text, started = (base / _MARKER).read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    return _alive(pid, started)


def _last_change(base: Path) -> float:
    """The newest modification time of the folder, its marker, its node folders and their logs."""
    paths = [base, base / _MARKER]
    for node in base.glob("node-*"):
        paths += [node, node / "server.log"]
    times = []
    for p in paths:
        try:
            times.append(p.stat().st_mtime)
        except OSError:
            pass
    return max(times, default=0.0)


def sweep_stale(tmp: str | os.PathLike[str] | None = None) -> list[Path]:
    """Applies the rule to every ``kipconsumer-kafka-*`` folder in ``tmp`` (default: the temp folder);
    returns the folders it removed whole. Errors (a folder removed meanwhile) are ignored."""
    root = Path(tmp if tmp is not None else tempfile.gettempdir())
    removed: list[Path] = []
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(PREFIX) and p.is_dir()]
    except OSError:
        return removed
    now = time.time()
    for base in candidates:
        alive = _owner_alive(base)
        if alive:
            continue
        idle = now - _last_change(base)  # before the data goes: removing it touches node-*/
        if alive is False:
            for data in base.glob("node-*/data"):
                shutil.rmtree(data, ignore_errors=True)
        if idle > LOG_RETENTION_S:
            shutil.rmtree(base, ignore_errors=True)
            removed.append(base)
    return removed
