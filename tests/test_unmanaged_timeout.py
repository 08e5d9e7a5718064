"""The task ``timeout`` holds for a worker daisy did not start (issue 26,
item 3): one started by the user's own ``sbatch``/``srun`` that connects
with ``daisy.Client()``. The server cannot kill it, so the client ends its
own attempt at the deadline, and the server hands out neither the retry
nor a conflicting neighbour before the attempt is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import daisy

HAND_STARTED = textwrap.dedent(
    """
    import json, sys, time
    import daisy

    beats, held = sys.argv[1], sys.argv[2]
    client = daisy.Client()
    with client.acquire_block() as block:
        with open(held, "w") as f:
            f.write(str(block.block_id[1]))
        while True:   # stuck: a hung filesystem, an endless loop
            with open(beats, "a") as f:
                f.write(f"{time.time()}\\n")
            time.sleep(0.05)
    """
)


def test_a_hand_started_worker_past_the_timeout_ends_before_the_block_runs_again(
    tmp_path: Path,
) -> None:
    """A hand-started worker takes a block and hangs in it. Past the
    task's timeout it ends itself, saying so; the block's retry and its
    conflicting neighbours start only after the stale attempt's last sign
    of life, so no two attempts that conflict ever overlap."""
    beats, held = tmp_path / "beats", tmp_path / "held"
    starts = tmp_path / "starts"
    hand: list[subprocess.Popen[str]] = []

    def on_listening(context: daisy.Context) -> None:
        hand.append(
            subprocess.Popen(
                [sys.executable, "-c", HAND_STARTED, str(beats), str(held)],
                env=dict(os.environ, DAISY_CONTEXT=context.to_env()),
                stderr=subprocess.PIPE,
                text=True,
            )
        )

    def local(block: daisy.Block) -> None:
        # the hand-started worker takes its block first
        end = time.monotonic() + 30
        while not held.exists() and time.monotonic() < end:
            time.sleep(0.02)
        with open(starts, "a") as f:
            f.write(json.dumps([block.block_id[1], time.time()]) + "\n")

    task = daisy.Task(
        "conflicting",
        total_roi=daisy.Roi((0,), (60,)),
        read_roi=daisy.Roi((-10,), (30,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=local,
        read_write_conflict=True,
        fit="shrink",
        timeout=2,
        max_retries=2,
        max_workers=1,
    )
    task.init_callback_fn = on_listening
    result: dict[str, object] = {}

    def target() -> None:
        result["states"] = daisy.Server().run_blockwise([task], progress=False)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(90)
    try:
        assert not thread.is_alive(), "the run did not end within 90 s"
        assert hand, "the hand-started worker was never started"
        code = hand[0].wait(30)
        err = hand[0].stderr.read() if hand[0].stderr else ""
    finally:
        for p in hand:
            if p.poll() is None:
                p.kill()
    states = result["states"]
    assert isinstance(states, dict)
    state = states["conflicting"]
    assert state.total_block_count >= 2 and state.completed_count == state.total_block_count, state
    stuck = int(held.read_text())
    last_beat = max(float(x) for x in beats.read_text().split())
    started = [json.loads(line) for line in starts.read_text().splitlines()]
    retry = [t for b, t in started if b == stuck]
    assert retry, f"block {stuck} was never retried: {started}"
    assert code != 0, "the stuck worker was not ended"
    assert "ends the attempt" in err, err
    # the retry (and so every conflicting neighbour after it) ran only once
    # the stale attempt had stopped
    assert last_beat < min(retry), (last_beat, retry)
