"""Reading a long run history (issue 56, item 7): ``daisy status`` on a
store whose ``runs.jsonl`` has grown to 200 MB (a task rerun for years, or
a history never reset). It read every line, 60-77 s per command; the last
run is now read from the end of the file. The target is under 1 s.
"""

from __future__ import annotations

from pathlib import Path

import daisy

HISTORY_BYTES = 200 << 20


def _store_with_long_history(base: Path) -> Path:
    store = base / "store"
    task = daisy.Task(
        "long",
        daisy.Roi((0,), (4,)),
        daisy.Roi((0,), (1,)),
        daisy.Roi((0,), (1,)),
        process_function=lambda b: None,
        tracking_path=store,
    )
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    runs = store / "runs.jsonl"
    line = runs.read_bytes().splitlines()[-1] + b"\n"
    with open(runs, "wb") as f:
        f.write(line * (HISTORY_BYTES // len(line)))
    return store


def test_status_of_a_200_mb_history(benchmark, tmp_path):
    if not hasattr(daisy, "_daisy") or not hasattr(daisy._daisy, "read_last_report"):
        import pytest

        pytest.skip("this daisy has no history read from the end")
    from daisy.cli import status_rows

    store = _store_with_long_history(tmp_path)
    assert (store / "runs.jsonl").stat().st_size > HISTORY_BYTES * 0.9
    rows = benchmark.pedantic(status_rows, args=(store,), rounds=3, iterations=1)
    assert rows[0]["last_run"] == "completed", rows
