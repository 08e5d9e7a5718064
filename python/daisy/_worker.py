"""Entry point of daisy's worker processes: ``python -m daisy._worker
[--payload FILE]``.

The server starts this with ``DAISY_CONTEXT`` set. The payload is the
driver's ``sys.path`` (pickled first, so functions defined in the driver's
own modules can be imported here, as multiprocessing's spawn does)
followed by the task's cloudpickled ``(process_function, post_check)``; it
comes on stdin, or from ``FILE`` (a cluster job has no stdin of ours),
which is loaded only if it is a private file of this user's whose
SHA-256 is the one the run put in ``DAISY_CONTEXT`` (another user could
have changed it while the job was queued). A
block function is called for every block this worker acquires, and the
block fails when its post-check (the second function of a
``check_function=(pre, post)`` pair) returns False; a worker function (no
arguments) is called once and runs its own loop with `daisy.Client`.
stdout and stderr are already the worker's log files.
"""

from __future__ import annotations

import faulthandler
import inspect
import io
import linecache
import logging
import os
import pickle
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import cloudpickle

from daisy.client import Client
from daisy.context import Context
from daisy.worker import run_exit_hooks


def _count_required_args(fn: Callable[..., Any]) -> int | None:
    """Positional parameters without defaults, or None if unknowable: a
    worker calls a process function that has none without a block (a worker
    function), and `Task` checks the count when it is built."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return sum(
        1
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    )


def load_payload(payload: bytes) -> tuple[Any, Any]:
    """The payload's ``(function, post_check)``, the driver's ``sys.path``
    entries added first so the function's modules import here, and the
    source lines the driver sent (a notebook cell's) put in ``linecache``
    for tracebacks to show."""
    stream = io.BytesIO(payload)
    path, sources = pickle.load(stream)
    for entry in reversed(path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    for name, lines in sources.items():
        # no modification time: linecache.checkcache keeps the entry
        linecache.cache[name] = (sum(map(len, lines)), None, lines, name)
    function, post_check = cloudpickle.load(stream)
    return function, post_check


def run_payload(payload: bytes, context: Context | None = None) -> None:
    """Run one worker: unpack the payload and process blocks until the
    task has none left for it."""
    function, post_check = load_payload(payload)
    run_function(function, post_check, context)


def run_function(function: Any, post_check: Any, context: Context | None = None) -> None:
    """Run one worker of a loaded function: a block function is called for
    every block this worker acquires; a worker function (no arguments)
    once. A crash of the interpreter (a segfault in an extension) writes
    the Python traceback of every thread to the worker's log (stderr),
    where it would otherwise leave nothing."""
    faulthandler.enable(file=2, all_threads=True)
    if _count_required_args(function) == 0:
        function()
        return
    client = Client(context)
    try:
        client.process_blocks(function, post_check)
    finally:
        client.close()


#: no longer read: a worker always leaves the interpreter's ordinary way
#: (the fast exit it chose threw away what user code left for exit time)
FAST_EXIT_VARIABLE = "DAISY_WORKER_FAST_EXIT"


def leave(code: int) -> NoReturn:
    """End the worker the interpreter's ordinary way: run the
    `daisy.at_worker_exit` hooks, then ``sys.exit(code)``, so that what
    user code left for exit time happens as it would in a script:
    non-daemon threads are joined, ``atexit`` handlers run (the logging
    module's flush among them), and module globals are released, which
    flushes and closes the files they kept open (h5py, zarr and database
    handles close the same way). The worker is told there is no more work
    before this, so its exit costs the run no block; its length is the
    worker's teardown in the report. Called from the top of the worker's
    stack only (cold workers at ``__main__``, forked ones after leaving the
    launcher's frames), so no daisy code is left to unwind through."""
    run_exit_hooks()
    if os.environ.get(FAST_EXIT_VARIABLE, "").strip() not in ("", "0"):
        logging.getLogger("daisy.worker").info(
            "daisy: %s is no longer read; workers leave the interpreter's ordinary way "
            "(atexit handlers, open files and non-daemon threads are kept)",
            FAST_EXIT_VARIABLE,
        )
    sys.exit(code)


def log_daisy_messages() -> None:
    """Send the ``daisy`` loggers' records, INFO and up, to stderr (the
    worker's log) and leave the root logger alone. A worker's logging is
    the user's to set up, as in daisy 1.2.2 and 2.0.0: the root logger at
    WARNING with no handler, so a ``logging.basicConfig`` in the user's
    function takes effect and libraries' INFO lines stay out unless asked
    for. Not propagated, so a root handler the user adds does not repeat
    daisy's lines."""
    log = logging.getLogger("daisy")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def read_checked_payload(path: str) -> bytes:
    """The payload at ``path``, checked against the SHA-256 in this
    worker's context (`daisy._daisy.read_payload` refuses a file that is
    not private or whose digest differs); exits with a log line if not."""
    from daisy._daisy import read_payload

    digest = Context.from_env().get("payload_sha256")
    if not digest:
        logging.getLogger("daisy").error(
            "daisy worker: the context names no payload_sha256 for %s, so the payload cannot "
            "be checked; not loading it (start workers from the daisy run that wrote it)",
            path,
        )
        raise SystemExit(2)
    try:
        return read_payload(path, digest)
    except OSError as e:
        logging.getLogger("daisy").error("daisy worker: payload refused, not loaded: %s", e)
        raise SystemExit(2) from None


def main(argv: list[str]) -> int:
    log_daisy_messages()
    from daisy._daisy import group_dies_with_parent

    # what this worker's blocks start dies with it when the driver dies
    group_dies_with_parent()
    if len(argv) == 2 and argv[0] == "--payload":
        payload = read_checked_payload(argv[1])
    else:
        payload = sys.stdin.buffer.read()
    run_payload(payload)
    return 0


if __name__ == "__main__":
    leave(main(sys.argv[1:]))
