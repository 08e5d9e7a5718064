"""Where workers run: on this machine, as SLURM jobs, or on a Dask cluster.

A task's spawner says how to start one worker and how to stop it; the
server decides when (``max_workers``, resources, replacing dead workers)
and stamps every worker's timeline the same way for every spawner. A
spawner only produces commands:

- the **start command** runs locally as the worker's handle: the worker
  itself (`LocalSpawner`), ``sbatch --wait`` of a job running it
  (`SlurmSpawner`), or a small process that runs it as a Dask task and
  waits for it (`DaskSpawner`). When the handle exits, the worker is
  gone: a job that was cancelled, a Dask worker that died, a crash;
- the **stop command** cancels the remote part when the server stops a
  worker on purpose (timeout, Ctrl-C, end of run): ``scancel`` for SLURM;
- the **stop-all command** runs once when the run ends on any path and
  cancels every job of the run still queued, so none is left behind.

``{worker_id}`` and ``{task_id}`` in a command are replaced by the
server. Each worker gets the context (``DAISY_CONTEXT``: server address,
task, worker id, log directory, run token) in its environment, and its
function through a file in the task's log directory (``payload.pkl``),
which therefore must be on a file system the worker's node can read.
Remote workers need a server address they can reach: with a non-local
spawner the server listens on every interface and advertises this
machine's host name, unless ``run_blockwise(host=...)`` says otherwise.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the idle timeout of the remote spawners, seconds: a worker that waited
#: five minutes for a block hands its node back (a job ends, a Dask slot is
#: freed); a new one costs a queue wait and an interpreter start, which
#: five minutes of idling outweighs on a shared cluster
REMOTE_IDLE_TIMEOUT = 300.0


@dataclass
class WorkerCommands:
    """What the server runs for one worker of a task."""

    program: str
    args: list[str]
    #: bytes written to the handle's stdin (the local worker reads its
    #: function from there)
    stdin: bytes = b""
    #: run when the server stops this worker on purpose
    stop: list[str] = field(default_factory=list)
    #: the program is a local handle that learns of its job's end only by
    #: polling the batch system (``sbatch --wait``, ``bsub -K``): once its
    #: worker has been told to stop and has closed its connection, the
    #: server ends the handle (not the job, which ends by itself) instead
    #: of waiting for its next poll
    polls: bool = False


class Spawner:
    """How to start and stop the workers of a task. Subclasses implement
    `commands`; `stop_all`, `wait_all` and `is_local` have defaults."""

    #: whether workers run on this machine (then the server may stay on
    #: the loopback interface)
    is_local = True
    #: the name the run report gives it (the report notes that startup
    #: includes the queue wait for "slurm" and "dask")
    name = "custom"
    #: seconds a worker may wait for a block before it is handed back, for
    #: tasks and runs that set no ``idle_timeout``; None: it waits as long
    #: as its task can still get blocks
    idle_timeout: float | None = None

    def commands(self, run_tag: str, payload: bytes, payload_file: Path) -> WorkerCommands:
        """The start (and stop) command of one worker. ``payload`` is the
        task's pickled function, also written to ``payload_file``."""
        raise NotImplementedError

    def stop_all(self, run_tag: str) -> list[str]:
        """A command cancelling every remote worker of the run (empty: none)."""
        return []

    def wait_all(self, run_tag: str) -> list[str]:
        """A command that returns once no remote job of the run is left
        (empty: nothing to wait for). The end of a run that was not
        interrupted waits for it, at most 10 s, before `stop_all`: a job
        whose worker has left is ending by itself, and cancelling it then
        would cut its exit short."""
        return []

    def launcher_args(self) -> list[str] | None:
        """Arguments of the start command's program that start a launcher
        forking warm workers (it gets the same stdin), or None: this
        spawner's workers always start cold."""
        return None

    #: workers one job hosts: above 1, `job_commands` says how to submit a
    #: job running a node launcher (``python -m daisy._launcher --job
    #: --payload FILE``) that connects back to the server and forks that
    #: many workers from one loaded function
    workers_per_job: int = 1

    def job_commands(self, run_tag: str, payload_file: Path) -> WorkerCommands | None:
        """The start (and stop) command of one job hosting up to
        `workers_per_job` workers (``{job}`` and ``{task_id}`` are replaced
        by the server; the job gets ``DAISY_JOB_CONTEXT`` in its
        environment), or None: every worker has a job of its own."""
        return None


class LocalSpawner(Spawner):
    """Worker processes on this machine (the default): ``python -m
    daisy._worker``, the function on its stdin; or, warm, forked by a
    per-task ``python -m daisy._launcher`` that loaded the function once
    (see ``Task(warm_start=...)``)."""

    name = "local"

    def commands(self, run_tag: str, payload: bytes, payload_file: Path) -> WorkerCommands:
        """``python -m daisy._worker`` with the payload on stdin."""
        return WorkerCommands(sys.executable, ["-m", "daisy._worker"], stdin=payload)

    def launcher_args(self) -> list[str] | None:
        """``-m daisy._launcher``: warm starts (see ``Task(warm_start=...)``)."""
        return ["-m", "daisy._launcher"]


