"""The local handle of a worker that runs on a Dask cluster: ``python -m
daisy._dask_worker SCHEDULER_ADDRESS PAYLOAD_FILE``.

It submits one daisy worker loop as a Dask task, with this worker's
context (``DAISY_CONTEXT``) and payload, and waits for it. The daisy server
sees this process as the worker: when the loop ends (no more blocks) it
exits cleanly; when the Dask task fails (its Dask worker died and could
not be replaced, say) it exits with an error, and the server replaces it
like any dead worker. SIGTERM cancels the task.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid


def _run_on_dask(context_json: str, payload: bytes) -> str:
    """The Dask task: one daisy worker loop."""
    from daisy._worker import run_payload
    from daisy.context import Context

    os.environ["DAISY_CONTEXT"] = context_json  # for worker functions' daisy.Client()
    run_payload(payload, Context(**json.loads(context_json)))
    return "done"


def main(argv: list[str]) -> int:
    from distributed import Client

    address, payload_file = argv
    context_json = os.environ["DAISY_CONTEXT"]
    with open(payload_file, "rb") as f:
        payload = f.read()
    worker_id = json.loads(context_json).get("worker_id")
    with Client(address, timeout=60) as client:
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
