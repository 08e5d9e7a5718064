"""Sphinx configuration of daisy's documentation site (``make docs``).

The site builds offline with warnings as errors: Markdown pages through
MyST, the tutorial executed by myst-nb when the site is built, the API
reference by autodoc (napoleon reads the Google-style docstrings), and the
cross-references to Python, numpy, zarr and funlib through intersphinx
inventories shipped in ``_inventories/`` (the build machine has no network;
``_inventories/make_inventories.py`` writes them, with the real sites'
addresses, so the links work when the pages are read online).
"""

from __future__ import annotations

from pathlib import Path

import daisy

HERE = Path(__file__).resolve().parent

project = "daisy"
author = "the daisy developers"
release = daisy.__version__
version = release
copyright = "the daisy developers"

extensions = [
    "myst_nb",  # MyST Markdown pages and executed notebooks (it loads myst_parser)
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
]
source_suffix = {".md": "myst-nb", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_inventories/*.py", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# the tutorial runs when the site is built, in a scratch directory; a cell
# that raises fails the build
nb_execution_mode = "force"
nb_execution_in_temp = True
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_merge_streams = True

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# the constructor's signature on the class's own line, its parameters (with
# the types of its annotations) in the class's one parameter list: with
# "separated" every parameter was listed twice, under the class and under
# a separate ``__init__``
autodoc_class_signature = "mixed"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

intersphinx_mapping = {
    "python": ("https://docs.python.org/3", str(HERE / "_inventories" / "python.inv")),
    "numpy": ("https://numpy.org/doc/stable", str(HERE / "_inventories" / "numpy.inv")),
    "zarr": ("https://zarr.readthedocs.io/en/stable", str(HERE / "_inventories" / "zarr.inv")),
    "funlib": (
        "https://funkelab.github.io/funlib.geometry",
        str(HERE / "_inventories" / "funlib.inv"),
    ),
}
intersphinx_timeout = 1

html_theme = "alabaster"
html_title = f"daisy {release}"
html_static_path = ["_static"]
html_theme_options = {
    "description": "blockwise task scheduling that measures itself",
    # a column of about 980 px (alabaster's default is 660 px): code of
    # about 100 columns fits a 1280 px window (tests/test_docs.py checks
    # that no page clips code at 1280 px); narrower windows get the theme's
    # one-column layout
    "page_width": "1240px",
    "sidebar_width": "200px",
    "body_max_width": "none",
}
html_css_files = ["daisy.css"]  # _static/daisy.css: wrapping of wide output
html_favicon = "_static/daisy.svg"
