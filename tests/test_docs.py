"""The documentation site (``make docs``): it builds with no warning, its
API reference names every public name of ``daisy``, its tutorial was
executed (the outputs are on the page), and it opens in headless Chromium
with the network off, without a console error or a missing image, and its
search finds pages.

The site is built once for this module into a temporary directory with
the same command ``make docs`` runs (warnings as errors)."""

from __future__ import annotations

import html
import re
import subprocess
import sys
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
