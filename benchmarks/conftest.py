"""Record which daisy the benchmarks imported, so a benchmark JSON says
what it measured (``compare_with_daisy200.py`` checks it)."""

from __future__ import annotations

import os


def pytest_benchmark_update_machine_info(config, machine_info):
    import daisy

    machine_info["daisy_version"] = getattr(daisy, "__version__", "unknown")
    machine_info["daisy_file"] = os.path.abspath(daisy.__file__)
    machine_info["daisy_has_taskspec"] = hasattr(getattr(daisy, "_daisy", None), "TaskSpec")
    machine_info["loadavg"] = list(os.getloadavg())
