"""H "hosts" on one Linux machine, made of namespaces, for multi-host tests and benchmarks.

A host here is what a distributed job can tell apart from another machine:

- its own network namespace, with ``lo`` and one interface (``eth0``, address 10.77.0.<i+1>/24)
  whose other end is plugged into a bridge; the bridge lives in a dedicated "switch" network
  namespace, so the machine's own network namespace is never touched;
- its own mount namespace, with a fresh tmpfs on ``/dev/shm`` (so shared memory cannot cross
  hosts) and an ``/etc/hosts`` naming every host, the only source of host names in it (no DNS
  server is reachable from a host);
- its own UTS namespace, i.e. its own hostname (``host0``, ``host1``, ...).
- CPUs of its own where the machine has one per host (an equal, disjoint share of the usable
  CPUs, set with taskset on every process of the host), since separate machines do not take
  each other's CPUs: two hosts of two ranks on a 2-core machine then run each on a core of its
  own, rather than four processes contending for both cores (``own_cpus=False``: shared).

All processes of a host share these namespaces: one long-lived *holder* process per host is
created inside them, and every later process of that host enters the holder's namespaces with
``nsenter``. The pid namespace and the kernel stay shared, as on any one machine; the host's
``/dev/shm`` is what tells a backend that two ranks are on different hosts.

Only names that live in machine-wide spaces (the network namespaces, ``ip netns list``) carry a
per-harness prefix (pid + counter), so harnesses can coexist; interface names, addresses and
hostnames live inside the harness's own namespaces and are the same in every harness.

Links can be shaped with ``tc tbf`` (netem is missing from some kernels, tbf is everywhere):
each host's egress and the switch port toward the host are limited to ``rate``, so a host
neither sends nor receives faster than its "NIC", however many peers it talks to.

torchrun works across the hosts with a static rendezvous (``--master-addr`` = host 0), including
a different ``--nproc-per-node`` per host (torch assigns global ranks node by node, so a host's
ranks are always contiguous); ``launch_ranks`` starts one process per rank for other layouts.

Everything is removed on ``close()``, on leaving the ``with`` block (also by an exception), on
SIGTERM/SIGHUP/SIGINT and at interpreter exit; a harness whose Python process was SIGKILLed has
its leftovers removed by the next harness created on the machine.

Command line (see ``--help``)::

    python tools/namespaced_hosts.py --hosts 2 --nproc-per-host 2 -- script.py
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import glob
import itertools
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, TextIO

SUBNET = "10.77.0"  # /24, inside the harness's own namespaces only
IFNAME = "eth0"  # each host's interface (the name is private to the host's netns)
MAX_HOSTS = 253
TOOLS = ("ip", "unshare", "nsenter", "tc", "mount", "taskset")

# tbf burst: about 1 ms worth of bytes at the rate, so that a message of 1 MiB or even 100 KiB
# cannot beat the link rate by riding the bucket (a 125 KB burst let 100 KB cross a "100mbit"
# link in 0.35 ms instead of 8 ms). It must still hold a whole frame: tbf drops a packet larger
# than the bucket, and tc accepts such a burst without a word (burst 1k stalled TCP for good
# on this machine's veths), hence a floor of two full Ethernet frames.
_FRAME_BYTES = 1514
_MIN_BURST_BYTES = 2 * _FRAME_BYTES
_TBF_LATENCY = "50ms"  # how long a packet may queue before tbf drops it (sets the queue length)

_DEFAULT_PREFIX = "dch"  # netns names: dch<pid>x<counter>-h<i> and dch<pid>x<counter>-sw
_STALE = re.compile(rf"^{_DEFAULT_PREFIX}(\d+)x\d+-")  # group 1: the pid of the harness
_TMP_PREFIX = "namespaced_hosts_"  # + the prefix: /etc files the hosts mount
_counter = itertools.count()
_COMMAND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Host:
    """One host of a harness."""

    index: int
    name: str  # hostname inside the host (and in every host's /etc/hosts)
    netns: str  # the `ip netns` name of its network namespace
    ifname: str  # its interface toward the switch, e.g. for GLOO_SOCKET_IFNAME
    ip: str
    holder_pid: int  # the process whose namespaces the host's processes enter
    cpus: tuple[int, ...] = ()  # the CPUs its processes run on (empty: any)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", *args], capture_output=True, text=True, check=check, timeout=_COMMAND_TIMEOUT_S
    )


def _run_checked(argv: Sequence[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")


def rate_bits_per_second(rate: str) -> float:
    """A tc rate ('100mbit', '1gbit', '10mbps' = megabytes/s, '1.5Gibit') in bits per second."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?(bit|bps)\s*", rate.lower())
    if match is None:
        raise ValueError(f"not a tc rate: {rate!r} (e.g. '100mbit', '1gbit', '10mbps')")
    number, scale, unit = match.groups()
    base = 1024 if scale and scale.endswith("i") else 1000
    power = "kmgt".index(scale[0]) + 1 if scale else 0
    return float(number) * base**power * (8 if unit == "bps" else 1)


