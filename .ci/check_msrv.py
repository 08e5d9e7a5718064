#!/usr/bin/env python3
"""Check the workspace's declared ``rust-version`` (the MSRV) without a
second toolchain: it must be at least what the code needs and at most the
installed ``rustc`` (the toolchain every check here builds with).

"What the code needs" is the newest of the language features below found
in the workspace's Rust sources, and of its edition. This is a tripwire
for the features the code is known to use, not a compiler: a new feature
that needs a newer Rust goes into FEATURES when it is first used.

Run from the repository root (``make msrv``); exits 1 with the reason when
the declaration is out of range.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

#: language features, how to spot them in a line of Rust, and the first
#: stable Rust that has them
FEATURES = [
    # `if let Some(x) = a && let Some(y) = b` / `&& let ...` on a line of
    # its own, as rustfmt splits long chains
    ("let chains", re.compile(r"&&\s*let\b|\bif\s+let\b[^{]*&&"), (1, 88)),
]

#: the first Rust of each edition
EDITIONS = {"2015": (1, 0), "2018": (1, 31), "2021": (1, 56), "2024": (1, 85)}


def version(text: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", text)
    if match is None:
        raise ValueError(f"not a Rust version: {text!r}")
    return int(match[1]), int(match[2])


def show(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def main() -> int:
    root = Path.cwd()
    workspace = tomllib.loads((root / "Cargo.toml").read_text())["workspace"]
    package = workspace["package"]
    declared = version(package["rust-version"])

    needed, why = EDITIONS[package["edition"]], f"edition {package['edition']}"
    for member in workspace["members"]:
        for source in sorted((root / member).rglob("*.rs")):
            for number, line in enumerate(source.read_text().splitlines(), 1):
                code = line.split("//", 1)[0]
                for name, pattern, since in FEATURES:
                    if since > needed and pattern.search(code):
                        where = f"{source.relative_to(root)}:{number}"
                        needed, why = since, f"{name} ({where})"

    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True, check=True)
    installed = version(rustc.stdout.split()[1])

    if declared < needed:
        print(
            f"msrv: Cargo.toml declares rust-version {show(declared)}, but the code needs "
            f"{show(needed)} for {why}",
            file=sys.stderr,
        )
        return 1
    if declared > installed:
        print(
            f"msrv: Cargo.toml declares rust-version {show(declared)}, newer than the installed "
            f"rustc {show(installed)}, which every build and test here uses",
            file=sys.stderr,
        )
        return 1
    print(
        f"msrv: rust-version {show(declared)} covers {why} (needs {show(needed)}) and is "
        f"within rustc {show(installed)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
