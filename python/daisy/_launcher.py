"""Entry point of a task's launcher: ``python -m daisy._launcher``.

Warm starts. The server starts one launcher per task (a fresh interpreter,
never a fork of the driver) with the task's payload on stdin and one end
of a Unix socket in ``DAISY_LAUNCHER_FD``. The launcher loads the function
once, so that its module, what that module imports at its top level and
the data the function captured are in memory, and then forks one worker
per request: the child inherits all of it (copy-on-write) and goes
straight to asking for blocks.

Beyond loading the function, it imports what the function's body imports
before its first branch (``from funlib.persistence import open_ds`` at the
top of the function): every call runs those imports, so running them once
here, before the first block, changes no behaviour and spares each worker
its slowest block (see `unconditional_imports`). An import on a branch the
function may never take (``if ...: import x``) is left to the worker, when
and if the function runs it, as in a cold worker: the launcher once
imported every module named in the body, on branches never taken too, and
a module's side effects ran where no cold worker ran them.

Conversation (JSON lines; the server's requests carry the worker's stdout
and stderr as two descriptors, ``SCM_RIGHTS``):

- launcher: ``{"event": "ready"}`` once loaded, or ``{"event": "cold",
  "reason": ...}`` when it cannot fork (the function did not load, or a
  Python thread is running), after which it leaves and the server starts
  that task's workers cold;
- server: ``{"worker_id": N, "context": "<DAISY_CONTEXT>"}``;
- launcher: ``{"event": "forked", "worker_id": N, "pid": P}`` and, when
  the worker ends, ``{"event": "exited", "worker_id": N, "status": S}``
  (the raw wait status).

Forking is only safe without other threads: one holding a lock (the import
lock, a logging handler's, an event loop's) at the fork leaves it locked
forever in the child. Before every fork the launcher checks that the
interpreter runs no thread but its own; where one runs, it goes cold and
says which. Threads that the native pools of numerical libraries start
(OpenBLAS, Blosc) do not count: they sleep between calls and these
libraries rebuild their pools in a forked child (tested with numpy,
blosc2, zarr and dask in ``tests/test_warm_start.py``).

**A job's node launcher** (``python -m daisy._launcher --job --payload
FILE``, run inside a batch job that hosts several workers, see
``SlurmSpawner(workers_per_job=...)``) talks the same conversation over a
TCP connection it opens to the server, which it starts with a framed
``LauncherHello`` (the run token and the job's number from
``DAISY_JOB_CONTEXT``, and ``SLURM_JOB_ID``). No descriptors travel: it
opens each worker's log files itself, on the shared file system. The
server may also ask ``{"kill": N}``: it cannot signal a process on this
node. Where forking is unsafe it does not leave: it starts each worker as
a fresh interpreter (``daisy._worker``) and says ``"cold": true`` with
``forked``. When the connection ends it kills what is left of its workers
and leaves, and the job ends with it.

After the fork the child takes its own process group, dies with the
launcher (which dies with the driver), points its stdout and stderr at the
descriptors it was sent, reseeds numpy's global random generator (a cold
worker gets a fresh seed; forked ones would otherwise share one), and runs
the function exactly as ``daisy._worker`` does, leaving the same way.
"""

from __future__ import annotations

import io
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from daisy import _worker
from daisy.context import Context

#: environment variable holding the number of the launcher's socket
FD_VARIABLE = "DAISY_LAUNCHER_FD"

#: environment variable holding a job launcher's context (the core's
#: ``supervision::JOB_CONTEXT_VARIABLE``)
JOB_CONTEXT_VARIABLE = "DAISY_JOB_CONTEXT"

#: a request is a short line; anything longer is not from our server
MAX_REQUEST_BYTES = 1 << 20


def die_with_parent() -> None:
    """Be killed, with everything this worker starts, when the launcher
    dies, however it dies (as cold workers die with the driver); leave now
    if it already has (`daisy._daisy.group_dies_with_parent`)."""
    from daisy._daisy import group_dies_with_parent

    group_dies_with_parent()