def job_name(run_tag: str) -> str:
    """The SLURM job name of a worker (placeholders for the server)."""
    return f"daisy-{run_tag}-{{task_id}}-{{worker_id}}"


def shared_job_name(run_tag: str) -> str:
    """The SLURM job name of a job hosting several workers (placeholders
    for the server; ``scancel-run`` finds both kinds by the prefix)."""
    return f"daisy-{run_tag}-{{task_id}}-job{{job}}"


def scaled_memory(mem: str, n: int) -> str:
    """A SLURM ``--mem`` value (``"4G"``, ``"500M"``, ``"2048"``) times
    ``n``: a job of n workers asks for n workers' memory."""
    text = str(mem).strip()
    digits = text.rstrip("KMGTkmgt")
    unit = text[len(digits) :]
    if not digits.isdigit() or len(unit) > 1:
        raise ValueError(
            f"mem: {mem!r} is not a SLURM memory size such as '4G' or '500M'; with "
            "workers_per_job above 1 it is per worker and daisy multiplies it for the job"
        )
    return f"{int(digits) * n}{unit}"


@dataclass
class SlurmSpawner(Spawner):
    """One SLURM job per worker, submitted with ``sbatch --wait``.

    Each job runs ``python -m daisy._worker`` with this interpreter (which
    the compute nodes must be able to run, as on a shared file system),
    writes to the worker's log files, and is cancelled with ``scancel``
    when the server stops the worker or the run ends. The time a job
    waits in the queue is part of its worker's startup in the report.

    Args:
        partition: ``--partition``.
        cpus: ``--cpus-per-task``.
        mem: ``--mem`` (e.g. ``"4G"``).
        gpus: ``--gres=gpu:N``.
        time: ``--time`` (e.g. ``"2:00:00"``).
        extra_args: more ``sbatch`` arguments, as a list.
        sbatch, scancel: the commands, if not on ``PATH`` under these names.
        idle_timeout: seconds a worker waits for a block before its job
            ends and hands the node back (workers are submitted again when
            blocks are ready); 300 by default, None to keep idle jobs.
            ``Task(idle_timeout=...)`` and ``run_blockwise(idle_timeout=...)``
            take precedence.
        workers_per_job: workers one job hosts (1 by default: a job per
            worker). Above 1, each job runs a node launcher that loads the
            function once and forks its workers (milliseconds apart); a
            worker that dies is replaced inside its job while the job
            lives, and the job ends when its last worker has. ``cpus``,
            ``mem`` and ``gpus`` stay per worker: the job asks for that
            many times as much. The report gives each worker's job id and
            each job's queue wait.
    """

    partition: str | None = None
    cpus: int | None = None
    mem: str | None = None
    gpus: int | None = None
    time: str | None = None
    extra_args: Sequence[str] = ()
    sbatch: str = "sbatch"
    scancel: str = "scancel"
    idle_timeout: float | None = REMOTE_IDLE_TIMEOUT
    workers_per_job: int = 1

    is_local = False
    name = "slurm"

    def __post_init__(self) -> None:
        from daisy._daisy import validated_workers_per_job

        if isinstance(self.workers_per_job, bool) or not isinstance(self.workers_per_job, int):
            raise ValueError(
                f"workers_per_job: expected a whole number of workers per job, got "
                f"{self.workers_per_job!r}"
            )
        self.workers_per_job = validated_workers_per_job(self.workers_per_job)
        if self.mem and self.workers_per_job > 1:
            scaled_memory(self.mem, self.workers_per_job)  # a bad size fails here

    def _sbatch_args(self, name: str, out: Path, err: Path, n: int) -> list[str]:
        args = [
            "--wait",
            "--job-name",
            name,
            "--output",
            str(out),
            "--error",
            str(err),
            "--open-mode=append",
            "--export=ALL",
        ]
        if self.partition:
            args += ["--partition", self.partition]
        if self.cpus:
            args += ["--cpus-per-task", str(self.cpus * n)]
        if self.mem:
            args += ["--mem", scaled_memory(self.mem, n) if n > 1 else str(self.mem)]
        if self.gpus:
            args += [f"--gres=gpu:{self.gpus * n}"]
        if self.time:
            args += ["--time", str(self.time)]
        return args + list(self.extra_args)

    def commands(self, run_tag: str, payload: bytes, payload_file: Path) -> WorkerCommands:
        """``sbatch --wait`` of a job running the worker; ``scancel`` to stop it."""
        logs = payload_file.parent
        args = self._sbatch_args(
            job_name(run_tag), logs / "worker_{worker_id}.out", logs / "worker_{worker_id}.err", 1
        )
        worker = [sys.executable, "-m", "daisy._worker", "--payload", str(payload_file)]
        args += ["--wrap", shlex.join(worker)]
        return WorkerCommands(
            self.sbatch, args, stop=[self.scancel, "--name", job_name(run_tag)], polls=True
        )

    def job_commands(self, run_tag: str, payload_file: Path) -> WorkerCommands | None:
        """With ``workers_per_job`` above 1: ``sbatch --wait`` of a job
        running the node launcher; ``scancel`` to cancel the job."""
        if self.workers_per_job <= 1:
            return None
        logs = payload_file.parent
        name = shared_job_name(run_tag)
        args = self._sbatch_args(
            name, logs / "job_{job}.out", logs / "job_{job}.err", self.workers_per_job
        )
        launcher = [
            sys.executable,
            "-m",
            "daisy._launcher",
            "--job",
            "--payload",
            str(payload_file),
        ]
        args += ["--wrap", shlex.join(launcher)]
        return WorkerCommands(self.sbatch, args, stop=[self.scancel, "--name", name], polls=True)

    def stop_all(self, run_tag: str) -> list[str]:
        """Cancel every job whose name says it belongs to this run."""
        return [sys.executable, "-m", "daisy.spawners", "scancel-run", run_tag, self.scancel]

    def wait_all(self, run_tag: str) -> list[str]:
        """Return once ``squeue`` lists no job whose name says it belongs
        to this run."""
        return [sys.executable, "-m", "daisy.spawners", "wait-run", run_tag]


