"""The ETA from the model (issue 54): every 5 % of a task's blocks the run
forecasts the rest from the blocks measured so far (this run's, and the
tracking store's, a forecast's sample among them) and records it in the
task's ``runs.jsonl`` line; the progress bar, the pace line and the
dashboard show it. Behaviour only: where the checkpoints are, and that the
model sees costly blocks a mean rate cannot; its accuracy is
`benchmarks/forecast_accuracy.py`'s."""

from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import make_task

import daisy
from daisy._daisy import read_last_report

#: blocks from this offset on are the costly half of the line
COSTLY_FROM = 200
COSTLY_SECONDS = 0.2


def costly_second_half(block: daisy.Block) -> None:
    """Cheap blocks first, costly ones later along the line (tissue at the
    far end of the volume)."""
    time.sleep(COSTLY_SECONDS if block.write_roi.offset[0] >= COSTLY_FROM else 0.005)


def last_line(store: Path) -> dict:
    text = read_last_report(str(store / "runs.jsonl"))
    assert text is not None
    return json.loads(text)


def test_checkpoints_every_twentieth_of_the_blocks_are_recorded_without_a_store() -> None:
    task = make_task("plain", ((0,), (400,)), ((0,), (10,)), ((0,), (10,)), max_workers=2)
    assert task.tracking_path is None
    assert daisy.run_blockwise([task], progress=False, summary=False)
    report = daisy.last_report()
    assert report is not None
    eta = report.tasks["plain"].eta
    # 40 blocks: one every 2, the last when the task is done (nothing left)
    assert [c.done for c in eta] == list(range(2, 41, 2))
    assert all(c.eta_seconds >= 0 for c in eta)
    assert eta[-1].eta_seconds == 0.0
    elapsed = [c.elapsed_seconds for c in eta]
    assert elapsed == sorted(elapsed)


def test_after_a_forecast_the_first_eta_sees_the_costly_blocks_still_to_come(tmp_path):
    store = tmp_path / "store"
    task = make_task(
        "line",
        ((0,), (400,)),
        ((0,), (10,)),
        ((0,), (10,)),
        process_function=costly_second_half,
        max_workers=2,
        tracking_path=store,
        resource_tracking=True,
    )
    fc = daisy.forecast(task, sample_blocks=8)
    costly_sampled = fc["line"].block_seconds_p95 >= COSTLY_SECONDS
    assert costly_sampled, fc.to_dict()
    assert daisy.run_blockwise([task], progress=False, summary=False)
    first = last_line(store)["eta"][0]
    # the run does the cheap first half first: a mean rate of its first
    # blocks would say well under a second; the model knows the costly
    # half measured by the sample (about 16 blocks of 0.2 s on 2 workers)
    costly_left = sum(
        1 for x in range(COSTLY_FROM, 400, 10) if x // 10 not in {2, 7, 12, 17, 22, 27, 32, 37}
    )
    assert first["eta_seconds"] >= 0.5 * costly_left * COSTLY_SECONDS / 2, first
    # the panel sets what it said against what was left
    report = task.report()
    assert report is not None and len(report.eta) >= 4
    assert all(c.left_seconds is not None for c in report.eta)
    assert "eta said / was at 25 %" in report.render()


def slower_second_half(block: daisy.Block) -> None:
    """As `costly_second_half`, slow enough that the run's 50 ms ticks
    land in its cheap half whatever the machine's load: 50 ms blocks, then
    0.3 s ones."""
    time.sleep(0.3 if block.write_roi.offset[0] >= COSTLY_FROM else 0.05)


class PaceLog:
    """A progress observer that keeps, for each tick, the task's blocks
    done in this run (skipped ones left out) and the ETA the core gave with
    it."""

    def __init__(self) -> None:
        self.done = 0
        self.seen: list[tuple[int, float | None]] = []

    def update(self, task_id: str, state, workers: int) -> None:  # type: ignore[no-untyped-def]
        self.done = state.completed_count - state.skipped_count

    def pace(self, task_id: str, blocks_per_second: float, eta_seconds: float | None) -> None:
        self.seen.append((self.done, eta_seconds))

    def close(self) -> None:
        pass


def test_the_progress_observers_get_the_models_eta_while_the_run_goes(tmp_path):
    store = tmp_path / "store"

    def line(**kwargs):  # type: ignore[no-untyped-def]
        return make_task(
            "paced",
            ((0,), (400,)),
            ((0,), (10,)),
            ((0,), (10,)),
            process_function=slower_second_half,
            max_workers=2,
            tracking_path=store,
            resource_tracking=True,
            **kwargs,
        )

    daisy.forecast(line(), sample_blocks=8)
    log = PaceLog()
    assert daisy.run_blockwise([line()], progress=[log], summary=False)
    # the sample took 4 cheap and 4 costly blocks; while the 16 cheap blocks
    # left run (0.4 s on 2 workers: several ticks), the bar, the pace line
    # and the dashboard are told of the 16 costly ones still to come (2.4 s
    # on 2 workers), where a rate of cheap blocks would say under 0.8 s
    early = [eta for done, eta in log.seen if 2 <= done <= 14 and eta is not None]
    assert early, log.seen
    assert max(early) >= 0.5 * 16 * 0.3 / 2, log.seen