def other_threads() -> list[str]:
    """Names of the interpreter's threads other than this one (threads of
    the `threading` module and any other Python thread state)."""
    names = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    unnamed = len(sys._current_frames()) - 1 - len(names)
    names += ["(a thread not started by the threading module)"] * max(unnamed, 0)
    return names


def cuda_initialised() -> bool:
    """Whether this process initialised CUDA: the driver library
    (``libcuda.so``) is mapped once the CUDA runtime was first used, e.g. by
    ``torch.cuda.is_available()`` or a CuPy array at a module's top level.
    A forked child of such a process cannot use the GPU (PyTorch: "Cannot
    re-initialize CUDA in forked subprocess"); importing torch or CuPy
    alone does not map it."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libcuda.so" in line for line in maps)
    except OSError:
        return False


def fork_unsafe_reason() -> str | None:
    """Why forking now would be unsafe (a running Python thread, or CUDA
    initialised while the function loaded), or None."""
    if cuda_initialised():
        return (
            "loading the task's function initialised CUDA in the launcher (libcuda.so is "
            "loaded: a module used the GPU at import, e.g. torch.cuda.is_available()); a "
            "forked worker could not use the GPU, so each worker starts as a fresh "
            "interpreter"
        )
    names = other_threads()
    if not names:
        return None
    return (
        f"the launcher runs {len(names)} other Python thread(s) ({', '.join(names)}), "
        "started while loading the task's function; forking could leave a lock held "
        "forever in the worker"
    )


def say(sock: socket.socket, **message: Any) -> None:
    """Send one JSON line to the server."""
    sock.sendall(json.dumps(message).encode() + b"\n")


class Launcher:
    """One task's launcher: the loaded function and the conversation with
    the server."""

    def __init__(self, sock: socket.socket, function: Any, post_check: Any) -> None:
        self.sock = sock
        self.function = function
        self.post_check = post_check
        self.selector = selectors.DefaultSelector()
        #: pid and pidfd per worker id
        self.children: dict[int, tuple[int, int]] = {}
        self.buffer = b""
        self.fds: list[int] = []

    def say(self, **message: Any) -> None:
        """Send one line to the server."""
        say(self.sock, **message)

    def serve(self) -> None:
        """Answer requests until the server closes the socket."""
        self.selector.register(self.sock, selectors.EVENT_READ, None)
        while True:
            for key, _ in self.selector.select():
                if key.data is None:
                    if not self.read_requests():
                        return
                else:
                    self.reap(key.data)

    def read_requests(self) -> bool:
        """Read what the server sent and act on whole lines; False at the
        end of the conversation."""
        data, fds, _flags, _addr = socket.recv_fds(self.sock, 65536, 16)
        self.fds.extend(fds)
        if not data:
            return False
        for request in self.whole_lines(data):
            if len(self.fds) < 2:
                raise ValueError("a request came without its two descriptors")
            out, err = self.fds[:2]
            del self.fds[:2]
            try:
                if not self.fork(int(request["worker_id"]), str(request["context"]), out, err):
                    return False
            finally:
                os.close(out)
                os.close(err)
        return True

    def whole_lines(self, data: bytes) -> list[dict[str, Any]]:
        """The requests completed by ``data`` (the rest is kept for the
        next read)."""
        self.buffer += data
        if len(self.buffer) > MAX_REQUEST_BYTES:
            raise ValueError("the server sent an overlong request")
        requests = []
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            requests.append(json.loads(line))
        return requests

    def fork(self, worker_id: int, context: str, out: int, err: int) -> bool:
        """Fork worker ``worker_id``; False (after saying why) where forking
        is no longer safe."""
        reason = fork_unsafe_reason()
        if reason is not None:
            self.say(event="cold", reason=reason)
            return False
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            try:
                self.leave_to_child(out, err)
            except BaseException:
                traceback.print_exc()
                os._exit(1)  # the launcher's code must never go on in a child
            raise ForkedWorker(ChildWorker(self.function, self.post_check, context))
        handle = os.pidfd_open(pid)  # checked to work before "ready"
        self.children[worker_id] = (pid, handle)
        self.selector.register(handle, selectors.EVENT_READ, worker_id)
        self.say(event="forked", worker_id=worker_id, pid=pid)
        return True

    def reap(self, worker_id: int) -> None:
        """A worker ended: wait for it and tell the server."""
        pid, handle = self.children.pop(worker_id)
        self.selector.unregister(handle)
        os.close(handle)
        _, status = os.waitpid(pid, 0)
        self.say(event="exited", worker_id=worker_id, status=status)

    def leave_to_child(self, out: int, err: int) -> None:
        """In the forked child: let go of everything that is the
        launcher's (its selector, its socket, its siblings' handles, so
        that unwinding its frames kills and closes nothing of theirs),
        take a process group of its own, die with the launcher, and point
        stdout and stderr at the worker's logs (``out`` and ``err`` are
        closed by the caller's ``finally``, as in the launcher)."""
        self.selector.close()
        self.sock.close()
        for _pid, handle in self.children.values():
            os.close(handle)
        self.children.clear()
        os.setpgid(0, 0)
        die_with_parent()
        os.dup2(out, 1)
        os.dup2(err, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=stream.isatty())


