"""Shared directories on a cluster: another user must not run code as you,
read what your function captured, or make your run write into your files.

Every test here plays a week on a shared cluster with two real users: the
victim (this process, root in CI) and ``daisy-other``, the attacker, who
acts in a forked child that gave up root (``setuid``). The shared space is a
sticky world-writable directory (mode 1777, like ``/tmp`` or a team's
scratch directory) under ``/tmp``.

The attacks:

- the cluster job reads its function from ``payload.pkl`` in the task's log
  directory: another user who pre-created that directory, or shares a
  group-writable one, swaps the file while the job is queued, and their
  pickle runs as the victim when the job starts;
- the payload (and the data the function captured) is readable by others
  under umask 022;
- worker log files and the tracking store's ``daisy.lock`` are opened
  following symlinks, so a symlink planted where the run will create them
  makes the run append its output to (or truncate) a file of the victim's.

Jobs "wait in the queue" deterministically: the start command of the
spawner (a custom `daisy.Spawner` as a user writes one, or `SlurmSpawner`
with a one-machine stand-in for ``sbatch``) first runs `HOOK`, which lets
the attacker act (or swaps the payload as root), then execs the worker.
"""

from __future__ import annotations

import grp
import json
import os
import pickle
import pwd
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import line_task, take_calls

import daisy
from daisy.spawners import WorkerCommands

OTHER_USER = "daisy-other"
SHARED_GROUP = "daisy-shared"
TASK = "seg"
BLOCKS = 3
ALL_CALLS = {(TASK, (i * 10,)) for i in range(BLOCKS)}
#: words an error refusing a directory uses to say why
REASONS = (
    "owner",
    "owned",
    "writable",
    "another user",
    "other user",
    "uid",
    "not yours",
    "link",
)
#: words the worker's log line refusing a changed payload uses
DIGEST_WORDS = ("sha-256", "sha256", "digest", "hash", "checksum")
#: names the worker logs of task TASK get (worker ids from 0, the launcher's)
LOG_NAMES = [f"worker_{i}.{s}" for i in range(8) for s in ("out", "err")] + [
    "launcher.out",
    "launcher.err",
]
#: what a run writes into a task's log directory: its logs, and the run
#: history of a task without a tracking store
PLANTED_NAMES = [*LOG_NAMES, "runs.jsonl"]

# Run by the spawner's start command, as the victim, between the moment the
# driver wrote the payload and the worker's start: what a job does while it
# waits in the queue. argv: config file, payload file, worker command...
HOOK = r'''
import json, os, sys

config_path, payload_file, *worker = sys.argv[1:]
with open(config_path) as f:
    cfg = json.load(f)
evil = bytes.fromhex(cfg["evil"])


def note():
    rec = {"payload": payload_file}
    for key, path in (("file", payload_file), ("dir", os.path.dirname(payload_file))):
        try:
            st = os.lstat(path)
            rec[key + "_mode"], rec[key + "_uid"] = st.st_mode, st.st_uid
        except OSError as e:
            rec[key + "_error"] = repr(e)
    with open(cfg["record"], "a") as f:
        f.write(json.dumps(rec) + "\n")


def attack():
    """Everything the attacker can try: read the payload, overwrite it,
    replace it in its directory, swap the whole directory."""
    directory = os.path.dirname(payload_file)
    try:
        with open(payload_file, "rb") as f:
            data = f.read()
        with open(cfg["stolen"], "ab") as f:
            f.write(data)
    except OSError:
        pass
    try:
        with open(payload_file, "r+b") as f:
            f.truncate(0)
            f.write(evil)
        return
    except OSError:
        pass
    try:
        tmp = os.path.join(directory, ".swap")
        with open(tmp, "wb") as f:
            f.write(evil)
        os.replace(tmp, payload_file)
        return
    except OSError:
        pass
    try:
        os.rename(directory, directory + ".old")
        os.mkdir(directory)
        with open(payload_file, "wb") as f:
            f.write(evil)
    except OSError:
        pass


note()
if cfg.get("root_swap"):
    with open(payload_file, "r+b") as f:
        f.truncate(0)
        f.write(evil)
if cfg.get("attacker"):
    uid, gid, groups = cfg["attacker"]
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            os.umask(0o022)
            attack()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
os.execvp(worker[0], worker)
'''

