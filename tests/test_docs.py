"""The documentation site (``make docs``): it builds with no warning, its
API reference names every public name of ``daisy`` and documents each of
`Task`'s parameters once, its tutorial was executed (the outputs are on the
page), its migration page (before/after code for daisy 1.2.2 and 2.0.0
users) is linked from the index and its code runs, the clusters page's Dask
example runs, and it opens in headless Chromium with the network off,
without a console error or a missing image, with nothing clipped at 1280
px, and its search finds pages.

The site is built once for this module into a temporary directory with
the same command ``make docs`` runs (warnings as errors)."""

from __future__ import annotations

import hashlib
import html
import inspect
import json
import re
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

import daisy

DOCS = Path(__file__).resolve().parent.parent / "docs"

pytestmark = pytest.mark.skipif(
    not (DOCS / "conf.py").is_file(), reason="no source checkout beside the tests"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site's directory."""
    out = tmp_path_factory.mktemp("docs") / "html"
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-q", DOCS, out],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return out


def page_text(path: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


def test_every_public_name_is_in_the_api_reference(site: Path) -> None:
    from sphinx.util.inventory import InventoryFile

    with open(site / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    documented = {name for entries in inventory.values() for name in entries}
    missing = [f"daisy.{name}" for name in daisy.__all__ if f"daisy.{name}" not in documented]
    assert not missing, f"public names missing from the API reference: {missing}"
    # and as what they are: modules as modules, classes as classes
    for name in daisy.__all__:
        value = getattr(daisy, name)
        if isinstance(value, types.ModuleType):
            assert f"daisy.{name}" in inventory["py:module"], name
        elif isinstance(value, type) and not issubclass(value, BaseException):
            assert f"daisy.{name}" in inventory["py:class"], name
    # the report classes the spec names, with their members
    for member in ("daisy.TaskReport.render", "daisy.Task.report", "daisy.Stat"):
        assert member in documented, member


def test_the_tutorial_was_executed_and_its_outputs_are_on_the_page(site: Path) -> None:
    text = page_text(site / "tutorial.html")
    for output in (
        "blocks on a grid of",  # tiling
        "blocks done",  # the interrupted run's states
        "Skipped: ",  # the resumed run skipped what was done
        "largest difference",  # the pipeline's output checked
        "Failed Blocks",  # a failure explained
        "Resource Utilization",  # the panel
        "report.html",  # the HTML report written
    ):
        assert output in text, f"the tutorial's output lacks {output!r}"
    # the resumed run skipped at least the blocks the interrupted run did
    skipped = [int(n) for n in re.findall(r"Skipped: (\d+)", text)]
    assert skipped and max(skipped) >= 6, skipped
    diff = float(re.search(r"largest difference: ([0-9.e+-]+)", text).group(1))  # type: ignore[union-attr]
    assert diff < 1e-5, "the blocks add up to the whole volume's filter"
    assert "Traceback" in text, "the failed block's traceback is shown"
    assert (site / "_images").is_dir() and any((site / "_images").iterdir())


@pytest.fixture
def served(site: Path):
    """The site served on loopback, as a docs host serves it (its search
    fetches page sources, which a browser refuses from file://)."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_site_opens_offline_and_its_search_finds_pages(served: str) -> None:
    from browser import chrome

    driver = chrome(local=True)  # no host but loopback resolves: nothing from the network
    try:
        for page in ("index.html", "tutorial.html", "api.html", "clusters.html"):
            driver.get(f"{served}/{page}")
            broken = driver.execute_script(
                "return [...document.images].filter(i => !i.complete || !i.naturalWidth)"
                ".map(i => i.src)"
            )
            assert not broken, f"{page}: images that did not load: {broken}"
        driver.get(f"{served}/search.html?q=tracking+store")
        found: list[str] = []
        deadline = time.time() + 60
        while time.time() < deadline and not found:
            found = driver.execute_script(
                "return [...document.querySelectorAll('#search-results li a')]"
                ".map(a => a.textContent)"
            )
            time.sleep(0.2)
        assert found, "the search found nothing for 'tracking store'"
        assert any("Block tracking" in f for f in found), found  # the store's reference page
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        driver.quit()


def enclosing_dl(page: str, dt_id: str) -> str:
    """The HTML of the ``<dl>`` whose ``<dt>`` has id ``dt_id`` (an
    autodoc entry: its signature, its docstring and its members)."""
    starts: list[int] = []
    target = f'id="{dt_id}"'
    depth = None
    for m in re.finditer(r"<(/?)dl\b[^>]*>|<dt\b[^>]*>", page):
        tag = m.group(0)
        if tag.startswith("<dt"):
            if depth is None and target in tag:
                depth = len(starts)
        elif m.group(1):  # </dl>
            start = starts.pop()
            if depth is not None and len(starts) == depth - 1:
                return page[start : m.end()]
        else:
            starts.append(m.start())
    raise AssertionError(f"no <dt id={dt_id!r}> on the page")


def test_each_task_parameter_is_documented_once(site: Path) -> None:
    """Every parameter of `Task` is in the one parameter list of its entry:
    not once under the class and again under a separate ``__init__``."""
    page = (site / "api.html").read_text(encoding="utf-8")
    entry = enclosing_dl(page, "daisy.Task")
    params = [p for p in inspect.signature(daisy.Task.__init__).parameters if p != "self"]
    assert {"read_write_conflict", "max_retries"} <= set(params)
    counts = {p: entry.count(f"<strong>{p}</strong>") for p in params}
    wrong = {p: n for p, n in counts.items() if n != 1}
    assert not wrong, f"Task's parameters documented other than once (name: times): {wrong}"


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """``(caption, code)`` of every Python block of a MyST page, in order:
    ```python blocks (no caption) and ```{code-block} python ones."""
    found = re.findall(
        r"^```(?:python|\{code-block\} python)\n((?::\w+:[^\n]*\n)*)\n?(.*?)^```",
        markdown,
        re.S | re.M,
    )
    out = []
    for options, code in found:
        caption = re.search(r"^:caption: (.*)$", options, re.M)
        out.append((caption.group(1) if caption else "", code))
    return out


def test_the_migration_page_follows_the_tutorial_with_before_and_after_code(site: Path) -> None:
    page = site / "migration.html"
    assert page.is_file(), "docs/migration.md is not in the site"
    index = (site / "index.html").read_text(encoding="utf-8")
    linked = list(dict.fromkeys(re.findall(r'href="([\w-]+\.html)(?:#[^"]*)?"', index)))
    assert "migration.html" in linked, "the index does not link the migration page"
    assert linked[linked.index("tutorial.html") + 1] == "migration.html", linked
    source = page.read_text(encoding="utf-8")
    captions = re.findall(
        r'<div class="code-block-caption"><span class="caption-text">(.*?)</span>.*?</div>\s*'
        r'<div class="highlight-python',
        source,
        re.S,
    )
    before = [c for c in captions if c.startswith("Before")]
    after = [c for c in captions if c.startswith("After")]
    assert len(before) >= 4 and len(after) >= 4, captions
    text = page_text(page)
    for topic in (
        "cloudpickle",  # workers are fresh interpreters
        "multiprocessing.Array",
        "max_retries",  # a raising block fails that block
        "return_states=True",  # what run_blockwise returns
        "num_workers",
        "upstream_tasks",
        "check_function",
        "set_tracking_basedir",
        "DAISY_CONTEXT",  # tokens for workers started by hand
        "daisy_logs",  # where the logs go
    ):
        assert topic in text, f"the migration page does not mention {topic!r}"


def test_the_migration_pages_code_runs(tmp_path: Path) -> None:
    """The Python blocks of docs/migration.md, in order, in an empty
    directory: the "After" blocks and the shared ones run without an error;
    a "Before" block shows code written for daisy 1.x or 2.0.0, which may
    fail here as the page says: it is only compiled; a block captioned with
    a file name is that file."""
    blocks = code_blocks((DOCS / "migration.md").read_text(encoding="utf-8"))
    assert sum(c.startswith("After") for c, _ in blocks) >= 4, blocks
    for caption, code in blocks:
        if caption.endswith(".py"):
            (tmp_path / caption).write_text(code)
    runnable = [(c, code) for c, code in blocks if not c.endswith(".py")]
    (tmp_path / "blocks.json").write_text(json.dumps(runnable))
    (tmp_path / "run_blocks.py").write_text(
        textwrap.dedent(
            """
            import json

            for i, (caption, code) in enumerate(json.load(open("blocks.json"))):
                compiled = compile(code, f"<block {i}: {caption}>", "exec")
                if not caption.startswith("Before"):
                    exec(compiled, globals())
            print("MIGRATION OK")
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "run_blocks.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and "MIGRATION OK" in done.stdout, (
        done.stdout[-3000:] + done.stderr[-3000:]
    )


def dask_example() -> str:
    """The complete script of the clusters page's Dask section."""
    text = (DOCS / "clusters.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Dask") :]
    found = [code for _, code in code_blocks(section) if "DaskSpawner(" in code]
    assert found, "the Dask section of docs/clusters.md has no example with DaskSpawner"
    return found[0]


def test_the_clusters_page_has_a_dask_example(site: Path) -> None:
    page = (site / "clusters.html").read_text(encoding="utf-8")
    section = re.search(r'<section id="dask">(.*?)</section>', page, re.S)
    assert section, "the clusters page has no Dask section"
    codes = [
        html.unescape(re.sub(r"<[^>]+>", "", pre))
        for pre in re.findall(r"<pre>(.*?)</pre>", section.group(1), re.S)
    ]
    complete = [
        c
        for c in codes
        if "import daisy" in c and "DaskSpawner(" in c and "run_blockwise(" in c and "Client(" in c
    ]
    assert complete, f"no complete Dask example on the clusters page: {codes}"
    text = html.unescape(re.sub(r"<[^>]+>", "", section.group(1)))
    assert "Where the logs go" in text and "daisy_logs" in text, "where do Dask workers log?"


def test_the_dask_example_runs_and_logs_where_the_page_says(tmp_path: Path) -> None:
    """The clusters page's Dask script, as written, on a LocalCluster: its
    blocks' output is in the Dask workers' output (here the script's own),
    not in daisy_logs."""
    pytest.importorskip("distributed")
    (tmp_path / "dask_example.py").write_text(dask_example())
    done = subprocess.run(
        [sys.executable, "dask_example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert "on a Dask worker" in done.stdout + done.stderr
    logs = list((tmp_path / "daisy_logs").rglob("worker_*"))
    assert logs, "the local handles' log files are missing"
    assert not any("on a Dask worker" in p.read_text() for p in logs)


# Per element of the loaded page that clips its content at the window's
# width: code blocks and tables with a horizontal scrollbar, a table wider
# than its column, and the page itself scrolling sideways; and source code
# that is wrapped (it must fit the column; only output may wrap).
_CLIPPED_JS = """
const out = [];
const show = (e) => JSON.stringify((e.textContent || "").trim().slice(0, 60));
for (const e of document.querySelectorAll("pre, div.highlight")) {
  if (e.scrollWidth > e.clientWidth + 1) {
    const tag = e.tagName.toLowerCase();
    out.push(`${tag} scrolls: ${e.scrollWidth}px in ${e.clientWidth}px ${show(e)}`);
  }
}
for (const t of document.querySelectorAll("table")) {
  const room = t.parentElement.clientWidth;
  if (t.scrollWidth > t.clientWidth + 1 || t.offsetWidth > room + 1) {
    out.push(`table of ${t.offsetWidth}px in a column of ${room}px ${show(t)}`);
  }
}
const selector = ["python", "ipython3", "bash"].map((l) => `div.highlight-${l} pre`).join(", ");
for (const e of document.querySelectorAll(selector)) {
  if (getComputedStyle(e).whiteSpace !== "pre") out.push(`source code wrapped: ${show(e)}`);
}
const d = document.documentElement;
if (d.scrollWidth > d.clientWidth + 1) {
  out.push(`the page scrolls sideways: ${d.scrollWidth}px in ${d.clientWidth}px`);
}
return out;
"""


def test_no_page_clips_code_or_a_table_at_1280_px(site: Path, served: str) -> None:
    """Every page of the site in a 1280 x 900 window: no code block or
    table has a horizontal scrollbar or sticks out of its column, and no
    page scrolls sideways. Source code fits the column as it is; output
    wider than any column (a 160-character terminal panel) wraps."""
    from browser import chrome

    driver = chrome(local=True)
    clipped: dict[str, list[str]] = {}
    try:
        driver.set_window_size(1280, 900)
        pages = sorted(p.name for p in site.glob("*.html"))
        assert {"index.html", "tutorial.html", "api.html"} <= set(pages), pages
        for page in pages:
            driver.get(f"{served}/{page}")
            assert driver.execute_script("return window.innerWidth") == 1280
            found = driver.execute_script(_CLIPPED_JS)
            if found:
                clipped[page] = found
    finally:
        driver.quit()
    assert not clipped, "clipped at 1280 px:\n" + "\n".join(
        f"{page}: {what}" for page, found in clipped.items() for what in found
    )


#: what docs/make_screenshots.py says of each picture it made: the page
#: that shows it, the task ids the picture shows, the image's SHA-256
SCREENSHOTS = DOCS / "screenshots.json"


def tutorial_code() -> str:
    """The code of the tutorial's cells, one after the other."""
    page = (DOCS / "tutorial.md").read_text(encoding="utf-8")
    return "\n".join(re.findall(r"^```\{code-cell\} python\n(.*?)^```", page, re.S | re.M))


def page_images(markdown: str) -> list[tuple[str, str]]:
    """``(alt text, path)`` of each image of a MyST page: ``![alt](path)``
    and the ``{image}`` / ``{figure}`` directives (no alt text)."""
    found = re.findall(r"!\[([^\]]*)\]\(([^)\s]+)\)", markdown)
    found += [("", p) for p in re.findall(r"^```\{(?:image|figure)\} (\S+)", markdown, re.M)]
    return [(alt, path) for alt, path in found if "://" not in path]


def test_the_tutorials_pictures_exist_and_were_made_from_its_code() -> None:
    """Every image a page shows exists; and each picture shown as the
    tutorial's (on the tutorial's page, or said to be the tutorial's) was
    made by docs/make_screenshots.py from the tutorial's code: the html
    report's picture showed tasks "a" and "b" of a test's run, the
    dashboard's "smooth" and "label", while the tutorial runs "smooth" and
    "threshold". The script names the task ids each picture shows in
    docs/screenshots.json, with the image's hash (a picture replaced by
    hand is not described there any more); the tutorial's code must define
    each of those tasks."""
    missing = []
    tutorials: list[str] = []
    for page in sorted(DOCS.glob("*.md")):
        for alt, path in page_images(page.read_text(encoding="utf-8")):
            if not (page.parent / path).is_file():
                missing.append(f"{page.name}: {path}")
            elif page.name == "tutorial.md" or "tutorial" in alt.lower():
                tutorials.append(path)
    assert not missing, f"images that do not exist: {missing}"
    assert tutorials, "the tutorial shows no picture"
    described = json.loads(SCREENSHOTS.read_text(encoding="utf-8")) if SCREENSHOTS.is_file() else {}
    defined = set(re.findall(r'daisy\.Task\(\s*"([^"]+)"', tutorial_code()))
    assert {"smooth", "threshold"} <= defined, defined
    wrong = []
    for path in tutorials:
        about = described.get(path)
        if about is None:
            wrong.append(
                f"{path}: not made by docs/make_screenshots.py (not in {SCREENSHOTS.name})"
            )
            continue
        image = hashlib.sha256((DOCS / path).read_bytes()).hexdigest()
        if about["sha256"] != image:
            wrong.append(f"{path}: changed since docs/make_screenshots.py made it")
        if about["page"] != "tutorial.md":
            wrong.append(f"{path}: made from {about['page']}, not the tutorial")
        if not about["task_ids"] or not set(about["task_ids"]) <= defined:
            wrong.append(
                f"{path}: shows tasks {about['task_ids']}, the tutorial defines {sorted(defined)}"
            )
    assert not wrong, "\n".join(wrong)


def test_the_failed_blocks_section_shows_orphaned_blocks(site: Path) -> None:
    """The section "Failed blocks, explained" said that the blocks that
    depend on a failed block are orphaned, and its run showed "orphaned ∅:
    0": its executed output must show orphaned blocks, and its prose say
    what orphaned means."""
    page = (site / "tutorial.html").read_text(encoding="utf-8")
    section = re.search(r'<section id="failed-blocks-explained">(.*?)</section>', page, re.S)
    assert section, "the tutorial has no section 'Failed blocks, explained'"
    outputs = "\n".join(
        html.unescape(re.sub(r"<[^>]+>", "", pre))
        for pre in re.findall(
            r'<div class="cell_output[^"]*">(.*?)</div>\s*</div>', section.group(1), re.S
        )
    )
    counts = [int(n) for n in re.findall(r"orphaned\s+∅:\s*(\d+)", outputs)]
    assert counts, f"the section's output has no orphaned count: {outputs[:2000]}"
    assert max(counts) > 0, f"no orphaned block in the section's output: {counts}"
    prose = " ".join(
        html.unescape(re.sub(r"<[^>]+>", "", p))
        for p in re.findall(r"<p>(.*?)</p>", section.group(1), re.S)
    )
    assert re.search(r"\borphaned\b", prose), "the section does not say what orphaned means"


def test_the_readme_says_how_to_resume_before_how_workers_connect() -> None:
    """Issue 41: the README put the run token and the local socket, internals
    no newcomer needs first, in "Workers", before "Resuming a run"; they
    follow "On a shared cluster" now."""
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    sections = [line for line in readme.splitlines() if line.startswith("## ")]
    assert sections.index("## Resuming a run") < sections.index("## On a shared cluster")
    workers = readme.index("## Workers")
    resuming = readme.index("## Resuming a run")
    for internal in ("Who may join a run", "Unix-domain socket", "SO_PEERCRED"):
        assert internal in readme, internal
        assert not workers < readme.index(internal) < resuming, f"{internal!r} is in Workers"


def test_the_planning_pages_example_runs(tmp_path: Path) -> None:
    """The Python blocks of docs/planning.md, in order, in an empty
    directory: the forecast, its figures, and the run of the rest."""
    blocks = code_blocks((DOCS / "planning.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 2, blocks
    script = "\n".join(code for _, code in blocks) + '\nprint("PLANNING OK")\n'
    (tmp_path / "planning.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "planning.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and "PLANNING OK" in done.stdout, (
        done.stdout[-3000:] + done.stderr[-3000:]
    )
    assert "Forecast: the rest of the run takes" in done.stdout
