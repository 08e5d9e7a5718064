"""daisy in a real Jupyter kernel: a notebook is built with nbformat and
executed by nbclient on an IPython kernel of the Python running the tests.

What a notebook user sees: the run cell shows a notebook progress bar (an
ipywidgets widget, as ``tqdm.auto`` draws one when ipywidgets is
installed), ``daisy.last_report()`` and ``task.report()`` show the
Resource Utilization panel as an HTML table, and no cell writes anything
to stderr or raises. The executed notebook is kept as
``<tmp_path>/executed.ipynb``.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook test needs nbformat")
nbclient = pytest.importorskip("nbclient", reason="the notebook test needs nbclient")
pytest.importorskip("ipykernel", reason="the notebook test needs ipykernel")

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
KERNEL = "daisy-test-python"
N_BLOCKS = 10


def kernel_manager(tmp_path: Path) -> Any:
    """A kernel manager whose kernel is ``sys.executable -m ipykernel_launcher``:
    a kernelspec written to a private directory, so no kernel installed
    elsewhere (another Python, another daisy) can be picked up."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = tmp_path / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "daisy test kernel",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    ksm = KernelSpecManager(kernel_dirs=[str(spec_dir.parent)])
    ksm.ensure_native_kernel = False
    return KernelManager(kernel_name=KERNEL, kernel_spec_manager=ksm)


def notebook(store: Path) -> Any:
    v4 = nbformat.v4
    run = f"""\
import daisy

task = daisy.Task(
    "nb",
    total_roi=daisy.Roi((0,), ({10 * N_BLOCKS},)),
    read_roi=daisy.Roi((0,), (10,)),
    write_roi=daisy.Roi((0,), (10,)),
    process_function=lambda b: None,
    max_workers=1,
    tracking_path={str(store)!r},
)
ok = daisy.run_blockwise([task])
assert ok, ok
"""
    nb = v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "daisy test kernel"}
    nb.cells = [
        v4.new_code_cell(run),
        v4.new_code_cell("daisy.last_report()"),
        v4.new_code_cell("task.report()"),
    ]
    return nb


def execute(nb: Any, tmp_path: Path) -> Any:
    km = kernel_manager(tmp_path)
    client = nbclient.NotebookClient(
        nb,
        km=km,
        timeout=300,
        startup_timeout=120,
        allow_errors=True,  # every cell runs; the assertions below say what went wrong
        store_widget_state=True,
        resources={"metadata": {"path": str(tmp_path)}},  # the kernel's cwd
    )
    try:
        client.execute()
    finally:
        nbformat.write(nb, tmp_path / "executed.ipynb")
        # nbclient leaves a kernel it was given running: a later test that
        # counts this process's children would see it
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    return nb


