"""Observing a server's run (``daisy.server_observer`` in daisy 1.x).

A `ServerObserver` registers with a server (`Server` or `SerialServer`,
both `ServerObservee`) and hears about the run: a task starts, blocks are
handed out and released, a task is done, the server exits. The Rust core
does not call into Python per block; the server folds the core's periodic
snapshots (about 20 a second) into these events, so an observer sees every
change of a task's counts, batched.
"""

from __future__ import annotations

from typing import Any


class ServerObservee:
    """Something observers can register with."""

    def __init__(self) -> None:
        self._observers: list[ServerObserver] = []

    def register_observer(self, observer: ServerObserver) -> None:
        """Send this server's events to ``observer``."""
        if observer not in self._observers:
            self._observers.append(observer)

    def unregister_observer(self, observer: ServerObserver) -> None:
        """Stop sending events to ``observer``."""
        if observer in self._observers:
            self._observers.remove(observer)

    def notify_task_start(self, task_id: str, task_state: Any) -> None:
        """A task handed out (or skipped) its first block."""
        for o in list(self._observers):
            o.on_task_start(task_id, task_state)

    def notify_acquire_block(self, task_id: str, task_state: Any) -> None:
        """Blocks of a task were handed out."""
        for o in list(self._observers):
            o.on_acquire_block(task_id, task_state)

    def notify_release_block(self, task_id: str, task_state: Any) -> None:
        """Blocks of a task came back."""
        for o in list(self._observers):
            o.on_release_block(task_id, task_state)

    def notify_block_failure(self, block: Any, exception: Any, context: Any) -> None:
        """A block failed."""
        for o in list(self._observers):
            o.on_block_failure(block, exception, context)

    def notify_task_done(self, task_id: str, task_state: Any) -> None:
        """Every block of a task is completed, failed or orphaned."""
        for o in list(self._observers):
            o.on_task_done(task_id, task_state)

    def notify_server_exit(self) -> None:
        """The run ended."""
        for o in list(self._observers):
            o.on_server_exit()


class ServerObserver:
    """Base class of observers: registers with ``server`` and ignores every
    event; override the ones you want."""

    def __init__(self, server: ServerObservee) -> None:
        self.server = server
        server.register_observer(self)

    def on_task_start(self, task_id: str, task_state: Any) -> None:
        """A task started."""

    def on_acquire_block(self, task_id: str, task_state: Any) -> None:
        """Blocks of a task were handed out."""

    def on_release_block(self, task_id: str, task_state: Any) -> None:
        """Blocks of a task came back."""

    def on_block_failure(self, block: Any, exception: Any, context: Any) -> None:
        """A block failed."""

    def on_task_done(self, task_id: str, task_state: Any) -> None:
        """A task is done."""

    def on_server_exit(self) -> None:
        """The run ended."""


class StateEvents:
    """Turns successive task-state snapshots into observer events (what
    changed since the last snapshot)."""

    def __init__(self, observee: ServerObservee) -> None:
        self.observee = observee
        self._last: dict[str, tuple[int, int, int]] = {}
        self._done: set[str] = set()

    def update(self, task_id: str, state: Any) -> None:
        """Fold one snapshot of a task."""
        processed = state.completed_count + state.failed_count + state.orphaned_count
        now = (state.processing_count + processed, processed, int(state.is_done()))
        before = self._last.get(task_id)
        if before is None:
            if now[0] == 0 and not now[2]:
                return  # not started yet
            self.observee.notify_task_start(task_id, state)
            before = (0, 0, 0)
        if now[0] > before[0]:
            self.observee.notify_acquire_block(task_id, state)
        if now[1] > before[1]:
            self.observee.notify_release_block(task_id, state)
        if now[2] and task_id not in self._done:
            self._done.add(task_id)
            self.observee.notify_task_done(task_id, state)
        self._last[task_id] = now
