"""A context carries the driver's log directory as ``logdir``, as daisy
1.2.2's and 2.0.0's do (recorded: a ``Context(hostname=..., ...)`` built
while a log base directory is set, and a worker's context, both hold
``logdir``); volara's workers find their task's state through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import line_task

import daisy


def test_a_context_built_while_a_basedir_is_set_carries_it(tmp_path):
    daisy.logging.set_log_basedir(tmp_path / "logs")
    ctx = daisy.Context(hostname="h", port=1, task_id="t", worker_id=0)
    assert ctx["logdir"] == str((tmp_path / "logs").absolute())
    env = ctx.to_env()
    out = subprocess.run(
        [sys.executable, "-c", "import daisy; print(daisy.Context.from_env()['logdir'])"],
        env=dict(os.environ, DAISY_CONTEXT=env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == str((tmp_path / "logs").absolute()), out.stderr
    # an explicit value wins; an empty context stays empty; no basedir, no key
    assert daisy.Context(logdir="/elsewhere")["logdir"] == "/elsewhere"
    assert list(daisy.Context().keys()) == []
    daisy.logging.set_log_basedir(None)
    assert "logdir" not in daisy.Context(hostname="h", port=1).keys()


HERE = Path(__file__).parent

SCRIPT = """
import json, sys, daisy
client = daisy.Client()
with open(sys.argv[1], "w") as f:
    json.dump({"logdir": client.context["logdir"]}, f)
with client.acquire_block() as block:
    pass
"""


def test_a_worker_and_a_program_it_starts_see_the_drivers_logdir(tmp_path):
    logs = tmp_path / "logs"
    daisy.logging.set_log_basedir(logs)
    seen = tmp_path / "seen"
    seen.mkdir()

    def worker():
        own = daisy.Client().context["logdir"]
        (seen / "worker.json").write_text(json.dumps({"logdir": own}))
        subprocess.run(
            [sys.executable, "-c", SCRIPT, str(seen / "program.json")], check=True, timeout=120
        )

    task = line_task("t", 1, process_function=worker, max_workers=1)
    assert daisy.run_blockwise([task], progress=False, summary=False)
    for name in ("worker.json", "program.json"):
        assert json.loads((seen / name).read_text())["logdir"] == str(logs.absolute()), name


def test_a_client_whose_run_has_ended_gets_no_blocks_and_does_not_raise(caplog):
    """daisy 2.0.0: a straggler (say a queued cluster job) that starts after
    the run drained builds its Client without an error; ``connected`` is
    False and the worker loop ends at once."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    ctx = daisy.Context(hostname="127.0.0.1", port=port, task_id="t", token="x", worker_id=0)
    client = daisy.Client(ctx)
    assert client.connected is False
    with client.acquire_block() as block:
        assert block is None
    client.process_blocks(lambda b: None)  # returns at once
    client.close()
    assert "the run has ended" in caplog.text
    # a context that names no server is still a configuration error
    with pytest.raises(ValueError, match="context"):
        daisy.Client(daisy.Context(task_id="t"))


def test_a_connected_client_says_so(tmp_path):
    seen = tmp_path / "connected"

    def worker():
        client = daisy.Client()
        seen.write_text(str(client.connected))
        with client.acquire_block():
            pass

    task = line_task("t", 1, process_function=worker)
    assert daisy.run_blockwise([task], progress=False, summary=False)
    assert seen.read_text() == "True"