# A one-machine stand-in for ``sbatch --wait``: the job "waits in the
# queue" (HOOK), then runs its --wrap command with its output in --output
# and --error. argv: HOOK file, HOOK config, sbatch's arguments...
FAKE_SBATCH = r"""
import os, shlex, sys

hook, config, *args = sys.argv[1:]
opts, i = {}, 0
while i < len(args):
    if args[i] in ("--output", "--error", "--wrap", "--job-name", "--partition",
                   "--cpus-per-task", "--mem", "--time"):
        opts[args[i]] = args[i + 1]
        i += 2
    else:
        i += 1
wrap = shlex.split(opts["--wrap"])
payload = wrap[wrap.index("--payload") + 1] if "--payload" in wrap else ""
for key, fd in (("--output", 1), ("--error", 2)):
    if key in opts:
        try:
            out = os.open(opts[key], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            os.dup2(out, fd)
        except OSError:
            pass
os.execv(sys.executable, [sys.executable, hook, config, payload, "/bin/sh", "-c", opts["--wrap"]])
"""


@dataclass(frozen=True)
class Other:
    """The attacker: a second real user, and a group they share with the
    victim's project directory."""

    uid: int
    gid: int
    shared_gid: int


@pytest.fixture(scope="session")
def other() -> Other:
    """The user ``daisy-other`` (created if missing) and the group
    ``daisy-shared``; the tests need root to create and become them."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the attacker is a second real user (useradd daisy-other)")
    if shutil.which("useradd") is None or shutil.which("groupadd") is None:
        pytest.skip("needs useradd and groupadd to create the attacker's user")
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", OTHER_USER],
            check=True,
            capture_output=True,
        )
    try:
        grp.getgrnam(SHARED_GROUP)
    except KeyError:
        subprocess.run(["groupadd", "-r", SHARED_GROUP], check=True, capture_output=True)
    user = pwd.getpwnam(OTHER_USER)
    return Other(user.pw_uid, user.pw_gid, grp.getgrnam(SHARED_GROUP).gr_gid)


@pytest.fixture
def shared(other: Other) -> Iterator[Path]:
    """A fresh sticky world-writable directory under ``/tmp`` (mode 1777),
    with the victim's home ``home/victim`` (root's, mode 0755, as home
    directories on clusters often are); removed after the test."""
    path = Path(tempfile.mkdtemp(prefix="daisy-shared-", dir="/tmp"))
    path.chmod(0o1777)
    home = path / "home" / "victim"
    home.mkdir(parents=True)
    home.parent.chmod(0o755)
    home.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def hook_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(HOOK, FAKE_SBATCH)`` written to files only the victim reads."""
    folder = tmp_path_factory.mktemp("hooks")
    hook, sbatch = folder / "hook.py", folder / "fake_sbatch.py"
    hook.write_text(HOOK)
    sbatch.write_text(FAKE_SBATCH)
    return hook, sbatch


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    """Set this process's umask for the test (the run's server and workers
    inherit it); the old one comes back after."""
    old = os.umask(0o022)
    os.umask(old)

    def set_umask(mask: int) -> None:
        os.umask(mask)

    yield set_umask
    os.umask(old)


def as_other(other: Other, step: Callable[[], None], groups: tuple[int, ...] = ()) -> None:
    """Run ``step`` as the attacker, in a forked child that gave up root."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups(list(groups))
            os.setgid(other.gid)
            os.setuid(other.uid)
            os.umask(0)
            step()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the attacker's step failed"


class _Evil:
    """The attacker's pickle: unpickling it runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"id -u > {shlex.quote(str(self.marker))}",))


