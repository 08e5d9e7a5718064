"""A real single-node SLURM cluster for the tests: Debian's munge,
slurmctld and slurmd, configured in a temporary directory, started, and
stopped by PID afterwards. `.ci/run` (``make test``) installs the
packages; the daemons need root, as CI has."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CONF = """\
ClusterName=daisytest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
NodeName={host} CPUs={cpus} RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
"""


def _wait(condition: Callable[[], Any], timeout: float) -> Any:
    """Poll `condition` every 50 ms until it is true (its value), or
    `timeout` seconds pass (its last value): startup and shutdown as fast
    as the machine allows, and sturdy on a loaded one."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def _controller_up(env: dict[str, str]) -> bool:
    """Whether slurmctld answers (``scontrol ping``)."""
    out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=env).stdout
    return "UP" in out


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (and is not a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


@contextmanager
def slurm_cluster(directory: Path) -> Iterator[dict[str, str]]:
    """Start the cluster; yields the environment (SLURM_CONF) to use it."""
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            raise RuntimeError(
                f"{tool} is missing: install Debian's slurmctld, slurmd, slurm-client and munge "
                "(make test does)"
            )
    d = directory
    for sub in ("state", "spool"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    host = socket.gethostname().split(".")[0]
    conf = d / "slurm.conf"
    conf.write_text(CONF.format(host=host, d=d, cpus=os.cpu_count() or 1))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started: list[int] = []
    munge_key = Path("/etc/munge/munge.key")
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
        if not munge_key.exists():
            subprocess.run(["mungekey", "-c"], check=True)
        shutil.chown(munge_key, "munge", "munge")
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"], check=True)
        # munged writes its pid file once it serves; pgrep would also match zombies
        pid = _wait(lambda: _pid(Path("/run/munge/munged.pid")), 10)
        if pid:
            started.append(pid)
    subprocess.run(["/usr/sbin/slurmctld", "-f", str(conf)], check=True, env=env)
    # slurmd registers with a controller that answers
    _wait(lambda: _controller_up(env), 30)
    subprocess.run(["/usr/sbin/slurmd", "-f", str(conf)], check=True, env=env)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            out = subprocess.run(
                ["sinfo", "--noheader", "--format=%T"], capture_output=True, text=True, env=env
            ).stdout
            if "idle" in out or "mix" in out:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"the SLURM node did not come up:\n{(d / 'slurmd.log').read_text()}")
        yield env
    finally:
        stopped = [p for p in (_pid(d / f) for f in ("slurmd.pid", "slurmctld.pid")) if p]
        for pidfile in ("slurmd.pid", "slurmctld.pid"):
            pid = _pid(d / pidfile)
            if pid:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for pid in started:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        # gone before the next cluster starts on the same ports
        _wait(lambda: not any(_alive(p) for p in stopped + started), 10)
