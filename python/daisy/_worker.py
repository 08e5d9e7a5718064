"""Entry point of daisy's worker processes: ``python -m daisy._worker
[--payload FILE]``.

The server starts this with ``DAISY_CONTEXT`` set. The payload is the
driver's ``sys.path`` (pickled first, so functions defined in the driver's
own modules can be imported here, as multiprocessing's spawn does)
followed by the task's cloudpickled ``(process_function, post_check)``; it
comes on stdin, or from ``FILE`` (a cluster job has no stdin of ours). A
block function is called for every block this worker acquires, and the
block fails when its post-check (the second function of a
``check_function=(pre, post)`` pair) returns False; a worker function (no
arguments) is called once and runs its own loop with `daisy.Client`.
stdout and stderr are already the worker's log files.
"""

from __future__ import annotations

import io
import logging
import pickle
import sys

import cloudpickle

from daisy.client import Client
from daisy.context import Context
from daisy.task import _count_required_args


def run_payload(payload: bytes, context: Context | None = None) -> None:
    """Run one worker: unpack the payload and process blocks until the
    task has none left for it."""
    stream = io.BytesIO(payload)
    for entry in reversed(pickle.load(stream)):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    function, post_check = cloudpickle.load(stream)
    if _count_required_args(function) == 0:
        function()
        return
    client = Client(context)
    try:
        client.process_blocks(function, post_check)
    finally:
        client.close()


def main(argv: list[str]) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    if len(argv) == 2 and argv[0] == "--payload":
        with open(argv[1], "rb") as f:
            payload = f.read()
    else:
        payload = sys.stdin.buffer.read()
    run_payload(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