class ChildWorker:
    """What a forked child is to run once it has left the launcher's
    frames: the loaded function and the worker's context."""

    def __init__(self, function: Any, post_check: Any, context: str) -> None:
        self.function = function
        self.post_check = post_check
        self.context = context

    def run(self) -> NoReturn:
        """Become the worker: run the function exactly as ``daisy._worker``
        does, then leave the interpreter's ordinary way (`_worker.leave`):
        ``atexit`` handlers, non-daemon threads and the files the
        function kept open are the child's own, as in a cold worker."""
        code = 1
        # Only this frame may hold the function: when the interpreter
        # finalises, a module dies before its dictionary is cleared, and a
        # dictionary still reachable then (through a function that
        # ``__main__`` keeps) is never cleared nor collected, so the files
        # the module's globals kept open would never be flushed. A cold
        # worker holds its function in a frame too (`_worker.run_payload`).
        function, post_check = self.function, self.post_check
        self.function = self.post_check = None
        try:
            os.environ[Context.ENV_VARIABLE] = self.context
            numpy = sys.modules.get("numpy")
            if numpy is not None:
                numpy.random.seed()
            _worker.run_function(function, post_check)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
        del function, post_check
        _worker.leave(code)


class ForkedWorker(BaseException):
    """Raised in a child right after the fork: it unwinds the launcher's
    frames (their ``finally`` clauses close only the child's copies of the
    request's descriptors) up to ``__main__``, which runs the worker at
    the top of the stack, where its ordinary exit unwinds no launcher
    code. A BaseException, so that no ``except Exception`` of the
    launcher's takes it for an error."""

    def __init__(self, worker: ChildWorker) -> None:
        super().__init__("a forked worker leaving the launcher's frames")
        self.worker = worker