def evil_pickle(marker: Path) -> bytes:
    """A pickle that, once loaded, writes the uid it ran as to ``marker``."""
    return pickle.dumps(_Evil(marker))


def victim_function(calls_dir: Path, secret: str) -> Callable[[daisy.Block], None]:
    """The victim's block function: it captures ``secret`` (what a user's
    function carries: a credential, a private path), prints to its log,
    and notes its call in ``calls_dir`` (as `conftest.recorder` does)."""
    calls_path = str(calls_dir)

    def process(block: daisy.Block) -> None:
        assert secret.startswith("victim-secret-")
        offset = " ".join(str(int(c)) for c in block.write_roi.offset)
        print(f"worker output for block {offset}", flush=True)
        print(f"worker error output for block {offset}", file=sys.stderr, flush=True)
        with open(os.path.join(calls_path, f"{os.getpid()}.txt"), "a") as f:
            f.write(f"{block.task_id} {offset}\n")

    return process


class QueuedSpawner(daisy.Spawner):
    """A user's own cluster spawner (not local): the job runs ``python -m
    daisy._worker --payload FILE`` once it leaves the queue, which `HOOK`
    stands for."""

    is_local = False
    name = "custom"

    def __init__(self, hook: Path, config: Path) -> None:
        self.hook, self.config = str(hook), str(config)

    def commands(self, run_tag: str, payload: bytes, payload_file: Path) -> WorkerCommands:
        worker = [sys.executable, "-m", "daisy._worker", "--payload", str(payload_file)]
        return WorkerCommands(sys.executable, [self.hook, self.config, str(payload_file), *worker])


@dataclass
class Scene:
    """One attack's files: the HOOK config and what it leaves behind."""

    config: Path
    record: Path
    marker: Path
    stolen: Path
    secret: str

    def records(self) -> list[dict[str, Any]]:
        """What HOOK saw of the payload file at each worker's start."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def assert_attacker_code_never_ran(self) -> None:
        assert not self.marker.exists(), (
            f"the attacker's pickle ran as uid {self.marker.read_text().strip()} "
            "(the victim) when the worker loaded its payload"
        )

    def assert_nothing_stolen(self) -> None:
        stolen = self.stolen.read_bytes() if self.stolen.exists() else b""
        assert self.secret.encode() not in stolen, (
            "another user read the payload, and the data the function captured, "
            f"({len(stolen)} bytes)"
        )


def make_scene(
    tmp_path: Path,
    shared: Path,
    other: Other | None = None,
    groups: tuple[int, ...] = (),
    root_swap: bool = False,
) -> Scene:
    """The config of HOOK: the attacker (acting before every worker starts)
    or a swap of the payload's bytes by root."""
    marker = tmp_path / "attacker_code_ran"
    scene = Scene(
        config=tmp_path / "hook.json",
        record=tmp_path / "hook_record.jsonl",
        marker=marker,
        stolen=shared / "stolen",
        secret="victim-secret-" + secrets.token_hex(8),
    )
    cfg: dict[str, Any] = {
        "evil": evil_pickle(marker).hex(),
        "record": str(scene.record),
        "stolen": str(scene.stolen),
        "root_swap": root_swap,
    }
    if other is not None:
        cfg["attacker"] = [other.uid, other.gid, list(groups)]
    scene.config.write_text(json.dumps(cfg))
    return scene


def make_spawner(kind: str, hook_files: tuple[Path, Path], scene: Scene) -> daisy.Spawner:
    """A custom `QueuedSpawner`, or `SlurmSpawner` whose ``sbatch`` is the
    one-machine stand-in."""
    hook, fake_sbatch = hook_files
    if kind == "custom":
        return QueuedSpawner(hook, scene.config)
    wrapper = scene.config.with_name("sbatch")
    wrapper.write_text(
        "#!/bin/sh\nexec "
        + shlex.join([sys.executable, str(fake_sbatch), str(hook), str(scene.config)])
        + ' "$@"\n'
    )
    wrapper.chmod(0o700)
    return daisy.SlurmSpawner(sbatch=str(wrapper), scancel="true")


