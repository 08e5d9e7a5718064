"""The dashboard and the metrics server are for the run's owner only
(issue 26, item 8): they listen on loopback unless ``DAISY_DASHBOARD_HOST``
says otherwise, answer only with the run's secret token (a 403 that reveals
nothing without it), and hold a bounded number of connections, each with a
deadline, so another user's flood of slow connections can neither read the
run's failures nor starve the run of descriptors.

The other user is a second real uid, ``daisy-other`` (created if missing;
these tests need root and skip without it), whose requests and connections
come from a process of its own running the system's Python.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from conftest import line_task, wait_until
from test_dashboard import Run as DashboardRun

import daisy

OTHER_USER = "daisy-other"

#: generous: only to catch hangs
DEADLINE = 120.0

#: the text of the run's failure the other user must never read
SECRET_FAILURE = "the failure text only the owner may read"


@pytest.fixture(scope="module")
def other_user() -> str:
    """``daisy-other``, created if missing; skips without root."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the other user is a second real uid (useradd daisy-other)")
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        if shutil.which("useradd") is None:
            pytest.skip("needs useradd to create the other user")
        subprocess.run(
            ["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", OTHER_USER],
            check=True,
            capture_output=True,
        )
    return OTHER_USER


def other_python() -> str:
    """A Python the other user may run (this one may live under root's
    home): the system's."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("needs a system python3 the other user can run")


def as_other(
    user: str, code: str, *args: str, timeout: float = DEADLINE, **popen: Any
) -> subprocess.Popen[str]:
    """``python3 -c code args...`` as ``user``, without root's groups."""
    return subprocess.Popen(
        [other_python(), "-c", code, *args],
        user=user,
        group=user,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen,
    )


#: run by the other user: GET each URL, print ``{url: [status, body]}``
FETCH = """
import json, sys, urllib.error, urllib.request
out = {}
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            out[url] = [r.status, r.read().decode("utf-8", "replace")]
    except urllib.error.HTTPError as e:
        out[url] = [e.code, e.read().decode("utf-8", "replace")]
    except OSError as e:
        out[url] = [None, repr(e)]
print(json.dumps(out))
"""


def fetch_as_other(user: str, *urls: str) -> dict[str, list[Any]]:
    proc = as_other(user, FETCH, *urls)
    out, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, err
    got: dict[str, list[Any]] = json.loads(out)
    return got


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, token: str | None = None) -> tuple[int, bytes]:
    """GET as the owner, with the token as a bearer header if given."""
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Run(DashboardRun):
    """``daisy.Server(host=...).run_blockwise`` on a thread."""

    def __init__(self, host: str | None = None, **kwargs: Any) -> None:
        self.server = daisy.Server(host=host)
        super().__init__(**kwargs)

    def call(self, **kwargs: Any) -> Any:
        return self.server.run_blockwise(progress=False, **kwargs)


class Printed:
    """What a run on a thread printed to stderr so far (``capsys``)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.err = ""

    def url(self, what: str, run: Run) -> str:
        """The URL in the run's ``daisy: <what> at URL`` line."""
        deadline = time.time() + DEADLINE
        while time.time() < deadline:
            self.err += self.capsys.readouterr().err
            m = re.search(rf"daisy: {what} at (http://\S+)", self.err)
            if m:
                return m.group(1)
            if not run.thread.is_alive():
                run.join()
                raise AssertionError(f"the run ended without printing its {what} URL")
            time.sleep(0.02)
        raise AssertionError(f"no {what} URL printed: {self.err!r}")


def token_of(url: str) -> str | None:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("token", [None])[0]