def tbf_burst_bytes(rate: str) -> int:
    """The bucket size used for ``rate`` (see _MIN_BURST_BYTES for why)."""
    return max(math.ceil(rate_bits_per_second(rate) / 8 / 1000), _MIN_BURST_BYTES)


@functools.cache
def available() -> tuple[bool, str]:
    """Whether namespaced hosts can be made here, and if not, why (for pytest.skip)."""
    if not sys.platform.startswith("linux"):
        return False, f"needs Linux namespaces (platform is {sys.platform})"
    if os.geteuid() != 0:
        return False, "needs root (to create network and mount namespaces)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return False, f"missing tools: {', '.join(missing)} (iproute2, util-linux)"
    probe = f"dchprobe{os.getpid()}"
    steps = [
        ["ip", "netns", "add", probe],
        ["ip", "-n", probe, "link", "add", "name", "probe0", "type", "veth",
         "peer", "name", "probe1"],
        ["ip", "netns", "exec", probe, "unshare", "--mount", "--uts", "--fork",
         "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", "/dev/shm"],
    ]  # fmt: skip
    try:
        for argv in steps:
            _run_checked(argv)
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        return False, f"cannot create namespaces here: {error}"
    finally:
        _ip("netns", "del", probe, check=False)
    return True, ""


# --- cleanup on signals and at exit ---------------------------------------------------------

_live: set[NamespacedHosts] = set()
_closing = 0  # how many close() calls are in progress; signals wait for them
_deferred_signal: int | None = None
_handlers_installed = False


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Turns SIGTERM/SIGHUP/SIGINT into exceptions, so that `with` blocks, finally clauses and
    atexit run; a signal that arrives while a harness is being torn down waits for the end."""
    global _deferred_signal
    if _closing:
        _deferred_signal = signum
        return
    _raise_for(signum)


def _raise_for(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def _install_handlers() -> None:
    """Installed once, only over default handlers and only from the main thread: a program that
    handles these signals itself keeps its handlers (atexit and `with` still clean up)."""
    global _handlers_installed
    if _handlers_installed or threading.current_thread() is not threading.main_thread():
        return
    _handlers_installed = True
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(signum, _on_signal)
    atexit.register(_close_all)


def _close_all() -> None:
    for hosts in list(_live):
        hosts.close()


def _remove_stale() -> None:
    """Removes the namespaces and temporary folders of harnesses whose process is gone (e.g.
    SIGKILLed), with any process still running in those namespaces."""
    listing = _ip("netns", "list", check=False).stdout
    for name in (line.split()[0] for line in listing.splitlines() if line.strip()):
        match = _STALE.match(name)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            netns_id = _namespace_id_of_netns(name)
            if netns_id:
                _kill_namespace_members({netns_id})
            _ip("netns", "del", name, check=False)
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), f"{_TMP_PREFIX}*")):
        match = _STALE.match(os.path.basename(folder).removeprefix(_TMP_PREFIX))
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            shutil.rmtree(folder, ignore_errors=True)


def _namespace_id_of_netns(name: str) -> str:
    with contextlib.suppress(OSError):
        stat = os.stat(f"/run/netns/{name}")
        return f"net:[{stat.st_ino}]"
    return ""


def _namespace_members(namespace_ids: set[str]) -> list[int]:
    """Pids of the processes in any of ``namespace_ids`` ('net:[4026...]', 'mnt:[...]')."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        for kind in ("net", "mnt"):
            with contextlib.suppress(OSError):  # gone, or a zombie (no namespaces left)
                if os.readlink(f"/proc/{entry}/ns/{kind}") in namespace_ids:
                    members.append(int(entry))
                    break
    return members