def _short(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def dump(nb: Any) -> str:
    """Every cell's outputs, one line each: type, stream name or mime types,
    and the start of the text."""
    lines = []
    for i, cell in enumerate(nb.cells, 1):
        lines.append(f"cell {i}: {len(cell.get('outputs', []))} output(s)")
        for out in cell.get("outputs", []):
            kind = out["output_type"]
            if kind == "stream":
                lines.append(f"  stream/{out['name']}: {_short(out['text'])!r}")
            elif kind == "error":
                lines.append(f"  error: {out['ename']}: {_short(out['evalue'])}")
            else:
                data = out.get("data", {})
                plain = _short(str(data.get("text/plain", "")), 80)
                lines.append(f"  {kind}: {sorted(data)} text/plain={plain!r}")
    return "\n".join(lines)


def htmls(cell: Any) -> list[str]:
    return [
        str(out["data"]["text/html"])
        for out in cell.get("outputs", [])
        if "text/html" in out.get("data", {})
    ]


def progress_models(nb: Any) -> list[dict[str, Any]]:
    """The states of the progress bar widgets the notebook keeps (nbclient
    stores the widget state in the notebook's metadata)."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    return [
        m.get("state", {})
        for m in state.values()
        if m.get("model_name") in ("FloatProgressModel", "IntProgressModel")
    ]


def has_progress_bar(cell: Any) -> str | None:
    """How the cell shows progress: a widget, an HTML ``<progress>``, or a
    tqdm-like text bar on stdout; None when it does not."""
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if WIDGET_VIEW in data:
            return "widget"
        if "<progress" in str(data.get("text/html", "")):
            return "html"
        if out["output_type"] == "stream" and out["name"] == "stdout":
            if re.search(r"\d+%\|", out["text"]):
                return "text"
    return None


def test_a_notebook_shows_a_progress_widget_and_html_reports_without_stderr(tmp_path):
    nb = execute(notebook(tmp_path / "store"), tmp_path)
    context = f"\n(executed notebook: {tmp_path / 'executed.ipynb'})\n{dump(nb)}"
    run_cell, last_report_cell, task_report_cell = nb.cells
    problems = []

    errors = [
        f"cell {i}: {o['ename']}: {_short(o['evalue'])}"
        for i, c in enumerate(nb.cells, 1)
        for o in c.get("outputs", [])
        if o["output_type"] == "error"
    ]
    if errors:
        problems.append(f"cells raised: {errors}")

    stderr = [
        f"cell {i}: {_short(o['text'])!r}"
        for i, c in enumerate(nb.cells, 1)
        for o in c.get("outputs", [])
        if o["output_type"] == "stream" and o["name"] == "stderr"
    ]
    if stderr:
        problems.append(f"stderr output: {stderr}")

    shown = has_progress_bar(run_cell)
    if shown not in (None, "widget") and importlib.util.find_spec("ipywidgets") is not None:
        # with ipywidgets (the test extra has it) tqdm.auto draws a widget
        problems.append(f"the run cell shows a {shown} progress bar, not a widget")
    if shown is None:
        problems.append(
            f"the run cell shows no progress bar (no {WIDGET_VIEW} output, no HTML "
            "<progress>, no text bar on stdout)"
        )
    elif shown == "widget":
        # the bar ends full: every block done (when the widget's state was kept)
        bars = progress_models(nb)
        if not bars:
            problems.append("the notebook kept no progress widget state")
        elif not any(b.get("value") == b.get("max") == N_BLOCKS for b in bars):
            problems.append(f"no progress widget ends at {N_BLOCKS}/{N_BLOCKS}: {bars}")
        # issue 41: what a viewer without the widget state shows (GitHub, nbviewer,
        # a saved notebook reopened) is the output's text fallback, which read
        # "0% 0/27": it ends as the run ended
        fallbacks = [
            str(o["data"].get("text/plain", ""))
            for o in run_cell.get("outputs", [])
            if WIDGET_VIEW in o.get("data", {})
        ]
        if not fallbacks or not all(f"{N_BLOCKS}/{N_BLOCKS}" in f for f in fallbacks):
            problems.append(f"the bar's saved text fallback is not the final count: {fallbacks}")

    for name, cell, panel_title in (
        ("daisy.last_report()", last_report_cell, True),
        ("task.report()", task_report_cell, False),
    ):
        pages = htmls(cell)
        if not pages:
            problems.append(f"{name} has no text/html output")
            continue
        page = pages[-1]
        text = re.sub(r"<[^>]+>", " ", page)
        missing = [w for w in ("<table", "</table>") if w not in page.lower()]
        missing += [w for w in ("nb", "blocks", "workers") if w not in text]
        if panel_title and "Resource Utilization" not in text:
            missing.append("Resource Utilization")
        if missing:
            problems.append(f"{name}'s HTML lacks {missing}: {_short(page, 300)!r}")

    assert not problems, "\n".join(problems) + context


def failing_notebook(store: Path) -> Any:
    """A notebook whose block function, defined in a cell, fails one block
    for good: the failure's traceback and its progress bar, as the user
    sees them."""
    v4 = nbformat.v4
    define = """\
def proc(block):
    if block.block_id[1] == 1:
        raise ValueError("block one is bad")
"""
    run = f"""\
import daisy

task = daisy.Task(
    "nbfail",
    total_roi=daisy.Roi((0,), ({10 * N_BLOCKS},)),
    read_roi=daisy.Roi((0,), (10,)),
    write_roi=daisy.Roi((0,), (10,)),
    process_function=proc,
    max_workers=1,
    max_retries=0,
    tracking_path={str(store)!r},
)
ok = daisy.run_blockwise([task], summary=False)
assert not ok, ok
print(daisy.last_report()["nbfail"].failure_causes.first_traceback)
"""
    nb = v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "daisy test kernel"}
    nb.cells = [v4.new_code_cell(define), v4.new_code_cell(run)]
    return nb


def test_a_failure_in_a_function_defined_in_a_cell_shows_its_line_and_a_failed_bar(tmp_path):
    nb = execute(failing_notebook(tmp_path / "store"), tmp_path)
    context = f"\n(executed notebook: {tmp_path / 'executed.ipynb'})\n{dump(nb)}"
    _, run_cell = nb.cells
    printed = "".join(
        o["text"]
        for o in run_cell.get("outputs", [])
        if o["output_type"] == "stream" and o["name"] == "stdout"
    )
    # the worker has no file for the cell: the line comes with the function
    assert 'raise ValueError("block one is bad")' in printed, printed + context
    if has_progress_bar(run_cell) == "widget":
        bars = progress_models(nb)
        assert bars, context
        # a task with a failed block does not end as a green, full bar
        assert all(b.get("bar_style") == "danger" for b in bars), bars


def test_a_servers_last_report_in_a_notebook_shows_the_failed_blocks_and_first_traceback(
    tmp_path,
):
    """Issue 41: in a notebook, `Server().run_blockwise` prints no summary (as
    2.0.0's), and `server.last_report`'s HTML said "2× RuntimeError: bad
    tile" with no block, ROI or traceback. It shows the failed blocks with
    their ROIs, the first failure's block and its traceback."""
    v4 = nbformat.v4
    run = """\
import daisy

def tile(block):
    if block.block_id[1] in (1, 2):
        raise RuntimeError("bad tile")

task = daisy.Task(
    "tiles", daisy.Roi((0,), (60,)), daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)),
    process_function=tile, max_workers=1, max_retries=0,
)
server = daisy.Server()
states = server.run_blockwise([task])
"""
    nb = v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "daisy test kernel"}
    nb.cells = [v4.new_code_cell(run), v4.new_code_cell("server.last_report")]
    nb = execute(nb, tmp_path)
    context = f"\n{dump(nb)}"
    # the run cell says that blocks failed and where to look (it showed the
    # states only: "Failed: 2")
    said = "".join(
        o.get("text", "") for o in nb.cells[0].get("outputs", []) if o["output_type"] == "stream"
    )
    assert "tiles: 2 blocks failed" in said and "server.last_report" in said, context
    pages = htmls(nb.cells[1])
    assert pages, context
    text = html.unescape(re.sub(r"<[^>]+>", " ", pages[-1]))
    assert "2× RuntimeError: bad tile" in " ".join(text.split()), text
    for block in ("block 1 [10:20]", "block 2 [20:30]"):
        assert block in text, text
    assert "First failure (block 1" in text, text
    assert 'raise RuntimeError("bad tile")' in text and "Traceback" in text, text