@dataclass
class DaskSpawner(Spawner):
    """One long-lived worker loop per worker slot, run as a task on a Dask
    cluster (a ``distributed.Client`` or a scheduler address): a
    LocalCluster, dask-jobqueue's SLURM/PBS/LSF clusters, Kubernetes.
    Scheduling, tracking and statistics stay in daisy; Dask only runs the
    loops. The worker's stdout and stderr are the Dask worker's.
    ``idle_timeout``: seconds a loop waits for a block before it ends and
    frees its Dask worker (an adaptive cluster can then scale down); 300
    by default, None to keep them."""

    client_or_address: Any
    idle_timeout: float | None = REMOTE_IDLE_TIMEOUT

    is_local = False
    name = "dask"

    @property
    def address(self) -> str:
        """The Dask scheduler's address."""
        c = self.client_or_address
        if isinstance(c, str):
            return c
        return str(c.scheduler.address)

    def commands(self, run_tag: str, payload: bytes, payload_file: Path) -> WorkerCommands:
        """A local process that runs the worker loop as a Dask task and waits."""
        return WorkerCommands(
            sys.executable,
            ["-m", "daisy._dask_worker", self.address, str(payload_file)],
        )


#: environment variable: "0" starts every local worker cold (as
#: ``Task(warm_start=False)`` does for one task)
WARM_START_VARIABLE = "DAISY_WARM_START"


def warm_starts_enabled() -> bool:
    """Whether warm starts are on for this run (``DAISY_WARM_START``, on
    when unset); another value than 0 or 1 is an error naming it."""
    value = os.environ.get(WARM_START_VARIABLE, "1").strip()
    if value not in ("0", "1", ""):
        raise ValueError(
            f"{WARM_START_VARIABLE}={value!r}: expected 1 (fork local workers from a warm "
            "launcher, the default) or 0 (a fresh interpreter per worker)"
        )
    return value != "0"


def advertised_host() -> str:
    """An address of this machine other machines can reach."""
    name = socket.gethostname()
    try:
        return socket.gethostbyname(name)
    except OSError:
        return name


def run_jobs(run_tag: str) -> list[str] | None:
    """The ids of the queued or running jobs of a run (by their names), or
    None where ``squeue`` could not be asked."""
    prefix = f"daisy-{run_tag}-"
    try:
        out = subprocess.run(
            ["squeue", "--noheader", "--format=%i %j"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    ids = []
    for line in out.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[1].startswith(prefix):
            ids.append(parts[0])
    return ids


def scancel_run(run_tag: str, scancel: str = "scancel") -> None:
    """Cancel every queued or running job of a run (by its job names)."""
    ids = run_jobs(run_tag)
    if ids:
        subprocess.run([scancel, *ids], timeout=30, check=False)


#: how often `wait_run` asks ``squeue``: a job whose worker left ends in
#: well under a second, and one call per run (not per job) this often
#: costs the controller nothing noticeable
WAIT_RUN_POLL = 0.2


def wait_run(run_tag: str) -> None:
    """Return once ``squeue`` lists no job of the run (or cannot be
    asked); the run's end bounds how long this may take."""
    while run_jobs(run_tag):
        time.sleep(WAIT_RUN_POLL)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "scancel-run":
        scancel_run(sys.argv[2], *(sys.argv[3:4]))
    elif len(sys.argv) == 3 and sys.argv[1] == "wait-run":
        wait_run(sys.argv[2])