def _kill_namespace_members(namespace_ids: set[str], timeout: float = 10.0) -> None:
    """SIGKILLs every process in ``namespace_ids`` until none is left."""
    deadline = time.monotonic() + timeout
    while members := _namespace_members(namespace_ids):
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {members} survive SIGKILL in {namespace_ids}")
        time.sleep(0.01)


def _cpu_shares(count: int) -> list[tuple[int, ...]] | None:
    """``count`` equal, disjoint shares of this process's usable CPUs (the remainder unused), or
    None where there are fewer CPUs than hosts."""
    usable = sorted(os.sched_getaffinity(0))
    per_host = len(usable) // count
    if per_host == 0:
        return None
    return [tuple(usable[i * per_host : (i + 1) * per_host]) for i in range(count)]


# --- the harness --------------------------------------------------------------------------


class NamespacedHosts:
    """``count`` hosts joined by a switch; a context manager (see the module docstring).

    ``rate`` (a tc rate such as '1gbit') shapes every host's link in both directions; ``prefix``
    replaces the unique default prefix of the network namespace names. ``own_cpus``: where the
    machine has at least one usable CPU per host, give each host CPUs of its own (an equal,
    disjoint share; ``Host.cpus``), as separate machines have; every process of a host runs on
    them. Otherwise, or with ``own_cpus=False``, the hosts' processes share every CPU.
    """

    def __init__(
        self,
        count: int,
        *,
        rate: str | None = None,
        prefix: str | None = None,
        own_cpus: bool = True,
    ) -> None:
        if not 1 <= count <= MAX_HOSTS:
            raise ValueError(f"count must be 1..{MAX_HOSTS}, got {count}")
        if rate is not None:
            rate_bits_per_second(rate)  # validate before creating anything
        ok, why = available()
        if not ok:
            raise RuntimeError(why)
        self.rate = rate
        self._cpu_shares = _cpu_shares(count) if own_cpus else None
        self.hosts: list[Host] = []
        self._prefix = prefix or f"{_DEFAULT_PREFIX}{os.getpid()}x{next(_counter)}"
        self.switch_netns = f"{self._prefix}-sw"
        self._netns: list[str] = []  # created so far, removed by close()
        self._holders: list[subprocess.Popen[str]] = []
        # Namespaces are found by their ids (inode numbers), which the kernel reuses once a
        # namespace is freed; so each one stays pinned (a bind mount in /run/netns, an open fd
        # for a mount namespace) until its processes are gone, or close() could kill processes
        # of a namespace created meanwhile by someone else under the same id.
        self._namespace_ids: set[str] = set()
        self._pins: list[int] = []
        self._children: list[subprocess.Popen[Any]] = []
        self._closed = False
        self._tmpdir = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{self._prefix}-")
        _install_handlers()
        _live.add(self)
        try:
            if prefix is None:
                _remove_stale()
            self._setup(count)
        except BaseException:
            self.close()
            raise

    # setup

    def _setup(self, count: int) -> None:
        names = [f"host{i}" for i in range(count)]
        ips = [f"{SUBNET}.{i + 1}" for i in range(count)]
        self._write_etc(names, ips)
        self._add_netns(self.switch_netns)
        self._ipn(self.switch_netns, "link", "add", "name", "br0", "type", "bridge")
        self._ipn(self.switch_netns, "link", "set", "br0", "up")
        for index, (name, ip) in enumerate(zip(names, ips, strict=True)):
            netns = f"{self._prefix}-h{index}"
            self._add_netns(netns)
            port = f"p{index}"  # the switch's end of the host's cable
            self._ipn(self.switch_netns, "link", "add", "name", port, "type", "veth",
                      "peer", "name", IFNAME, "netns", netns)  # fmt: skip
            self._ipn(self.switch_netns, "link", "set", port, "master", "br0", "up")
            self._ipn(netns, "addr", "add", f"{ip}/24", "dev", IFNAME)
            self._ipn(netns, "link", "set", IFNAME, "up")
            self._ipn(netns, "link", "set", "lo", "up")
            if self.rate is not None:
                self._shape(netns, IFNAME)
                self._shape(self.switch_netns, port)
            holder = self._start_holder(netns, name)
            cpus = self._cpu_shares[index] if self._cpu_shares else ()
            self.hosts.append(Host(index, name, netns, IFNAME, ip, holder, cpus))

    def _write_etc(self, names: Sequence[str], ips: Sequence[str]) -> None:
        """The /etc/hosts and /etc/nsswitch.conf every host mounts: hostnames resolve from the
        file only, since no DNS server is reachable from a host (a DNS attempt fails with
        EAI_AGAIN, on which c10d warns at every connection, instead of 'not found')."""
        with open(os.path.join(self._tmpdir, "hosts"), "w") as file:
            file.write("127.0.0.1 localhost\n::1 localhost\n")
            file.writelines(f"{ip} {name}\n" for ip, name in zip(ips, names, strict=True))
        try:
            with open("/etc/nsswitch.conf") as file:
                lines = [line for line in file if not line.startswith("hosts:")]
        except OSError:
            lines = []
        with open(os.path.join(self._tmpdir, "nsswitch.conf"), "w") as file:
            file.writelines([*lines, "hosts: files\n"])

    def _add_netns(self, name: str) -> None:
        self._netns.append(name)  # before creating it: close() must remove a half-made one
        _ip("netns", "add", name)
        self._namespace_ids.add(_namespace_id_of_netns(name))

    @staticmethod
    def _ipn(netns: str, *args: str) -> None:
        _run_checked(["ip", "-n", netns, *args])

    def _shape(self, netns: str, device: str) -> None:
        assert self.rate is not None
        bits = round(rate_bits_per_second(self.rate))
        _run_checked(["tc", "-n", netns, "qdisc", "add", "dev", device, "root", "tbf",
                      "rate", f"{bits}bit", "burst", str(tbf_burst_bytes(self.rate)),
                      "latency", _TBF_LATENCY])  # fmt: skip

    def _start_holder(self, netns: str, hostname: str) -> int:
        """Starts the process that keeps the host's mount and UTS namespaces alive; returns its
        pid. It waits for EOF on a pipe from this process, so it also ends if we are SIGKILLed;
        unshare's --kill-child ends it if unshare is killed."""
        script = (
            "mount -t tmpfs tmpfs /dev/shm"
            ' && mount --bind "$1/hosts" /etc/hosts'
            " && { [ ! -e /etc/nsswitch.conf ]"
            ' || mount --bind "$1/nsswitch.conf" /etc/nsswitch.conf; }'
            ' && hostname "$2" && echo $$ && exec cat >/dev/null'
        )
        holder = subprocess.Popen(
            ["ip", "netns", "exec", netns, "unshare", "--mount", "--uts", "--kill-child",
             "--propagation", "private", "sh", "-c", script, "holder", self._tmpdir, hostname],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self._holders.append(holder)
        assert holder.stdout is not None and holder.stderr is not None
        ready, _, _ = select.select([holder.stdout], [], [], _COMMAND_TIMEOUT_S)
        line = holder.stdout.readline() if ready else ""  # the pid; '' if the script failed
        if not line.strip().isdigit():
            holder.kill()
            _, error = holder.communicate(timeout=_COMMAND_TIMEOUT_S)
            raise RuntimeError(f"could not start host {hostname}: {error.strip()}")
        pid = int(line)
        self._pins.append(os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY))
        self._namespace_ids.add(os.readlink(f"/proc/{pid}/ns/mnt"))
        return pid

    # processes

    def popen(
        self,
        host: int,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **popen_kwargs: Any,
    ) -> subprocess.Popen[Any]:
        """Starts ``argv`` on ``host`` in the current (or ``cwd``) directory; ``env`` is added to
        this process's environment. Other keywords go to subprocess.Popen."""
        self._check_open()
        target = self.hosts[host].holder_pid
        command = ["nsenter", f"--target={target}", "--mount", "--uts", "--net",
                   f"--wd={cwd or os.getcwd()}", "--", *argv]  # fmt: skip
        cpus = self.hosts[host].cpus
        if cpus:  # taskset sets the affinity, then execs nsenter, which execs argv: inherited
            command = ["taskset", "--cpu-list", ",".join(map(str, cpus)), *command]
        process = subprocess.Popen(command, env={**os.environ, **(env or {})}, **popen_kwargs)
        self._children = [p for p in self._children if p.poll() is None] + [process]
        return process

    def run(
        self,
        host: int,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Runs ``argv`` on ``host`` to completion, capturing text output; kills it and raises
        subprocess.TimeoutExpired after ``timeout`` seconds."""
        with self.popen(host, argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True) as process:  # fmt: skip
            try:
                out, err = process.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                raise
        return subprocess.CompletedProcess(list(argv), process.returncode, out, err)

    # faults

    def set_link(self, host: int, up: bool) -> None:
        """Unplugs (``up=False``) or plugs back the cable of ``host`` at the switch: a partition
        that leaves every process and socket as it is, as a failed switch port does."""
        self._check_open()
        self._ipn(self.switch_netns, "link", "set", f"p{host}", "up" if up else "down")

    def drop_arriving(self, host: int, sender: int | None) -> None:
        """Drops every packet that arrives at ``host`` from host ``sender`` (a one-way loss:
        the other direction still flows); ``sender=None`` lifts every such drop at ``host``."""
        self._check_open()
        netns = self.hosts[host].netns
        if sender is None:
            _run_checked(["ip", "netns", "exec", netns, "iptables", "-F", "INPUT"])
        else:
            _run_checked(["ip", "netns", "exec", netns, "iptables", "-A", "INPUT",
                          "-s", self.hosts[sender].ip, "-j", "DROP"])  # fmt: skip

    def shm_entries(self, host: int) -> list[str]:
        """The names in ``host``'s /dev/shm (read through the holder's root, no process needed)."""
        self._check_open()
        return sorted(os.listdir(f"/proc/{self.hosts[host].holder_pid}/root/dev/shm"))

    def torchrun(
        self,
        argv: Sequence[str],
        nproc_per_host: int | Sequence[int],
        *,
        env: Mapping[str, str] | None = None,
        master_port: int = 29500,
        extra_args: Sequence[str] = (),
    ) -> list[subprocess.Popen[str]]:
        """Starts ``torchrun ... argv`` (a script and its arguments) on every host: node rank i
        on host i with ``nproc_per_host[i]`` ranks (global ranks follow host order), static
        rendezvous at host 0. One process per host; its stdout+stderr are a text pipe, shared
        by the host's ranks. They run unbuffered (so output streams), which makes print() write
        its text and its newline separately: two ranks' lines can interleave unless each line
        is written at once (sys.stdout.write(line + "\\n"))."""
        counts = self._counts(nproc_per_host)
        processes = []
        for host, count in zip(self.hosts, counts, strict=True):
            command = [sys.executable, "-m", "torch.distributed.run",
                       f"--nnodes={len(self.hosts)}", f"--node-rank={host.index}",
                       f"--nproc-per-node={count}", f"--master-addr={self.hosts[0].ip}",
                       f"--master-port={master_port}", *extra_args, *argv]  # fmt: skip
            processes.append(self._popen_piped(host, command, env, {}))
        return processes

    def launch_ranks(
        self,
        argv: Sequence[str],
        ranks_by_host: Sequence[Sequence[int]],
        *,
        env: Mapping[str, str] | None = None,
        master_port: int = 29500,
    ) -> list[subprocess.Popen[str]]:
        """Starts ``python argv`` once per rank, without torchrun, so ranks can be placed
        freely: ``ranks_by_host[i]`` lists host i's global ranks (e.g. [[0, 2], [1, 3]]).
        Sets the env:// variables (RANK, WORLD_SIZE, MASTER_ADDR = rank 0's host, ...),
        LOCAL_RANK / LOCAL_WORLD_SIZE (position among the host's ranks) and
        GLOO_SOCKET_IFNAME. Returns the processes in rank order."""
        if len(ranks_by_host) != len(self.hosts):
            raise ValueError(f"ranks_by_host has {len(ranks_by_host)} hosts, not {len(self.hosts)}")
        world_size = sum(len(ranks) for ranks in ranks_by_host)
        if sorted(r for ranks in ranks_by_host for r in ranks) != list(range(world_size)):
            raise ValueError(f"ranks_by_host must hold 0..{world_size - 1} once each")
        master = next(h for h, ranks in enumerate(ranks_by_host) if 0 in ranks)
        by_rank: dict[int, subprocess.Popen[str]] = {}
        for host, ranks in zip(self.hosts, ranks_by_host, strict=True):
            for local_rank, rank in enumerate(ranks):
                variables = {
                    "RANK": str(rank), "WORLD_SIZE": str(world_size),
                    "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(len(ranks)),
                    "GROUP_RANK": str(host.index),
                    "MASTER_ADDR": self.hosts[master].ip, "MASTER_PORT": str(master_port),
                }  # fmt: skip
                command = [sys.executable, *argv]
                by_rank[rank] = self._popen_piped(host, command, env, variables)
        return [by_rank[rank] for rank in range(world_size)]

    def _popen_piped(
        self,
        host: Host,
        command: Sequence[str],
        env: Mapping[str, str] | None,
        variables: Mapping[str, str],
    ) -> subprocess.Popen[str]:
        # Unbuffered, so that output streams line by line (and survives a kill).
        merged = {"GLOO_SOCKET_IFNAME": host.ifname, "PYTHONUNBUFFERED": "1", **variables}
        return self.popen(host.index, command, env={**merged, **(env or {})},
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)  # fmt: skip

    def _counts(self, nproc_per_host: int | Sequence[int]) -> list[int]:
        if isinstance(nproc_per_host, int):
            return [nproc_per_host] * len(self.hosts)
        if len(nproc_per_host) != len(self.hosts) or min(nproc_per_host) < 1:
            raise ValueError(f"need one count >= 1 per host, got {list(nproc_per_host)}")
        return list(nproc_per_host)

    # teardown

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the namespaced hosts are closed")

    def namespace_ids(self) -> set[str]:
        """The kernel ids ('net:[...]', 'mnt:[...]') of the harness's namespaces (for tests)."""
        return set(self._namespace_ids)

    def close(self) -> None:
        """Kills every process in the hosts and removes the namespaces (idempotent)."""
        global _closing, _deferred_signal
        if self._closed:
            return
        _closing += 1
        try:
            try:
                for process in self._children:  # also those nsenter has not moved in yet
                    if process.poll() is None:
                        process.kill()
                _kill_namespace_members(self._namespace_ids - {""})
            finally:
                self._remove_namespaces()
            self._closed = True
            _live.discard(self)
        finally:
            _closing -= 1
        if _deferred_signal is not None and not _closing:
            signum, _deferred_signal = _deferred_signal, None
            _raise_for(signum)

    def _remove_namespaces(self) -> None:
        for process in [*self._holders, *self._children]:  # reap them (all were killed)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        for holder in self._holders:
            for pipe in (holder.stdin, holder.stdout, holder.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        for netns in reversed(self._netns):  # takes the veths and the bridge with it
            _ip("netns", "del", netns, check=False)
        for fd in self._pins:
            os.close(fd)
        self._pins.clear()
        shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> NamespacedHosts:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def wait_all(
    processes: Sequence[subprocess.Popen[str]],
    timeout: float | None,
    *,
    labels: Sequence[str] | None = None,
    stream: TextIO | None = None,
    fail_fast: bool = False,
) -> list[tuple[int, str]]:
    """Waits for ``processes`` (started with a text stdout pipe, or none) and returns
    (returncode, output) for each. What still runs after ``timeout`` seconds (or, with
    ``fail_fast``, once any process has failed: its peers would wait for it until the
    collective timeout) gets SIGTERM, then SIGKILL 5 s later. With ``labels``, every line is
    also written to ``stream`` (default stdout) as it arrives, prefixed with its label."""
    outputs: list[list[str]] = [[] for _ in processes]
    lock = threading.Lock()

    def read(index: int, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            with lock:
                outputs[index].append(line)
                if labels is not None:
                    print(f"[{labels[index]}] {line}", end="", file=stream or sys.stdout,
                          flush=True)  # fmt: skip

    readers = [
        threading.Thread(target=read, args=(i, p), daemon=True)
        for i, p in enumerate(processes)
        if p.stdout is not None
    ]
    for reader in readers:
        reader.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    reason = ""
    while [p for p in processes if p.poll() is None]:  # polls every one (sets returncode)
        if fail_fast and any(p.returncode for p in processes):
            reason = "[stopped: another process failed]\n"
            break
        if deadline is not None and time.monotonic() > deadline:
            reason = f"[stopped: still running after {timeout} s]\n"
            break
        time.sleep(0.02)
    late = [p for p in processes if p.poll() is None]
    for process in late:
        process.terminate()  # torchrun passes SIGTERM on to its workers
    for process in late:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for reader in readers:
        reader.join(timeout=5)  # a leftover grandchild may hold the pipe; close() kills it
    with lock:
        return [
            (p.returncode, "".join(out) + (reason if p in late else ""))
            for p, out in zip(processes, outputs, strict=True)
        ]


# --- command line -------------------------------------------------------------------------


def round_robin(counts: Sequence[int]) -> list[list[int]]:
    """Ranks dealt to hosts in turn (rank r on host r % H while every host has room), the
    layout torchrun cannot make: [2, 2] -> [[0, 2], [1, 3]]."""
    ranks_by_host: list[list[int]] = [[] for _ in counts]
    rank = 0
    while rank < sum(counts):
        for host, count in enumerate(counts):
            if len(ranks_by_host[host]) < count:
                ranks_by_host[host].append(rank)
                rank += 1
    return ranks_by_host


_EPILOG = """\
A "host" is a set of Linux namespaces on this machine: its own network namespace (lo and
eth0 = 10.77.0.<i+1>/24, cabled to a bridge in a separate "switch" namespace), its own mount
namespace with a fresh tmpfs on /dev/shm and an /etc/hosts listing all hosts, and its own
hostname (host0, host1, ...). Ranks on one host share /dev/shm; ranks on different hosts can
only talk over the network, as on separate machines. The machine's own network is not touched.
Needs root, iproute2 (ip, tc) and util-linux (unshare, nsenter, mount).

The script runs under torchrun on every host (node rank i on host i, static rendezvous at
host0, GLOO_SOCKET_IFNAME=eth0), or with --non-contiguous one process per rank with the
env:// variables set, ranks dealt to hosts in turn. Everything is removed at the end, also on
failure or Ctrl-C.

example: python tools/namespaced_hosts.py --hosts 2 --nproc-per-host 2 \\
             --rate 1gbit -- train.py --epochs 1
"""


def _parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python tools/namespaced_hosts.py",
        usage="%(prog)s [options] -- script.py [args ...]",
        description="Run a distributed PyTorch script on H simulated hosts on this machine.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--hosts", type=int, default=2, help="number of hosts (default 2)")
    parser.add_argument("--nproc-per-host", default=[2], type=_counts, metavar="N[,N...]",
                        help="ranks per host, one number or one per host (default 2)")  # fmt: skip
    parser.add_argument("--rate", help="shape every host's link to this tc rate, e.g. 1gbit")
    parser.add_argument("--non-contiguous", action="store_true",
                        help="number ranks round robin over hosts (host0: 0, 2, ...), "
                             "launching one process per rank instead of torchrun")  # fmt: skip
    parser.add_argument("--master-port", type=int, default=29500)
    parser.add_argument("--timeout", type=float, help="kill the job after this many seconds")
    split = list(argv).index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    command = list(argv[split + 1 :])
    if not command:
        parser.error("missing '-- script.py [args ...]'")
    if len(args.nproc_per_host) == 1:
        args.nproc_per_host *= args.hosts
    if len(args.nproc_per_host) != args.hosts:
        parser.error(f"--nproc-per-host needs 1 or {args.hosts} numbers")
    return args, command


def _counts(text: str) -> list[int]:
    counts = [int(n) for n in text.split(",")]
    if min(counts) < 1:
        raise ValueError(text)
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    args, command = _parse_args(sys.argv[1:] if argv is None else argv)
    counts = args.nproc_per_host
    with NamespacedHosts(args.hosts, rate=args.rate) as hosts:
        if args.non_contiguous:
            ranks_by_host = round_robin(counts)
            processes = hosts.launch_ranks(command, ranks_by_host, master_port=args.master_port)
            host_of = {r: h for h, ranks in enumerate(ranks_by_host) for r in ranks}
            labels = [f"{hosts.hosts[host_of[r]].name} rank {r}" for r in range(len(host_of))]
        else:
            processes = hosts.torchrun(command, counts, master_port=args.master_port)
            labels = [host.name for host in hosts.hosts]
        results = wait_all(processes, args.timeout, labels=labels, fail_fast=True)
    codes = [code for code, _ in results]
    failed = [f"{label}: exit {code}" for label, code in zip(labels, codes, strict=True) if code]
    if failed:
        print("failed: " + "; ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
