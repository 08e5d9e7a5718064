"""GPU figures per block (``Task(gpu_tracking=...)``): NVML loaded at run
time inside each worker, per-process memory and utilisation, NaN / 0 and
one notice where NVML is missing.

Most of these run anywhere: NVML is either absent (``DAISY_NVML_LIBRARY``
pointed at nothing) or a stand-in, ``tests/fake_nvml/fake_nvml.c``, built
here with the C compiler, which answers from files a block function
writes (its own pid, memory and utilisation samples). The last test needs
a real NVIDIA GPU with CuPy or PyTorch and is skipped elsewhere, saying so.
"""

from __future__ import annotations

import csv
import io
import math
import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import line_task, run_tasks
from fake_nvml.build import build_fake_nvml

import daisy
from daisy.cli import main as cli_main
from daisy.report.notebook import block_summary_html
from daisy.run_report import RUNS_FILE, read_runs
from daisy.units import format_bytes

GiB = 1 << 30
NOT_FOUND = "no GPU figures: NVML not found"
MODES = pytest.mark.parametrize("mp", [True, False], ids=["workers", "serial"])


@pytest.fixture(scope="session")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in NVML, compiled once per session."""
    try:
        return build_fake_nvml(tmp_path_factory.mktemp("fake_nvml"))
    except RuntimeError as e:
        pytest.fail(f"the GPU tracking tests: {e}")


@pytest.fixture
def nvml_state(fake_nvml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point daisy (and its workers, through the environment) at the
    stand-in NVML, answering from a fresh state directory."""
    state = tmp_path / "nvml_state"
    state.mkdir()
    monkeypatch.setenv("DAISY_NVML_LIBRARY", str(fake_nvml))
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return state


def gpu_block(b: daisy.Block) -> None:
    """Pretend to use the GPU: this process holds (block index + 1) GiB on
    device 0 for a third of a second, and NVML sampled it at 40 % and 80 %
    during the block; another process on the device is busy at 99 % with
    30 GiB."""
    state = Path(os.environ["FAKE_NVML_STATE"])
    i = b.block_id[1]
    pid = os.getpid()
    with open(state / "procs", "w") as f:
        f.write(f"0 {pid} {(i + 1) * GiB}\n0 1 {30 * GiB}\n")
    time.sleep(0.01)
    now = int(time.time() * 1e6)
    with open(state / "util", "a") as f:
        f.write(f"0 {pid} {now} 40\n0 {pid} {now + 1} 80\n0 1 {now + 2} 99\n")
    # held for a few of the sampler's periods (100 ms), then given back
    # before the block ends: the peak stays
    time.sleep(0.35)
    with open(state / "procs", "w") as f:
        f.write(f"0 {pid} {GiB // 2}\n")


def cpu_block(b: daisy.Block) -> None:
    time.sleep(0.001)


def test_gpu_tracking_is_checked_and_defaults_to_tasks_that_require_a_gpu():
    def task(**kw: Any) -> daisy.Task:
        return line_task("t", 2, process_function=cpu_block, **kw)

    assert not task().gpu_tracking
    assert not task(resource_tracking=True).gpu_tracking
    assert task(resource_tracking=True, requires={"gpu": 1}).gpu_tracking
    assert not task(requires={"gpu": 1}).gpu_tracking, "nothing measured: nothing to add to"
    assert not task(resource_tracking=True, requires={"gpu": 1}, gpu_tracking=False).gpu_tracking
    assert task(resource_tracking=True, gpu_tracking=True).gpu_tracking
    with pytest.raises(ValueError, match=r"gpu_tracking: .*resource_tracking=True"):
        task(gpu_tracking=True)
    with pytest.raises(TypeError, match="gpu_tracking: expected True, False or None"):
        task(resource_tracking=True, gpu_tracking="yes")