def run(tasks: list[daisy.Task], timeout: float = 120.0) -> tuple[Any, BaseException | None]:
    """``daisy.run_blockwise(tasks)`` on a thread with a time limit: its
    result, or the exception it raised."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["ok"] = daisy.run_blockwise(tasks, progress=False, summary=False)
        except BaseException as e:  # judged by the test
            out["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"the run did not end within {timeout} s"
    return out.get("ok"), out.get("error")


def assert_refused_or_done(
    ok: Any,
    error: BaseException | None,
    directory: Path,
    calls: Path,
    scene: Scene | None = None,
    task_dir: Path | None = None,
    up_front: bool = True,
) -> None:
    """Either the run was refused before any block ran (``up_front``: before
    any worker started, as a `RunFailed` never is), with an error that names
    ``directory`` and says why, and no payload written in the attacker's
    ``task_dir``; or every block was processed by the victim's own
    function."""
    done = take_calls(calls)
    if error is not None:
        message = str(error)
        if up_front:
            assert not isinstance(error, daisy.RunFailed), (
                f"the run failed instead of refusing the directory up front: {message}"
            )
        if scene is not None:
            assert not scene.records(), "workers started before the directory was refused"
        if task_dir is not None:
            assert not os.path.lexists(task_dir / "payload.pkl"), (
                "the payload was written into the attacker's directory before the refusal"
            )
        assert str(directory) in message, f"the error does not name {directory}: {message}"
        assert any(word in message.lower() for word in REASONS), (
            f"the error does not say why {directory} is refused: {message}"
        )
        assert not done, f"blocks ran before the refusal: {sorted(done)}"
    else:
        assert ok is True, "the run neither refused the directory nor processed every block"
        assert set(done) == ALL_CALLS, f"blocks processed: {sorted(done)}"


def attacker_precreates(layout: str, shared: Path, other: Other, name: str) -> tuple[Path, Path]:
    """The attacker's preparation of a base directory the victim will use,
    ``<shared>/<name>``: "attacker_basedir", the attacker creates it and the
    task's directory in it; "team_basedir", the team's own world-writable
    sticky base directory (made by root) in which the attacker creates the
    task's directory. ``(base directory, task directory)``."""
    base = shared / name
    task_dir = base / TASK
    if layout == "team_basedir":
        base.mkdir()
        base.chmod(0o1777)
        as_other(other, lambda: task_dir.mkdir(0o777))
    else:

        def step() -> None:
            base.mkdir(0o777)
            task_dir.mkdir(0o777)

        as_other(other, step)
    assert task_dir.stat().st_uid == other.uid
    return base, task_dir


LAYOUTS = ["attacker_basedir", "team_basedir"]


