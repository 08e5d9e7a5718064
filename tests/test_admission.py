"""Strangers on the network cannot delay this machine's own workers (issue
26, item 9): the connections waiting to say hello are admitted through two
doors with allowances of their own, the TCP port (anyone who can reach
it) and the run's Unix-domain socket (this user's local workers).
"""

from __future__ import annotations

import functools
import logging
import selectors
import socket
import threading
import time

from conftest import line_task

import daisy


class SilentCrowd:
    """Keeps ``n`` TCP connections to ``port`` open that never say hello,
    opening a new one the moment the server drops one, until stopped (at
    most ``limit`` seconds)."""

    def __init__(self, port: int, n: int, limit: float = 90.0) -> None:
        self.port, self.n, self.limit = port, n, limit
        self.open = 0
        self.ready = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)
        self.thread.start()

    def _connect(self, sel: selectors.BaseSelector) -> bool:
        try:
            c = socket.create_connection(("127.0.0.1", self.port), timeout=2)
        except OSError:
            return False
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ)
        return True

    def _hold(self) -> None:
        end = time.monotonic() + self.limit
        with selectors.DefaultSelector() as sel:
            while not self.done.is_set() and time.monotonic() < end:
                while len(sel.get_map()) < self.n and self._connect(sel):
                    pass
                self.open = len(sel.get_map())
                if self.open >= self.n:
                    self.ready.set()
                # the server closed some: close ours, open others at once
                for key, _ in sel.select(timeout=0.1):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    sel.unregister(sock)
                    sock.close()
            for key in list(sel.get_map().values()):
                sel.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)


def connect_when_crowded(flag: str) -> None:
    """A worker function that waits for the silent crowd to be in place,
    then connects (through the local socket) and processes blocks."""
    import os
    import time

    import daisy

    end = time.monotonic() + 60
    while not os.path.exists(flag) and time.monotonic() < end:
        time.sleep(0.05)
    client = daisy.Client()
    while True:
        with client.acquire_block() as block:
            if block is None:
                return
            time.sleep(0.02)


def test_silent_tcp_connections_do_not_make_local_workers_busy(tmp_path, caplog) -> None:
    """300 connections to the run's TCP port that never say hello (a
    port scanner, another user's stuck clients) are in place when the
    run's local workers connect: the workers still connect at once through
    the local socket, none dies "busy", and every block is done."""
    crowds: list[SilentCrowd] = []
    flag = tmp_path / "crowded"

    def on_listening(context: daisy.Context) -> None:
        # not waited for here: the server accepts them once this returns
        crowd = SilentCrowd(int(context["port"]), 300)
        crowds.append(crowd)

        def mark() -> None:
            if crowd.ready.wait(60):
                flag.touch()

        threading.Thread(target=mark, daemon=True).start()

    task = line_task(
        "local",
        24,
        process_function=functools.partial(connect_when_crowded, str(flag)),
        max_workers=2,
        max_retries=0,
    )
    task.init_callback_fn = on_listening
    caplog.set_level(logging.INFO, logger="daisy")
    try:
        states = daisy.Server().run_blockwise([task], progress=False)
    finally:
        for crowd in crowds:
            crowd.stop()
    state = states["local"]
    assert flag.exists(), f"only {crowds[0].open} silent connections were ever open"
    assert state.completed_count == 24, state
    assert state.worker_failure_count == 0, state
    assert state.worker_restart_count == 0, state
    full = [r.getMessage() for r in caplog.records if "are waiting to say hello" in r.getMessage()]
    # strangers were told "busy" at the TCP port; the local workers never
    assert any(m.startswith("256 connections through the TCP port") for m in full), full
    assert not any(m.startswith("256 connections through the local socket") for m in full), full
