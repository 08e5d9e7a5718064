"""Another host for the tests, for real: a Linux network namespace joined
to this one by a veth pair, with its own addresses, its own TCP stack
and its own firewall.

A process started inside it (`NetnsHost.popen`) reaches this machine only
over TCP to `NetnsHost.root_addr` (abstract Unix sockets are per network
namespace, so a daisy client in there cannot take the run's local
socket). `NetnsHost.cut` drops every packet into and out of the
namespace, as a power loss or a network partition does: a process in
there that then dies sends nothing out, not even the FIN or RST its
kernel writes, and nothing this side sends reaches it. `NetnsHost.heal`
lifts the cut.

Only the namespace and the veth pair made here are touched: one private
/30 from 10.231.0.0/16 per host, nothing outside loopback and it. Needs
root and ``ip`` (iproute2), ``iptables`` and ``ss``; `other_host` skips
the test where the namespace cannot be made.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

_COUNTER = itertools.count()

#: the /16 the /30s are taken from (a private range no test machine routes)
_NET = "10.231"


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command; a failure raises with its output when ``check``."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip() or done.stdout}"
        )
    return done


def _addresses_in_use() -> set[str]:
    """The third and fourth octets of every 10.231.x.y address on this
    machine's interfaces (so two test processes do not take one /30)."""
    out = _sh("ip", "-o", "-4", "addr", "show", check=False).stdout
    used = set()
    for line in out.splitlines():
        for word in line.split():
            if word.startswith(_NET + "."):
                used.add(word.split("/")[0])
    return used


class NetnsHost:
    """One namespace ``name`` (``daisy-t-<pid>-<n>``) with ``eth0`` at
    `addr`, joined to this namespace's `link` at `root_addr` (a /30)."""

    def __init__(self, n: int, subnet: int) -> None:
        pid = os.getpid()
        self.name = f"daisy-t-{pid}-{n}"
        # interface names are at most 15 bytes
        self.link = f"dt{pid % 10**7}n{n % 1000}"
        third, fourth = divmod(subnet * 4, 256)
        self.root_addr = f"{_NET}.{third}.{fourth + 1}"
        self.addr = f"{_NET}.{third}.{fourth + 2}"
        self.is_cut = False
        #: what `popen` started, killed by `destroy` if still running
        self.processes: list[subprocess.Popen[Any]] = []

    # -- life cycle

    def create(self) -> None:
        """Make the veth pair (the namespace exists) and the addresses;
        links up."""
        _sh(
            "ip",
            "link",
            "add",
            self.link,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            self.name,
        )
        _sh("ip", "addr", "add", f"{self.root_addr}/30", "dev", self.link)
        _sh("ip", "link", "set", self.link, "up")
        self.exec("ip", "addr", "add", f"{self.addr}/30", "dev", "eth0")
        self.exec("ip", "link", "set", "eth0", "up")
        self.exec("ip", "link", "set", "lo", "up")

    def destroy(self) -> None:
        """Remove the veth pair (both ends) and the namespace; quiet about
        what is already gone. (``ip netns del`` alone frees the pair only
        later, asynchronously: the link goes first, explicitly.) Processes
        `popen` started that still run are killed first."""
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        _sh("ip", "link", "del", self.link, check=False)
        _sh("ip", "netns", "del", self.name, check=False)

    # -- inside the namespace

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` execs it,
        so the process started is the command itself, same pid)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def exec(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a short command inside the namespace and wait for it."""
        return _sh(*self.argv(argv), check=check)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the namespace (`subprocess.Popen` keywords
        pass through); its pid is the command's own. `destroy` kills it
        if it still runs then."""
        proc = subprocess.Popen(self.argv(argv), **kwargs)
        self.processes.append(proc)
        return proc

    # -- the network between here and there

    def cut(self) -> None:
        """Drop every packet into and out of the namespace (its own
        firewall, so what a process in there sends as it dies is dropped
        before it leaves)."""
        self.exec("iptables", "-w", "-A", "INPUT", "-j", "DROP")
        self.exec("iptables", "-w", "-A", "OUTPUT", "-j", "DROP")
        self.is_cut = True

    def heal(self) -> None:
        """Lift `cut`: the namespace's INPUT and OUTPUT rules are flushed."""
        self.exec("iptables", "-w", "-F", "INPUT")
        self.exec("iptables", "-w", "-F", "OUTPUT")
        self.is_cut = False

    def root_connections(self) -> list[str]:
        """This namespace's TCP sockets whose peer is inside (``ss`` lines)."""
        out = _sh("ss", "-H", "-t", "-n", "-a", "dst", self.addr).stdout
        return [line for line in out.splitlines() if line.strip()]

    def forget_root_connections(self) -> list[str]:
        """Destroy this namespace's TCP sockets to the namespace (``ss -K``),
        as this side's kernel does by itself once it has given up
        retransmitting to a peer it cannot reach (a FIN left unanswered:
        about 100 s; data: about 15 min) or as a reboot does. What this
        side sends as they go (an RST) is dropped if the host is cut.
        Returns the sockets that were there; RuntimeError if some survive
        (a kernel without ``CONFIG_INET_DIAG_DESTROY``)."""
        before = self.root_connections()
        _sh("ss", "-K", "-t", "-n", "-a", "dst", self.addr, check=False)
        # (a TIME-WAIT socket is no connection: it cannot be destroyed, and
        # need not be)
        left = [line for line in self.root_connections() if not line.startswith("TIME-WAIT")]
        if left:
            raise RuntimeError(f"ss -K could not destroy these sockets: {left}")
        return before


def _can_make_namespaces() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth links and iptables)"
    for tool in ("ip", "iptables", "ss"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (apt-get install -y iproute2 iptables)"
    return None


@contextmanager
def other_host() -> Iterator[NetnsHost]:
    """A fresh `NetnsHost`, removed afterwards however the test ends.
    Skips the test when not root or when ``ip netns add`` fails."""
    why = _can_make_namespaces()
    if why is not None:
        pytest.skip(why)
    n = next(_COUNTER)
    used = _addresses_in_use()
    host = None
    for k in range(16384):
        subnet = (os.getpid() * 7 + n * 131 + k) % 16384
        candidate = NetnsHost(n, subnet)
        if candidate.root_addr not in used and candidate.addr not in used:
            host = candidate
            break
    if host is None:
        pytest.skip(f"no free /30 in {_NET}.0.0/16")
    made = _sh("ip", "netns", "add", host.name, check=False)
    if made.returncode != 0:
        pytest.skip(f"ip netns add failed: {made.stderr.strip()}")
    try:
        host.create()
        yield host
    finally:
        host.destroy()


@pytest.fixture
def netns_host() -> Iterator[NetnsHost]:
    """Another host (a network namespace) for one test; see `other_host`."""
    with other_host() as host:
        yield host