def origin_of(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def gated_block(b: daisy.Block, gate: str) -> None:
    """Block 0 fails with `SECRET_FAILURE` at once; every other block
    waits for ``gate`` to exist: the run goes on until the test lets it."""
    if b.block_id[1] == 0:
        raise RuntimeError(SECRET_FAILURE)
    deadline = time.time() + DEADLINE
    while not os.path.exists(gate) and time.time() < deadline:
        time.sleep(0.01)


def wait_for_failure(status_url: str, token: str | None, run: Run) -> dict[str, Any]:
    """The owner's ``/status.json`` once it lists block 0's failure."""
    deadline = time.time() + 30
    while time.time() < deadline and run.thread.is_alive():
        try:
            code, body = get(status_url, token)
        except (urllib.error.URLError, ConnectionError):
            code, body = 0, b""
        if code == 200:
            st: dict[str, Any] = json.loads(body)
            if st["failures"]["total"] >= 1:
                return st
        time.sleep(0.05)
    raise AssertionError("the owner's /status.json never showed the failure")


def assert_forbidden(answer: list[Any], what: str) -> None:
    code, body = answer
    assert code == 403, f"{what}: another user got {code}: {body[:300]!r}"
    assert SECRET_FAILURE not in body and "daisy_blocks" not in body, (what, body)
    assert len(body.strip().splitlines()) == 1, f"{what}: a one-line body, got {body!r}"


@pytest.mark.parametrize("shared", [False, True], ids=["metrics_apart", "metrics_shared"])
def test_another_user_gets_403_and_the_owner_with_the_token_gets_the_run(
    tmp_path, capsys, caplog, other_user, shared
):
    caplog.set_level(logging.DEBUG, logger="daisy")
    gate = tmp_path / "gate"
    dport = free_port()
    mport = dport if shared else free_port()
    task = line_task(
        "access",
        30,
        process_function=functools.partial(gated_block, gate=str(gate)),
        max_workers=2,
        max_retries=0,
    )
    run = Run(tasks=[task], dashboard_port=dport, metrics_port=mport)
    printed = Printed(capsys)
    try:
        url = printed.url("dashboard", run)
        token = token_of(url)
        base = origin_of(url)
        assert base == f"http://127.0.0.1:{dport}", url
        mbase = f"http://127.0.0.1:{mport}"
        st = wait_for_failure(f"{base}/status.json", token, run)
        assert st["failures"]["last"][0]["message"].endswith(SECRET_FAILURE)

        # the other user, without the token or with a guess: 403, nothing more
        guesses = [
            f"{base}/status.json",
            f"{base}/status.json?token=guess",
            f"{base}/",
            f"{base}/index.html",
            f"{base}/no/such/page",
            f"{mbase}/metrics",
            f"{mbase}/metrics?token=",
        ]
        answers = fetch_as_other(other_user, *guesses)
        for u in guesses:
            assert_forbidden(answers[u], u)

        # the owner, with the token
        assert token is not None, f"the printed URL carries the run's token: {url}"
        assert len(token) >= 16
        code, body = get(url)  # the printed URL itself: the page
        assert code == 200 and b"daisy: live run" in body
        code, body = get(f"{base}/status.json?token={urllib.parse.quote(token)}")
        assert code == 200 and SECRET_FAILURE.encode() in body
        code, body = get(f"{base}/status.json", token)  # the page's own fetches: a header
        assert code == 200 and json.loads(body)["schema"] == 1
        code, body = get(f"{mbase}/metrics", token)  # a Prometheus scraper: a bearer token
        assert code == 200 and b"daisy_blocks" in body
        code, body = get(f"{mbase}/metrics?token={urllib.parse.quote(token)}")
        assert code == 200 and b"daisy_blocks" in body
        assert get(f"{base}/status.json", "x" * len(token))[0] == 403
        if not shared:  # a metrics server of its own prints its address too
            assert printed.url("metrics", run) == f"{mbase}/metrics?token={token}"
    finally:
        gate.touch()
    states = run.join()
    assert states["access"].completed_count == 29 and states["access"].failed_count == 1
    printed.err += capsys.readouterr().err
    # the token is in the printed URL lines, and nowhere else
    lines = [line for line in printed.err.splitlines() if token in line]
    assert len(lines) == (1 if shared else 2), lines
    assert all(re.match(r"daisy: (dashboard|metrics) at http://", line) for line in lines), lines
    assert token not in caplog.text


def test_the_page_fetches_its_status_with_the_token():
    """The page polls ``status.json`` with the token it was opened with."""
    from daisy.dashboard import page_html

    page = page_html()
    assert "Authorization" in page and "token" in page


def non_loopback_addresses() -> list[str]:
    """The addresses of this machine other than loopback (``hostname -I``)."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [a for a in out.stdout.split() if not a.startswith("127.") and a != "::1"]


def listening(port: int) -> list[str]:
    """The local addresses listening on TCP ``port`` (``ss -ltn``)."""
    out = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True, timeout=10).stdout
    return [
        line.split()[3].rsplit(":", 1)[0]
        for line in out.splitlines()
        if line.split()[3].rsplit(":", 1)[1] == str(port)
    ]


def test_a_run_listening_everywhere_keeps_its_dashboard_on_loopback(tmp_path, capsys):
    """``host="0.0.0.0"`` (for remote workers) is the run's own server;
    the dashboard and the metrics stay on 127.0.0.1."""
    addresses = non_loopback_addresses()
    if not addresses and shutil.which("ss") is None:
        pytest.skip("needs an address of this machine other than loopback, or ss")
    gate = tmp_path / "gate"
    dport, mport = free_port(), free_port()
    task = line_task(
        "everywhere",
        10,
        process_function=functools.partial(gated_block, gate=str(gate)),
        max_workers=1,
        max_retries=0,
    )
    run = Run(host="0.0.0.0", tasks=[task], dashboard_port=dport, metrics_port=mport)
    printed = Printed(capsys)
    try:
        url = printed.url("dashboard", run)
        assert origin_of(url) == f"http://127.0.0.1:{dport}", url
        assert get(f"{origin_of(url)}/status.json", token_of(url))[0] == 200
        for port in (dport, mport):
            if shutil.which("ss") is not None:
                assert listening(port) == ["127.0.0.1"], (port, listening(port))
            for addr in addresses:  # this machine's own: never an outside one
                with pytest.raises(ConnectionRefusedError):
                    socket.create_connection((addr, port), timeout=5).close()
    finally:
        gate.touch()
    run.join()


def test_daisy_dashboard_host_opens_it_to_the_network_still_behind_the_token(
    tmp_path, capsys, monkeypatch
):
    addresses = [a for a in non_loopback_addresses() if ":" not in a]
    if not addresses:
        pytest.skip("needs an IPv4 address of this machine other than loopback")
    monkeypatch.setenv("DAISY_DASHBOARD_HOST", "0.0.0.0")
    gate = tmp_path / "gate"
    port = free_port()
    task = line_task(
        "opened",
        10,
        process_function=functools.partial(gated_block, gate=str(gate)),
        max_workers=1,
        max_retries=0,
    )
    run = Run(tasks=[task], dashboard_port=port)
    printed = Printed(capsys)
    try:
        url = printed.url("dashboard", run)
        token = token_of(url)
        assert not url.startswith("http://0.0.0.0"), "an address a browser can open"
        st = wait_for_failure(f"http://{addresses[0]}:{port}/status.json", token, run)
        assert st["schema"] == 1
        code, body = get(f"http://{addresses[0]}:{port}/status.json")
        assert code == 403 and SECRET_FAILURE.encode() not in body
    finally:
        gate.touch()
    run.join()


def test_a_token_given_in_the_environment_is_the_runs(tmp_path, capsys, monkeypatch):
    token = "a-token-the-user-chose-for-prometheus"
    monkeypatch.setenv("DAISY_DASHBOARD_TOKEN", token)
    gate = tmp_path / "gate"
    port = free_port()
    task = line_task(
        "chosen",
        4,
        process_function=functools.partial(gated_block, gate=str(gate)),
        max_workers=1,
        max_retries=0,
    )
    run = Run(tasks=[task], dashboard_port=port, metrics_port=port)
    printed = Printed(capsys)
    try:
        url = printed.url("dashboard", run)
        assert token_of(url) == token
        assert get(f"http://127.0.0.1:{port}/metrics", token)[0] == 200
        assert get(f"http://127.0.0.1:{port}/metrics")[0] == 403
    finally:
        gate.touch()
    run.join()
    monkeypatch.setenv("DAISY_DASHBOARD_TOKEN", "short")
    with pytest.raises(ValueError, match="DAISY_DASHBOARD_TOKEN"):
        daisy.run_blockwise([line_task("weak", 2)], progress=False, dashboard_port=free_port())


# --------------------------------------------------------------------------
# a flood of slow connections from another user


#: the driver: its descriptors capped as a login shell's usually are
#: (``ulimit -n`` 1024), a dashboard, one worker that dies once (SIGKILL)
#: when the test lets the blocks go, and room for two replacements
DRIVER = """
import json, os, resource, signal, sys, time

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
limit = min(soft, hard, 1024)
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
import daisy

gate, mark, logs, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
daisy.logging.set_log_basedir(logs)


def process(block):
    deadline = time.time() + 120
    while not os.path.exists(gate) and time.time() < deadline:
        time.sleep(0.02)
    try:
        open(mark, "x").close()
    except FileExistsError:
        time.sleep(0.01)
        return
    os.kill(os.getpid(), signal.SIGKILL)  # the first block kills its worker


print(json.dumps({"nofile": limit}), flush=True)
task = daisy.Task(
    "victim", daisy.Roi((0,), (200,)), daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)),
    process_function=process, max_workers=1, max_retries=2, max_worker_restarts=2,
)
server = daisy.Server()
states = server.run_blockwise([task], progress=False, dashboard_port=port)
s = states["victim"]
print(json.dumps({
    "total": s.total_block_count, "done": s.completed_count, "failed": s.failed_count,
    "orphaned": s.orphaned_count, "abandoned": [list(a) for a in server.abandoned],
}), flush=True)
"""

#: the other user's flood: ``n`` connections to the port, each sending one
#: byte a second, each reopened when the server closes it, for ``seconds``
ATTACK = """
import json, resource, socket, sys, time

port, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
end = time.monotonic() + seconds


def dial():
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    time.sleep(0.002)  # paced: a listen queue that overflows drops SYNs for a second
    return s


socks = [dial() for _ in range(n)]
print("ready", flush=True)
reopened = 0
while time.monotonic() < end:
    time.sleep(1.0)
    for i, s in enumerate(socks):
        try:
            if s.recv(4096) == b"":
                raise ConnectionResetError
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            socks[i] = dial()
            reopened += 1
            continue
        try:
            s.send(b"G")
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            socks[i] = dial()
            reopened += 1
print(json.dumps({"reopened": reopened}), flush=True)
"""

#: how long the flood lasts: less than the core's 60 s of trying to start
#: a worker before it abandons the task, so a run that could start one only
#: once the flood stopped still completes, late; the test asks that the run
#: completed while the flood was still going
ATTACK_SECONDS = 45.0


def test_a_flood_of_slow_connections_does_not_starve_the_run(tmp_path, other_user):
    gate, mark = tmp_path / "gate", tmp_path / "killed-once"
    port = free_port()
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(gate), str(mark), str(tmp_path / "logs"), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    err: list[str] = []
    assert driver.stderr is not None and driver.stdout is not None
    reader = threading.Thread(target=lambda: err.extend(driver.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    attacker: subprocess.Popen[str] | None = None
    try:
        nofile = json.loads(driver.stdout.readline())["nofile"]
        deadline = time.time() + DEADLINE
        while not any("daisy: dashboard at" in line for line in err):
            assert driver.poll() is None, "".join(err)
            assert time.time() < deadline, "no dashboard URL printed"
            time.sleep(0.02)
        # more connections than the driver has descriptors
        n = max(1100, nofile + 100)
        attacker = as_other(other_user, ATTACK, str(port), str(n), str(ATTACK_SECONDS))
        assert attacker.stdout is not None
        assert attacker.stdout.readline().strip() == "ready", attacker.communicate()
        time.sleep(2.0)  # the flood is on
        gate.touch()  # the blocks go, and the first kills its worker
        try:
            out, _ = driver.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail("the driver did not finish")
        flood_on = attacker.poll() is None
    finally:
        if attacker is not None and attacker.poll() is None:
            attacker.kill()
        if attacker is not None:
            attacker.communicate()
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    reader.join(10)
    assert mark.exists(), "a worker was killed"
    assert driver.returncode == 0, "".join(err)
    result = json.loads(out.splitlines()[-1])
    assert result["abandoned"] == [], "".join(err)
    assert result["done"] == result["total"] == 20, (result, "".join(err)[-3000:])
    assert flood_on, (
        "the run's replacement worker had to wait for the flood to end: " + "".join(err)[-3000:]
    )


# --------------------------------------------------------------------------
# the cap and the deadline, on a dashboard of its own


def recv_all(s: socket.socket) -> bytes:
    """What came back until the server closed (or the socket's timeout)."""
    chunks = []
    try:
        while chunk := s.recv(65536):
            chunks.append(chunk)
    except (ConnectionResetError, BrokenPipeError, TimeoutError):
        pass
    return b"".join(chunks)


def test_connections_past_the_cap_are_closed_at_once(monkeypatch):
    import daisy.dashboard as dash_module

    # held connections are not dropped for their deadline while the test goes
    monkeypatch.setattr(dash_module, "REQUEST_SECONDS", 60.0, raising=False)
    cap = getattr(dash_module, "MAX_CONNECTIONS", 32)
    dash = dash_module.Dashboard(0, ["t"])
    token = getattr(dash, "token", "")
    request = f"GET /status.json HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    held = [socket.create_connection(("127.0.0.1", dash.port), timeout=10) for _ in range(cap)]
    try:
        open_now = dash._server._server._open
        wait_until(lambda: len(open_now) == cap, f"all {cap} held connections accepted")
        with socket.create_connection(("127.0.0.1", dash.port), timeout=10) as extra:
            try:
                extra.sendall(request.encode())
            except (BrokenPipeError, ConnectionResetError):
                pass
            answer = recv_all(extra)
        assert not answer.startswith(b"HTTP/1.1 200"), "a connection past the cap was served"
        assert answer == b"" or answer.startswith(b"HTTP/1.1 503"), answer
        # a held connection is still served, and one freed slot takes a new one
        held[0].sendall(request.encode())
        assert held[0].recv(65536).startswith(b"HTTP/1.1 200")
        held.pop(0).close()
        wait_until(lambda: len(open_now) == cap - 1, "the closed connection's slot freed")
        with socket.create_connection(("127.0.0.1", dash.port), timeout=10) as again:
            again.sendall(request.encode())
            assert again.recv(65536).startswith(b"HTTP/1.1 200")
    finally:
        for s in held:
            s.close()
        dash.close()


#: a request whose headers never end is dropped after the deadline (5 s by
#: default); this only catches a server that never drops it
HANG = 40.0


def test_a_request_that_never_ends_its_headers_is_dropped():
    from daisy.dashboard import Dashboard

    dash = Dashboard(0, ["t"])
    token = getattr(dash, "token", "")
    try:
        with socket.create_connection(("127.0.0.1", dash.port), timeout=10) as s:
            s.sendall(f"GET /status.json?token={token} HTTP/1.1\r\nHost: x\r\n".encode())
            s.settimeout(0.5)
            dropped = False
            deadline = time.monotonic() + HANG
            i = 0
            while time.monotonic() < deadline:
                try:
                    s.sendall(b"X-Slow-%d: 1\r\n" % i)  # one header line at a time, never the end
                    i += 1
                    if s.recv(65536) == b"":
                        dropped = True
                        break
                except TimeoutError:
                    continue
                except OSError:
                    dropped = True
                    break
                dropped = True  # it answered (a 400 or 408) and will close
                break
        assert dropped, f"a request still sending headers after {HANG} s was never dropped"
        # and the dashboard still serves
        code, body = get(f"http://127.0.0.1:{dash.port}/status.json", token)
        assert code == 200
    finally:
        dash.close()


def test_a_connection_that_sends_nothing_is_dropped():
    from daisy.dashboard import Dashboard

    dash = Dashboard(0, ["t"])
    try:
        with socket.create_connection(("127.0.0.1", dash.port), timeout=HANG) as s:
            try:
                assert s.recv(65536) == b""
            except ConnectionResetError:
                pass
            except TimeoutError:
                pytest.fail(f"a connection that sent nothing for {HANG} s was never dropped")
    finally:
        dash.close()


def test_the_metrics_server_of_its_own_is_guarded_too():
    from daisy.metrics import PrometheusMetrics

    port = free_port()
    metrics = PrometheusMetrics(port, ["a"])
    token = getattr(metrics, "token", "")
    try:
        assert get(f"http://127.0.0.1:{port}/metrics")[0] == 403
        code, body = get(f"http://127.0.0.1:{port}/metrics", token)
        assert code == 200 and b"# TYPE daisy_blocks gauge" in body
        assert getattr(metrics, "url", "").endswith(f"/metrics?token={token}")
    finally:
        metrics.close()
