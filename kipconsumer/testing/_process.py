"""Child processes that die with the process that started them, and free loopback ports.

Linux's parent-death signal (``PR_SET_PDEATHSIG``) fires when the *thread* that forked a child
ends, not the process. So every child is started from one launcher thread that lives as long as the
interpreter: a cluster started from a short-lived worker thread keeps its JVMs, and a parent killed
with SIGKILL still takes them down (SIGKILL, from the kernel). ``setpriv --pdeathsig`` sets the
signal where util-linux has it, which keeps ``subprocess`` on its fork-safe path; otherwise a
``preexec_fn`` sets it.
"""

from __future__ import annotations

import ctypes
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import IO, Any

__all__ = ["spawn_tied", "free_ports"]

_PR_SET_PDEATHSIG = 1
_requests: queue.SimpleQueue[tuple[Future[subprocess.Popen[bytes]], dict[str, Any]]] = queue.SimpleQueue()
_launcher: threading.Thread | None = None
_launcher_lock = threading.Lock()


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _serve() -> None:
    while True:
        future, kwargs = _requests.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(subprocess.Popen(**kwargs))
        except BaseException as e:  # handed to the caller
            future.set_exception(e)


def spawn_tied(
    argv: Sequence[str], *, cwd: str, stdout: IO[bytes], env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (so a terminal's Ctrl-C reaches it only through us), its
    stdout and stderr into ``stdout``, killed by the kernel if this process dies."""
    global _launcher
    with _launcher_lock:
        if _launcher is None or not _launcher.is_alive():
            _launcher = threading.Thread(target=_serve, name="kipconsumer-testing-launcher", daemon=True)
            _launcher.start()
    setpriv = shutil.which("setpriv")
    kwargs: dict[str, Any] = {
        "args": ([setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []) + list(argv),
        "cwd": cwd,
        "stdin": subprocess.DEVNULL,
        "stdout": stdout,
        "stderr": subprocess.STDOUT,
        "start_new_session": True,
        "env": env,
    }
    if setpriv is None:
        kwargs["preexec_fn"] = _set_pdeathsig
    future: Future[subprocess.Popen[bytes]] = Future()
    _requests.put((future, kwargs))
    return future.result()


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports of 127.0.0.1 that were free a moment ago."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_open(port: int, timeout: float = 0.2) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def terminate(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; reaps the process. A stopped process is continued
    first, or it could not act on SIGTERM."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGCONT, signal.SIGTERM):
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            return
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