@pytest.mark.parametrize("kind", ["custom", "slurm"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_payload_swapped_in_a_log_directory_another_user_created_never_runs(
    tmp_path: Path,
    shared: Path,
    other: Other,
    calls: Path,
    hook_files: tuple[Path, Path],
    kind: str,
    layout: str,
) -> None:
    """Issue 26, defect 6: another user pre-created the victim's log
    directory (or the task's directory in a shared one), and while the
    cluster job was queued replaced ``payload.pkl`` there with their own
    pickle, which ran as the victim when the job started. The attacker's
    code must never run: the run refuses the directory up front (naming it)
    or keeps the payload where the attacker cannot reach it."""
    base, task_dir = attacker_precreates(layout, shared, other, "logs")
    daisy.logging.set_log_basedir(base)
    scene = make_scene(tmp_path, shared, other)
    task = line_task(
        TASK,
        BLOCKS,
        process_function=victim_function(calls, scene.secret),
        spawner=make_spawner(kind, hook_files, scene),
        max_workers=1,
        max_worker_restarts=1,
    )
    ok, error = run([task])
    scene.assert_attacker_code_never_ran()
    scene.assert_nothing_stolen()
    assert_refused_or_done(ok, error, base, calls, scene, task_dir)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_payload_symlink_another_user_planted_is_not_followed(
    tmp_path: Path,
    shared: Path,
    other: Other,
    calls: Path,
    hook_files: tuple[Path, Path],
    layout: str,
) -> None:
    """Issue 26, defect 6: the attacker plants ``payload.pkl`` in the task
    directory they pre-created as a symlink to a file of their own. The
    driver writes the victim's payload (and the data its function captured)
    through it into the attacker's file, the attacker then rewrites that
    file, and the job loads the attacker's pickle. The payload must be
    created exclusively, never through a symlink."""
    base, task_dir = attacker_precreates(layout, shared, other, "logs")
    trap = shared / "attacker_file"

    def plant() -> None:
        trap.write_bytes(b"")
        trap.chmod(0o666)
        (task_dir / "payload.pkl").symlink_to(trap)

    as_other(other, plant)
    daisy.logging.set_log_basedir(base)
    scene = make_scene(tmp_path, shared, other)
    task = line_task(
        TASK,
        BLOCKS,
        process_function=victim_function(calls, scene.secret),
        spawner=make_spawner("custom", hook_files, scene),
        max_workers=1,
        max_worker_restarts=1,
    )
    ok, error = run([task])
    scene.assert_attacker_code_never_ran()
    scene.assert_nothing_stolen()
    assert scene.secret.encode() not in trap.read_bytes(), (
        "the victim's payload was written through the attacker's symlink"
    )
    assert_refused_or_done(ok, error, base, calls, scene)


@pytest.mark.parametrize("kind", ["custom", "slurm"])
def test_a_payload_changed_after_it_was_written_is_refused_by_the_worker(
    tmp_path: Path,
    shared: Path,
    calls: Path,
    hook_files: tuple[Path, Path],
    kind: str,
) -> None:
    """Issue 26, defect 6, second line of defence: the payload file's bytes
    are replaced between the driver writing it and the queued job starting
    (by whoever could reach the file: here root, standing for any way round
    the directory's permissions). The worker compares the file with the
    SHA-256 its secret context carries and refuses it, saying so in its
    log, before unpickling: the swapped pickle never runs."""
    logs = tmp_path / "logs"
    daisy.logging.set_log_basedir(logs)
    scene = make_scene(tmp_path, shared, root_swap=True)
    task = line_task(
        TASK,
        BLOCKS,
        process_function=victim_function(calls, scene.secret),
        spawner=make_spawner(kind, hook_files, scene),
        max_workers=1,
        max_worker_restarts=1,
    )
    ok, error = run([task])
    records = scene.records()
    assert records, f"no worker started (ok={ok!r}, error={error!r})"
    assert all("file_mode" in r for r in records), f"no payload file to swap: {records}"
    scene.assert_attacker_code_never_ran()
    assert ok is not True, "blocks completed from a payload that was swapped"
    # the worker's log files: in the log directory, or (a cluster job's
    # --output) beside its payload
    files = {p for p in logs.rglob("*") if p.is_file()}
    for rec in records:
        folder = Path(rec["payload"]).parent
        if folder.is_dir():
            files |= {p for p in folder.iterdir() if p.is_file()}
    logs_text = "\n".join(
        p.read_text(errors="replace") for p in sorted(files) if p.suffix in (".out", ".err")
    )
    refusals = [
        line
        for line in logs_text.splitlines()
        if "payload" in line.lower() and any(w in line.lower() for w in DIGEST_WORDS)
    ]
    assert refusals, (
        "no worker log line says the payload failed its SHA-256 check; the logs:\n"
        + logs_text[-3000:]
    )


def _assert_private_logs(logs: Path) -> None:
    """The log directories daisy made are 0700; no worker or launcher log
    (nor the payload) is writable by the group or readable by others (0600,
    or 0640 at most)."""
    for directory in (logs, logs / TASK):
        mode = directory.stat().st_mode & 0o7777
        assert mode == 0o700, f"{directory} is {oct(mode)}, not 0o700"
    files = [
        p
        for p in (logs / TASK).iterdir()
        if p.is_file() and not p.is_symlink() and (p.name in LOG_NAMES or p.name == "payload.pkl")
    ]
    assert files, "the run wrote no log files"
    for path in files:
        mode = path.stat().st_mode & 0o7777
        assert mode & 0o037 == 0, f"{path.name} is {oct(mode)}: others can read it"


@pytest.mark.parametrize("kind", ["local", "custom"])
def test_payload_and_logs_are_private_under_umask_022(
    tmp_path: Path,
    shared: Path,
    other: Other,
    calls: Path,
    hook_files: tuple[Path, Path],
    umask: Callable[[int], None],
    kind: str,
) -> None:
    """Issue 26, defect 6: with the common umask 022 the payload file (with
    the data the function captured) and the worker logs were world-readable:
    another user read them from the victim's 0755 home. The payload must be
    0600, worker logs 0600 (0640 at most), and the directories daisy creates
    for logs 0700."""
    umask(0o022)
    logs = shared / "home" / "victim" / "logs"
    daisy.logging.set_log_basedir(logs)
    scene = make_scene(tmp_path, shared, other)
    kwargs: dict[str, Any] = {}
    if kind == "custom":
        kwargs["spawner"] = make_spawner("custom", hook_files, scene)
    task = line_task(
        TASK,
        BLOCKS,
        process_function=victim_function(calls, scene.secret),
        max_workers=1,
        max_worker_restarts=1,
        **kwargs,
    )
    ok, error = run([task])
    assert error is None and ok is True, f"the run failed: {error!r}"
    assert set(take_calls(calls)) == ALL_CALLS
    if kind == "custom":
        records = scene.records()
        assert records, "no worker started"
        for rec in records:
            assert "file_mode" in rec, f"no payload file: {rec}"
            assert rec["file_mode"] & 0o170777 == 0o100600, (
                f"payload.pkl is {oct(rec['file_mode'])}, not a 0600 regular file"
            )
            assert rec["dir_mode"] & 0o7777 == 0o700, (
                f"the payload's directory is {oct(rec['dir_mode'])}, not 0700"
            )
        scene.assert_nothing_stolen()
        scene.assert_attacker_code_never_ran()
    _assert_private_logs(logs)


def test_a_group_writable_log_directory_is_not_used_as_is(
    tmp_path: Path,
    shared: Path,
    other: Other,
    calls: Path,
    hook_files: tuple[Path, Path],
    umask: Callable[[int], None],
) -> None:
    """Issue 26, defect 6: the victim works with umask 002 in the lab's
    setgid project directory (group ``daisy-shared``, mode 2775) and created
    its log directory there, group-writable. A member of the group swapped
    ``payload.pkl`` (or the task's whole directory) while the job was
    queued. The run must refuse the group-writable directory (naming it) or
    make its payload private; the group member's pickle never runs."""
    umask(0o002)
    project = shared / "project"
    project.mkdir()
    os.chown(project, 0, other.shared_gid)
    project.chmod(0o2775)
    logs = project / "logs"
    logs.mkdir()  # the victim's own, with umask 002: group-writable
    assert logs.stat().st_mode & 0o020 and logs.stat().st_gid == other.shared_gid
    daisy.logging.set_log_basedir(logs)
    scene = make_scene(tmp_path, shared, other, groups=(other.shared_gid,))
    task = line_task(
        TASK,
        BLOCKS,
        process_function=victim_function(calls, scene.secret),
        spawner=make_spawner("custom", hook_files, scene),
        max_workers=1,
        max_worker_restarts=1,
    )
    ok, error = run([task])
    scene.assert_attacker_code_never_ran()
    scene.assert_nothing_stolen()
    assert_refused_or_done(ok, error, logs, calls, scene)
    for rec in scene.records():
        assert rec.get("dir_mode", 0) & 0o022 == 0, (
            f"the payload's directory is {oct(rec.get('dir_mode', 0))}: the group can write it"
        )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_worker_logs_never_follow_a_symlink_another_user_planted(
    tmp_path: Path, shared: Path, other: Other, calls: Path, layout: str
) -> None:
    """Issue 26, defect 7: the attacker pre-creates the task's log directory
    and plants ``worker_0.out`` (and every other log name) as symlinks to
    the victim's ``~/.bashrc``; the worker appended its output there, so the
    victim's next shell ran what the attacker got printed. After the run the
    victim's file is unchanged: the run refused the directory (naming it) or
    wrote its logs without following the links."""
    base, task_dir = attacker_precreates(layout, shared, other, "logs")
    bashrc = shared / "home" / "victim" / ".bashrc"
    bashrc.write_text("# the victim's .bashrc\n")
    original = bashrc.read_bytes()

    def plant() -> None:
        for name in PLANTED_NAMES:
            (task_dir / name).symlink_to(bashrc)

    as_other(other, plant)
    daisy.logging.set_log_basedir(base)
    task = line_task(
        TASK,
        BLOCKS,
        process_function=victim_function(calls, "victim-secret-x"),
        max_workers=1,
        max_worker_restarts=1,
    )
    ok, error = run([task])
    appended = bashrc.read_bytes()[len(original) :].decode(errors="replace")
    worker_output = "worker output for block" in appended
    run_history = '"utilisation"' in appended
    assert bashrc.read_bytes() == original, (
        "the run's logs followed the attacker's symlinks into the victim's file "
        f"(worker output: {worker_output}, run history: {run_history}); it gained:\n"
        + appended[:1500]
    )
    # a clear failure naming the path (a log that would not open) will do
    assert_refused_or_done(ok, error, base, calls, up_front=False)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_tracking_lock_never_follows_a_symlink_another_user_planted(
    tmp_path: Path, shared: Path, other: Other, calls: Path, layout: str
) -> None:
    """Issue 26, defect 7: the team tracks its tasks in a shared tracking
    base directory; the attacker pre-creates the store directory of the
    victim's task there and plants ``daisy.lock`` as a symlink to a file of
    the victim's. Opening the lock truncated that file and wrote the
    holder's pid into it. The victim's file must stay unchanged and the run
    be refused, before any block, with an error naming the path."""
    base, store = attacker_precreates(layout, shared, other, "tracking")
    precious = shared / "home" / "victim" / "thesis.tex"
    precious.write_text("\\chapter{Three years of work}\n")
    original = precious.read_bytes()
    as_other(other, lambda: (store / "daisy.lock").symlink_to(precious))
    daisy.logging.set_log_basedir(tmp_path / "logs")
    daisy.set_tracking_basedir(base)
    task = line_task(
        TASK,
        BLOCKS,
        process_function=victim_function(calls, "victim-secret-x"),
        max_workers=1,
        max_worker_restarts=1,
    )
    ok, error = run([task])
    assert precious.read_bytes() == original, (
        f"daisy.lock followed the attacker's symlink: the victim's file now reads "
        f"{precious.read_text(errors='replace')!r}"
    )
    assert error is not None, f"the run used the attacker's store (ok={ok!r})"
    assert str(base) in str(error), f"the error does not name the store: {error}"
    assert not take_calls(calls), "blocks ran in a store another user controls"
