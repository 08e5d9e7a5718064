"""Entry point of daisy's worker processes: ``python -m daisy._worker``.

The server starts this with ``DAISY_CONTEXT`` set and, on stdin, the
driver's ``sys.path`` (pickled first, so functions defined in the driver's
own modules can be imported here, as multiprocessing's spawn does) followed
by the task's cloudpickled ``(process_function, post_check)``. A block
function's block fails when its post-check (the second function of a
``check_function=(pre, post)`` pair) returns False. A block function is called for
every block this worker acquires; a worker function (no arguments) is
called once and runs its own loop with `daisy.Client`. stdout and stderr
are already the worker's log files (the server opened them).
"""

from __future__ import annotations

import io
import logging
import pickle
import sys

import cloudpickle

from daisy.block import BlockStatus
from daisy.client import Client
from daisy.task import _count_required_args


def main() -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    payload = io.BytesIO(sys.stdin.buffer.read())
    for entry in reversed(pickle.load(payload)):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    function, post_check = cloudpickle.load(payload)
    if _count_required_args(function) == 0:
        function()
        return 0
    client = Client()
    try:
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                function(block)
                if post_check is not None and not post_check(block):
                    block.status = BlockStatus.FAILED
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
