"""Build the stand-in NVML (``fake_nvml.c``) for the GPU tracking tests and
benchmarks: ``build_fake_nvml(directory)`` compiles it to
``directory/libnvidia-ml.so.1`` with the system's C compiler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")


def build_fake_nvml(directory: Path) -> Path:
    """The compiled stand-in; raises RuntimeError without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("building the stand-in NVML needs a C compiler (cc)")
    out = directory / "libnvidia-ml.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(SOURCE)], check=True)
    return out