@MODES
def test_without_nvml_the_figures_stay_nan_and_zero_and_the_report_says_so_once(
    mp, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("DAISY_NVML_LIBRARY", str(tmp_path / "no" / "libnvidia-ml.so.1"))
    task = line_task(
        "no_nvml",
        12,
        process_function=cpu_block,
        max_workers=3,
        resource_tracking=True,
        gpu_tracking=True,
        tracking_path=tmp_path / "store",
    )
    assert run_tasks([task], mp)["no_nvml"].completed_count == 12
    report = task.report()
    assert report.notices == [NOT_FOUND], "once, though every worker found no NVML"
    for i in range(12):
        s = report.block((i,)).stats
        assert math.isnan(s.gpu_util_pct) and s.gpu_mem_bytes == 0, s
    assert not report.blocks.gpu_util and not report.blocks.gpu_mem
    assert report.blocks.wall.n == 12, "the other figures are there"
    panel = report.render()
    assert panel.count(NOT_FOUND) == 1, panel
    # the runs.jsonl line keeps it
    (line,) = read_runs(tmp_path / "store" / RUNS_FILE)
    assert line.notices == [NOT_FOUND]


@MODES
def test_a_block_reports_its_process_peak_memory_and_mean_utilisation(mp, nvml_state, tmp_path):
    task = line_task(
        "on_gpu",
        4,
        process_function=gpu_block,
        max_workers=1,
        resource_tracking=True,
        requires={"gpu": 1},  # gpu_tracking=None: on for a task that requires a gpu
        tracking_path=tmp_path / "store",
    )
    assert task.gpu_tracking
    assert run_tasks([task], mp)["on_gpu"].completed_count == 4
    report = task.report()
    assert report.notices == []
    for i in range(4):
        s = report.block((i,)).stats
        assert s.gpu_mem_bytes == (i + 1) * GiB, "its own peak, not the other process's"
        assert s.gpu_util_pct == pytest.approx(60.0), "the mean of its samples in the block"
    b = report.blocks
    assert b.gpu_util.n == 4 and b.gpu_util.mean == pytest.approx(60.0)
    assert b.gpu_mem.max == 4 * GiB and b.gpu_mem.min == GiB
    panel = report.render()
    assert "gpu 60.0 % ± 0.0 %" in panel, panel
    assert f"gpu memory peak {format_bytes(4 * GiB)}" in panel, panel
    assert "gpu utilisation" in block_summary_html(b)


def test_tasks_that_do_not_ask_never_load_nvml(nvml_state, tmp_path):
    plain = line_task(
        "plain",
        6,
        process_function=gpu_block,
        max_workers=2,
        resource_tracking=True,
        tracking_path=tmp_path / "store",
    )
    assert run_tasks([plain], True)["plain"].completed_count == 6
    assert not (nvml_state / "calls").exists(), "no NVML call for a task that did not ask"
    s = plain.report().block((0,)).stats
    assert math.isnan(s.gpu_util_pct) and s.gpu_mem_bytes == 0
    assert not plain.report().blocks.gpu_mem


def test_cuda_visible_devices_picks_the_device_watched(nvml_state, tmp_path, monkeypatch):
    (nvml_state / "devices").write_text("2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # the block uses device 0 only
    task = line_task(
        "other_gpu",
        2,
        process_function=gpu_block,
        max_workers=1,
        resource_tracking=True,
        gpu_tracking=True,
        tracking_path=tmp_path / "store",
    )
    assert run_tasks([task], True)["other_gpu"].completed_count == 2
    s = task.report().block((0,)).stats
    assert math.isnan(s.gpu_util_pct) and s.gpu_mem_bytes == 0, "device 0 is not watched"


def test_the_cli_and_the_html_report_show_the_gpu_figures(nvml_state, tmp_path, capsys):
    task = line_task(
        "cli_gpu",
        3,
        process_function=gpu_block,
        max_workers=1,
        resource_tracking=True,
        gpu_tracking=True,
        tracking_path=tmp_path / "store",
    )
    assert run_tasks([task], True)["cli_gpu"].completed_count == 3
    capsys.readouterr()
    assert cli_main(["report", str(tmp_path / "store"), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert float(rows[-1]["gpu_util_mean_pct"]) == pytest.approx(60.0)
    assert int(rows[-1]["gpu_mem_max_bytes"]) == 3 * GiB
    assert cli_main(["report", str(tmp_path / "store")]) == 0
    assert f"gpu memory peak {format_bytes(3 * GiB)}" in capsys.readouterr().out
    out = tmp_path / "report.html"
    assert cli_main(["report", str(tmp_path / "store"), "--html", str(out)]) == 0
    assert "block GPU utilisation (%)" in out.read_text()


def _real_gpu() -> str | None:
    """Why the on-GPU test cannot run here, or None when it can."""
    if not Path("/dev/nvidiactl").exists():
        return "no NVIDIA GPU on this machine (no /dev/nvidiactl)"
    try:
        import torch

        if not torch.cuda.is_available():
            return "PyTorch sees no CUDA device"
    except ImportError:
        try:
            import cupy  # noqa: F401
        except ImportError:
            return "neither PyTorch nor CuPy is installed (pip install cupy-cuda12x or torch)"
    return None


def gpu_matmul_or_sleep(b: daisy.Block) -> None:
    """Block 0: allocate 1 GiB on the GPU and multiply matrices for a
    second; block 1: sleep a second."""
    if b.block_id[1] == 1:
        try:  # a context on the GPU, then nothing for it to do
            import torch

            torch.zeros(1, device="cuda")
        except ImportError:
            import cupy as cp

            cp.zeros(1)
        time.sleep(1.5)
        return
    try:
        import torch

        hold = torch.empty(GiB // 4, dtype=torch.float32, device="cuda")
        x = torch.rand(4096, 4096, device="cuda")
        end = time.time() + 1.5
        while time.time() < end:
            x = (x @ x).clamp_(0, 1)
            torch.cuda.synchronize()
        del hold
    except ImportError:
        import cupy as cp

        hold = cp.empty(GiB // 4, dtype=cp.float32)
        x = cp.random.rand(4096, 4096, dtype=cp.float32)
        end = time.time() + 1.5
        while time.time() < end:
            x = cp.clip(x @ x, 0, 1)
            cp.cuda.Device().synchronize()
        del hold


#: why the on-GPU test cannot run here (None: it can), asked once
NO_REAL_GPU = _real_gpu()


@pytest.mark.skipif(NO_REAL_GPU is not None, reason=f"needs a real GPU: {NO_REAL_GPU}")
def test_on_a_real_gpu_a_busy_block_and_a_sleeping_block(tmp_path, capsys):
    task = line_task(
        "real_gpu",
        2,
        process_function=gpu_matmul_or_sleep,
        max_workers=1,
        resource_tracking=True,
        gpu_tracking=True,
        tracking_path=tmp_path / "store",
    )
    assert run_tasks([task], True, timeout=300)["real_gpu"].completed_count == 2
    report = task.report()
    busy, idle = report.block((0,)).stats, report.block((1,)).stats
    print(f"busy block: {busy}\nsleeping block: {idle}\nnotices: {report.notices}")
    with capsys.disabled():
        print(report.render())
    assert report.notices == []
    assert busy.gpu_mem_bytes >= GiB, busy
    assert busy.gpu_util_pct > 50, busy
    assert idle.gpu_util_pct < 5, idle
