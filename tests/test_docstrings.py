"""``help()`` is all a user of the wheel has: no docstring may send them to
a file the wheel does not contain (the repository's ``DONE_MARKERS.md``,
``RUN_STATS.md``, ...)."""

from __future__ import annotations

import importlib
import pkgutil
import pydoc
import re

import pytest

import daisy

#: a reference to a Markdown file
MARKDOWN_FILE = re.compile(r"\b[\w./-]+\.md\b")


def _public_names() -> list[str]:
    return [n for n in daisy.__all__ if not isinstance(getattr(daisy, n, None), str)]


def _modules() -> list[str]:
    return [m.name for m in pkgutil.iter_modules(daisy.__path__) if m.name != "__main__"]


@pytest.mark.parametrize("name", _public_names())
def test_help_of_every_public_name_is_self_contained(name):
    text = pydoc.render_doc(getattr(daisy, name), renderer=pydoc.plaintext)
    assert not MARKDOWN_FILE.findall(text), MARKDOWN_FILE.findall(text)


@pytest.mark.parametrize("module", _modules())
def test_help_of_every_module_is_self_contained(module):
    mod = importlib.import_module(f"daisy.{module}")
    text = pydoc.render_doc(mod, renderer=pydoc.plaintext)
    assert not MARKDOWN_FILE.findall(text), MARKDOWN_FILE.findall(text)
