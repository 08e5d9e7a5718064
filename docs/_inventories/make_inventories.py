"""Write the intersphinx inventories the docs build reads offline.

The build machine (and CI) has no network, and intersphinx would otherwise
fetch each project's ``objects.inv``: a failed fetch is a warning, and the
build treats warnings as errors. These inventories name the objects daisy's
pages and signatures refer to, at their addresses on the projects' own
sites (so a link works when the page is read online). Run it after adding
a name: ``python docs/_inventories/make_inventories.py``.

The format is Sphinx's inventory version 2: four header lines, then
zlib-compressed lines ``name domain:role priority uri dispname`` (``$`` in
the uri stands for the name, ``-`` as dispname for the name itself).
"""

from __future__ import annotations

import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: project -> (its name, version, [(name, role, uri)])
INVENTORIES: dict[str, tuple[str, str, list[tuple[str, str, str]]]] = {
    "python": (
        "Python",
        "3.11",
        [
            *[(n, "py:class", "library/functions.html#$") for n in ("int", "float", "bool")],
            *[
                (n, "py:class", "library/stdtypes.html#$")
                for n in ("str", "dict", "list", "tuple", "bytes", "set")
            ],
            ("None", "py:data", "library/constants.html#$"),
            ("pathlib.Path", "py:class", "library/pathlib.html#$"),
            ("os.PathLike", "py:class", "library/os.html#$"),
            ("typing.Any", "py:data", "library/typing.html#$"),
            *[
                (f"collections.abc.{n}", "py:class", "library/collections.abc.html#$")
                for n in ("Callable", "Iterable", "Iterator", "Sequence", "Mapping")
            ],
            *[
                (n, "py:exception", "library/exceptions.html#$")
                for n in (
                    "ValueError",
                    "TypeError",
                    "RuntimeError",
                    "OSError",
                    "PermissionError",
                    "KeyboardInterrupt",
                    "ConnectionError",
                    "DeprecationWarning",
                )
            ],
            ("threading.Event", "py:class", "library/threading.html#$"),
            ("logging.Logger", "py:class", "library/logging.html#$"),
            ("logging", "py:module", "library/logging.html#module-logging"),
        ],
    ),
    "numpy": (
        "NumPy",
        "2",
        [
            ("numpy.ndarray", "py:class", "reference/generated/numpy.ndarray.html#$"),
            ("numpy.dtype", "py:class", "reference/generated/numpy.dtype.html#$"),
        ],
    ),
    "zarr": (
        "zarr",
        "3",
        [
            ("zarr.Group", "py:class", "api/zarr/index.html#$"),
            ("zarr.Array", "py:class", "api/zarr/index.html#$"),
            ("zarr.open_group", "py:function", "api/zarr/index.html#$"),
        ],
    ),
    "funlib": (
        "funlib.geometry",
        "0.3",
        [
            ("funlib.geometry.Roi", "py:class", "#$"),
            ("funlib.geometry.Coordinate", "py:class", "#$"),
        ],
    ),
}


def write(project: str) -> Path:
    """Write ``<project>.inv`` beside this script."""
    name, version, objects = INVENTORIES[project]
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {name}\n"
        f"# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    body = "".join(f"{n} {role} 1 {uri} -\n" for n, role, uri in objects)
    out = HERE / f"{project}.inv"
    out.write_bytes(header.encode() + zlib.compress(body.encode()))
    return out


if __name__ == "__main__":
    for p in INVENTORIES:
        print(write(p))