class JobLauncher(Launcher):
    """A job's node launcher: the conversation over TCP, no descriptors
    (it opens its workers' log files), kills on request, and fresh
    interpreters instead of forks where forking is unsafe."""

    def __init__(
        self,
        sock: socket.socket,
        function: Any,
        post_check: Any,
        job_context: dict[str, Any],
        payload_path: str,
        cold_reason: str | None,
    ) -> None:
        super().__init__(sock, function, post_check)
        self.job_context = job_context
        self.payload_path = payload_path
        #: why workers start as fresh interpreters here (None: forked)
        self.cold_reason = cold_reason
        #: the fresh interpreters started, by worker id
        self.started: dict[int, subprocess.Popen[bytes]] = {}

    def read_requests(self) -> bool:
        """Read what the server sent and act on whole lines; False at the
        end of the conversation."""
        try:
            data = self.sock.recv(65536)
        except OSError:
            return False  # the driver's host went away (liveness)
        if not data:
            return False
        for request in self.whole_lines(data):
            if "kill" in request:
                self.kill(int(request["kill"]))
                continue
            worker_id = int(request["worker_id"])
            out, err = self.outputs(worker_id)
            try:
                if self.cold_reason is None:
                    if not self.fork(worker_id, str(request["context"]), out, err):
                        return False
                else:
                    self.start_cold(worker_id, str(request["context"]), out, err)
            finally:
                for fd in (out, err):
                    if fd > 2:
                        os.close(fd)
        return True

    def outputs(self, worker_id: int) -> tuple[int, int]:
        """The worker's stdout and stderr: its log files in the task's log
        directory (appended, private, never through a link), or this
        launcher's own (the job's output) without one."""
        log_dir = self.job_context.get("log_dir")
        if not log_dir:
            return os.dup(1), os.dup(2)
        task_dir = os.path.join(log_dir, str(self.job_context["task_id"]))
        stem = f"worker_{worker_id}"
        header = (
            f"--- daisy: {stem} of task {self.job_context['task_id']} started "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} (job "
            f"{os.environ.get('SLURM_JOB_ID', self.job_context['job'])} on "
            f"{socket.gethostname()}) ---\n"
        ).encode()
        fds = []
        for suffix in ("out", "err"):
            fd = os.open(
                os.path.join(task_dir, f"{stem}.{suffix}"),
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
            os.write(fd, header)
            fds.append(fd)
        return fds[0], fds[1]

    def start_cold(self, worker_id: int, context: str, out: int, err: int) -> None:
        """Start worker ``worker_id`` as a fresh interpreter in this job."""
        env = dict(os.environ, **{Context.ENV_VARIABLE: context})
        child = subprocess.Popen(
            [sys.executable, "-m", "daisy._worker", "--payload", self.payload_path],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env,
            start_new_session=True,
        )
        handle = os.pidfd_open(child.pid)
        # kept, so that the Popen object never reaps it behind our back
        self.started[worker_id] = child
        self.children[worker_id] = (child.pid, handle)
        self.selector.register(handle, selectors.EVENT_READ, worker_id)
        self.say(event="forked", worker_id=worker_id, pid=child.pid, cold=True)

    def kill(self, worker_id: int) -> None:
        """Kill worker ``worker_id`` and what it started (its end is
        reported when it is reaped)."""
        child = self.children.get(worker_id)
        if child is not None:
            try:
                os.killpg(child[0], signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill_all(self) -> None:
        """The conversation ended: no worker outlives it."""
        for worker_id in list(self.children):
            self.kill(worker_id)


def connect_job(job_context: dict[str, Any]) -> socket.socket:
    """Open the job's connection to the server and say hello."""
    from daisy._daisy import launcher_hello, watch_liveness

    sock = socket.create_connection((job_context["hostname"], int(job_context["port"])))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    watch_liveness(sock.fileno(), float(job_context["liveness_timeout"]))
    sock.sendall(
        launcher_hello(
            str(job_context["token"]), int(job_context["job"]), os.environ.get("SLURM_JOB_ID")
        )
    )
    return sock


def _why_not_fork() -> str | None:
    """Why this launcher must start its workers as fresh interpreters
    (the loaded function left threads, or this system cannot watch forked
    children with a pidfd), or None where forking is safe."""
    reason = fork_unsafe_reason()
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError) as e:
        reason = f"this system cannot watch forked workers (pidfd_open: {e})"
    return reason


def unconditional_imports(function: Any) -> list[tuple[str, tuple[str, ...]]]:
    """The absolute imports ``(module, names imported from it)`` that the
    body of `function` (or of the function a `functools.partial` wraps)
    runs on every call: those before its first branch, jump target or
    return, read from its bytecode. Relative imports are left out."""
    import dis
    import functools

    while isinstance(function, functools.partial):
        function = function.func
    code = getattr(function, "__code__", None)
    if code is None:
        return []
    jumps = set(getattr(dis, "hasjump", [*dis.hasjrel, *dis.hasjabs]))
    ends = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"}
    found: list[tuple[str, tuple[str, ...]]] = []
    consts: list[Any] = []
    for ins in dis.get_instructions(code):
        if ins.opcode in jumps or ins.opname in ends:
            break
        if getattr(ins, "is_jump_target", False) and ins.offset > 0:
            break
        if ins.opname == "LOAD_CONST":
            consts.append(ins.argval)
            continue
        if ins.opname == "IMPORT_NAME" and len(consts) >= 2 and consts[-2] == 0:
            fromlist = consts[-1] or ()
            found.append((str(ins.argval), tuple(str(n) for n in fromlist)))
        consts = []
    return found


def preload(function: Any) -> None:
    """Run the imports `function` runs on every call (see
    `unconditional_imports`), as its statements would: the module, then
    each name imported from it that is a submodule. One that fails is left
    to the worker, whose block then fails with the same error and its
    traceback."""
    import importlib

    for name, fromlist in unconditional_imports(function):
        try:
            module = importlib.import_module(name)
            for item in fromlist:
                if item != "*" and not hasattr(module, item):
                    importlib.import_module(f"{name}.{item}")
        except Exception:  # noqa: BLE001  (the worker meets it, with its traceback)
            continue


def _load_or_say_cold(
    sock: socket.socket, where: str, read: Callable[[], bytes]
) -> tuple[Any, Any] | None:
    """The task's ``(function, post_check)`` from the payload `read`
    gives; where it does not load, its traceback on stderr, the server
    told to start this task's workers cold (they will say why), and None.
    The payload's bytes are not kept."""
    try:
        return _worker.load_payload(read())
    except BaseException as e:
        traceback.print_exc()
        failed = f"the task's function did not load in {where}: {type(e).__name__}: {e}"
        say(sock, event="cold", reason=failed)
        return None


def main_job(payload_path: str) -> int:
    """A job's node launcher: connect, load the payload file (checked
    against its digest), then serve the server's requests."""
    from daisy._daisy import read_payload

    _worker.log_daisy_messages()
    job_context = json.loads(os.environ.pop(JOB_CONTEXT_VARIABLE))
    sock = connect_job(job_context)
    loaded = _load_or_say_cold(
        sock,
        "the job's launcher",
        lambda: read_payload(payload_path, str(job_context["payload_sha256"])),
    )
    if loaded is None:
        return 1
    function, post_check = loaded
    preload(function)
    reason = _why_not_fork()
    if reason is not None:
        print(
            f"daisy job launcher: starting workers as fresh interpreters: {reason}", file=sys.stderr
        )
    launcher = JobLauncher(sock, function, post_check, job_context, payload_path, reason)
    launcher.say(event="ready")
    try:
        launcher.serve()
    finally:
        launcher.kill_all()
    return 0


def main() -> int:
    """Load the payload from stdin, then serve fork requests."""
    _worker.log_daisy_messages()
    sock = socket.socket(fileno=int(os.environ.pop(FD_VARIABLE)))
    loaded = _load_or_say_cold(sock, "the launcher", sys.stdin.buffer.read)
    if loaded is None:
        return 0
    function, post_check = loaded
    preload(function)
    launcher = Launcher(sock, function, post_check)
    reason = _why_not_fork()
    if reason is not None:
        launcher.say(event="cold", reason=reason)
        return 0
    launcher.say(event="ready")
    launcher.serve()
    return 0


def run_launcher(argv: list[str]) -> int | ChildWorker:
    """Serve as a task's or a job's launcher; in a forked child, the
    worker it is to become (the launcher's frames already left)."""
    try:
        if len(argv) == 3 and argv[0:2] == ["--job", "--payload"]:
            return main_job(argv[2])
        return main()
    except ForkedWorker as forked:
        return forked.worker


if __name__ == "__main__":
    outcome = run_launcher(sys.argv[1:])
    if isinstance(outcome, ChildWorker):
        outcome.run()  # a forked worker: leaves the ordinary way
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    # The launcher itself leaves without the interpreter's finalisation, as
    # it did no work of the run: what loading the function left in its
    # memory (a line a module wrote into a file buffer at import, say) is
    # every forked worker's, and each writes it at its own exit, as each
    # cold worker would; a finalising launcher would write one copy more.
    # It runs no at_worker_exit hook: it is no worker.
    os._exit(outcome)
