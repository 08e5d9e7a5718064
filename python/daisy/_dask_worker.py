"""The local handle of a worker that runs on a Dask cluster: ``python -m
daisy._dask_worker SCHEDULER_ADDRESS PAYLOAD_FILE``.

It submits one Dask task, with this worker's context (``DAISY_CONTEXT``)
and payload, and waits for it. The task runs the daisy worker loop as a
child process of the Dask worker (``python -m daisy._worker``), so the loop
can be stopped: when daisy stops this handle (a block timed out, the run
was interrupted), the server closes the worker's connection, and a loop
stuck in a block exits on that hang-up (``daisy_core::hang_up``) instead of
computing a block that is being redone elsewhere; the Dask worker stays
free for other work. The daisy server sees this handle as the worker: when
the loop ends (no more blocks) it exits cleanly; when the task fails (the
loop crashed, or its Dask worker died and could not be replaced) it exits
with an error, and the server replaces it like any dead worker. SIGTERM
cancels the task.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid


def _run_on_dask(context_json: str, payload: bytes) -> str:
    """The Dask task: one daisy worker loop, in a child process."""
    env = dict(os.environ, DAISY_CONTEXT=context_json)
    child = subprocess.run(
        [sys.executable, "-m", "daisy._worker"], input=payload, env=env, check=False
    )
    if child.returncode != 0:
        raise RuntimeError(f"the daisy worker loop exited with status {child.returncode}")
    return "done"


def main(argv: list[str]) -> int:
    from distributed import Client

    address, payload_file = argv
    context_json = os.environ["DAISY_CONTEXT"]
    from daisy._worker import read_checked_payload

    payload = read_checked_payload(payload_file)
    worker_id = json.loads(context_json).get("worker_id")
    # distributed leaves Client.__init__ unannotated
    with Client(address, timeout=60) as client:  # type: ignore[no-untyped-call]
        future = client.submit(
            _run_on_dask,
            context_json,
            payload,
            pure=False,
            key=f"daisy-worker-{worker_id}-{uuid.uuid4().hex[:8]}",
        )

        def cancel(signum: int, frame: object) -> None:
            future.cancel()
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, cancel)
        future.result()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
