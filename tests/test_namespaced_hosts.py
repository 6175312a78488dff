"""The namespaced-hosts harness makes hosts that a distributed job cannot tell from machines.

Each test makes its own hosts (a few tens of ms) and checks from inside them: hostnames and
/dev/shm are per host, hosts reach each other over TCP and nothing else, tc shaping holds a link
to its rate, torchrun and per-rank launches run real gloo jobs across hosts, and teardown leaves
nothing behind, also after an exception, a signal or a SIGKILL. Everything skips where
namespaces cannot be made (not root, no iproute2, a sandbox without netns).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools import namespaced_hosts
from tools.namespaced_hosts import NamespacedHosts, wait_all

AVAILABLE, WHY_NOT = namespaced_hosts.available()
needs_namespaces = pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT)
MODULE_PATH = Path(namespaced_hosts.__file__)

TIMEOUT_S = 60.0  # per command; a broken setup fails here instead of hanging

# Receives from N senders at once, timing from the moment all are connected and told to go
# (so that process start-up skew is not counted) until every byte has arrived.
TRANSFER_SCRIPT = """
import socket, sys, threading, time

def server(count, port):
    listener = socket.create_server(("0.0.0.0", port))
    listener.settimeout(30)
    print("listening", flush=True)
    conns = [listener.accept()[0] for _ in range(count)]
    received = [0] * count
    def drain(i):
        while chunk := conns[i].recv(1 << 20):
            received[i] += len(chunk)
    threads = [threading.Thread(target=drain, args=(i,)) for i in range(count)]
    start = time.perf_counter()
    for conn in conns:
        conn.sendall(b"g")
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"seconds={time.perf_counter() - start} bytes={sum(received)}", flush=True)

def client(address, port, nbytes):
    deadline = time.monotonic() + 20
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=20)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    assert conn.recv(1) == b"g"
    conn.sendall(b"x" * nbytes)
    conn.shutdown(socket.SHUT_WR)
    print(f"sent {nbytes} from {socket.gethostname()}", flush=True)

if sys.argv[1] == "server":
    server(int(sys.argv[2]), int(sys.argv[3]))
else:
    client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
"""

# One write per line: a host's ranks share torchrun's pipe, and an unbuffered print() writes its
# text and its newline separately, so two ranks' lines could interleave.
GLOO_JOB = """
import socket, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
sys.stdout.write(f"RESULT rank={rank} world={dist.get_world_size()} host={socket.gethostname()}"
                 f" sum={int(value.item())}\\n")
dist.destroy_process_group()
"""


def write(directory: Path, name: str, text: str) -> str:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def netns_list() -> set[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in listing.stdout.splitlines() if line.strip()}


def running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a zombie holds no namespaces)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def assert_all_gone(netns: set[str], members: list[int]) -> None:
    """No namespace of ``netns`` is left, nor any of ``members`` (the processes that were in
    the hosts: pids, unlike namespace ids, are not soon reused by other processes)."""
    assert not netns & netns_list(), f"namespaces left: {netns & netns_list()}"
    assert not [pid for pid in members if running(pid)], "processes left in the hosts"


def transfer_seconds(hosts: NamespacedHosts, tmp_path: Path, senders: list[int], nbytes: int,
                     receiver: int = 1) -> float:  # fmt: skip
    """Seconds for ``senders`` to deliver ``nbytes`` each, at once, to ``receiver``."""
    script = write(tmp_path, "transfer.py", TRANSFER_SCRIPT)
    port = "5555"
    address = hosts.hosts[receiver].ip
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    processes = [hosts.popen(receiver, [sys.executable, script, "server", str(len(senders)),
                                        port], **pipes)]  # fmt: skip
    processes += [
        hosts.popen(s, [sys.executable, script, "client", address, port, str(nbytes)], **pipes)
        for s in senders
    ]
    results = wait_all(processes, TIMEOUT_S)
    assert all(code == 0 for code, _ in results), results
    summary = results[0][1].split()
    assert f"bytes={nbytes * len(senders)}" in summary, results
    return float(next(word for word in summary if word.startswith("seconds="))[8:])


# --- pure helpers (no namespaces needed) ----------------------------------------------------


def test_rates_and_burst() -> None:
    assert namespaced_hosts.rate_bits_per_second("100mbit") == 100e6
    assert namespaced_hosts.rate_bits_per_second("1Gbit") == 1e9
    assert namespaced_hosts.rate_bits_per_second("10mbps") == 80e6  # tc: bps = bytes/s
    assert namespaced_hosts.rate_bits_per_second("1kibit") == 1024
    with pytest.raises(ValueError):
        namespaced_hosts.rate_bits_per_second("fast")
    assert namespaced_hosts.tbf_burst_bytes("1gbit") == 125_000  # 1 ms at the rate
    assert namespaced_hosts.tbf_burst_bytes("1mbit") == 2 * 1514  # never below two frames


def test_round_robin() -> None:
    assert namespaced_hosts.round_robin([2, 2]) == [[0, 2], [1, 3]]
    assert namespaced_hosts.round_robin([3, 1]) == [[0, 2, 3], [1]]


# --- hosts ----------------------------------------------------------------------------------


@needs_namespaces
def test_hosts_have_own_hostname_and_shm() -> None:
    name = f"nh_test_{os.getpid()}"
    with NamespacedHosts(2) as hosts:
        hostnames = [hosts.run(i, ["hostname"], timeout=TIMEOUT_S).stdout.strip() for i in (0, 1)]
        assert hostnames == [hosts.hosts[0].name, hosts.hosts[1].name]
        assert len({*hostnames, socket.gethostname()}) == 3

        made = hosts.run(0, ["sh", "-c", f"echo hello > /dev/shm/{name}"], timeout=TIMEOUT_S)
        assert made.returncode == 0, made.stderr
        seen = hosts.run(0, ["cat", f"/dev/shm/{name}"], timeout=TIMEOUT_S)  # a 2nd process
        assert seen.stdout == "hello\n", seen
        elsewhere = hosts.run(1, ["ls", "-A", "/dev/shm"], timeout=TIMEOUT_S)
        assert name not in elsewhere.stdout.split()
        assert not os.path.exists(f"/dev/shm/{name}")
        assert hosts.shm_entries(0) == [name]
        assert hosts.shm_entries(1) == []


@needs_namespaces
def test_tcp_between_hosts_of_two_coexisting_harnesses(tmp_path: Path) -> None:
    with NamespacedHosts(2) as first, NamespacedHosts(2) as second:
        assert not {h.netns for h in first.hosts} & {h.netns for h in second.hosts}
        for hosts in (first, second):  # same addresses and port, separate networks
            assert transfer_seconds(hosts, tmp_path, senders=[0], nbytes=1000) < TIMEOUT_S


SLEEPER = ["sh", "-c", "echo in && exec sleep 600"]  # says when it has entered the host


@needs_namespaces
@pytest.mark.parametrize("body", ["returns", "raises"])
def test_teardown_removes_everything(body: str) -> None:
    class BodyFailed(Exception):
        pass

    with pytest.raises(BodyFailed) if body == "raises" else contextlib.nullcontext():
        with NamespacedHosts(2, rate="1gbit") as hosts:
            netns = {host.netns for host in hosts.hosts} | {hosts.switch_netns}
            holders = [host.holder_pid for host in hosts.hosts]
            assert netns <= netns_list()
            assert len(hosts.namespace_ids()) == 5  # 3 network namespaces + 2 mount namespaces
            straggler = hosts.popen(1, SLEEPER, stdout=subprocess.PIPE, text=True)
            assert straggler.stdout is not None and straggler.stdout.readline() == "in\n"
            tmpdir = hosts._tmpdir
            members = namespaced_hosts._namespace_members(hosts.namespace_ids())
            assert {*holders, straggler.pid} <= set(members)
            if body == "raises":
                raise BodyFailed
    assert straggler.poll() is not None
    assert_all_gone(netns, members)
    assert not os.path.exists(tmpdir)


SIGNAL_JOB = """
import importlib.util, json, signal, subprocess, sys, time
# SIGINT as a foreground start has it: a shell's background job starts with it ignored, which the
# harness leaves alone.
signal.signal(signal.SIGINT, signal.default_int_handler)
spec = importlib.util.spec_from_file_location("namespaced_hosts", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["namespaced_hosts"] = module
spec.loader.exec_module(module)
hosts = module.NamespacedHosts(2)  # no `with`: the signal handler and atexit must clean up
sleeper = hosts.popen(0, ["sh", "-c", "echo in && exec sleep 600"], stdout=subprocess.PIPE)
assert sleeper.stdout.readline() == b"in\\n"  # it has entered the host
print(json.dumps({
    "netns": [h.netns for h in hosts.hosts] + [hosts.switch_netns],
    "holders": [h.holder_pid for h in hosts.hosts],
    "members": module._namespace_members(hosts.namespace_ids()),
    "tmpdir": hosts._tmpdir,
    "torch": "torch" in sys.modules,
}), flush=True)
time.sleep(600)
"""


@needs_namespaces
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_signal_cleans_up(tmp_path: Path, signum: int) -> None:
    """SIGTERM/SIGINT: the process cleans up itself. SIGKILL: the holders end with it (their
    pipe closes) and the next harness made on the machine removes the rest."""
    script = write(tmp_path, "signal_job.py", SIGNAL_JOB)
    job = subprocess.Popen([sys.executable, script, str(MODULE_PATH)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert job.stdout is not None
        ready, _, _ = select.select([job.stdout], [], [], TIMEOUT_S)
        line = job.stdout.readline() if ready else ""
        assert line, f"the job did not start: {job.stderr.read() if job.poll() else 'hangs'}"
        made = json.loads(line)
        assert not made["torch"], "importing the harness must not import torch"
        job.send_signal(signum)
        job.wait(timeout=TIMEOUT_S)
    finally:
        job.kill()
        job.wait()
    if signum == signal.SIGKILL:
        NamespacedHosts(1).close()
    assert set(made["holders"]) < set(made["members"])  # and the sleep
    assert_all_gone(set(made["netns"]), made["members"])
    assert not os.path.exists(made["tmpdir"])


@needs_namespaces
def test_shaping_limits_each_link(tmp_path: Path) -> None:
    nbytes = 4_000_000
    link_s = nbytes * 8 / 100e6  # 0.32 s at 100 Mbit/s
    with NamespacedHosts(3, rate="100mbit") as hosts:
        one_sender = transfer_seconds(hosts, tmp_path, senders=[0], nbytes=nbytes)
        # Two senders into one host: its own link (the switch port's egress) is the limit.
        two_senders = transfer_seconds(hosts, tmp_path, senders=[0, 2], nbytes=nbytes // 2)
    with NamespacedHosts(2) as hosts:
        unshaped = transfer_seconds(hosts, tmp_path, senders=[0], nbytes=nbytes)
    assert one_sender >= 0.9 * link_s, (one_sender, link_s)
    assert two_senders >= 0.9 * link_s, (two_senders, link_s)
    assert one_sender < 3 * link_s  # shaped to the rate, not slower
    assert unshaped < link_s / 3, (unshaped, link_s)


# --- distributed jobs -----------------------------------------------------------------------


def parse_results(results: list[tuple[int, str]]) -> dict[int, dict[str, str]]:
    """rank -> the fields of its RESULT line; asserts every process succeeded."""
    assert all(code == 0 for code, _ in results), "\n".join(out for _, out in results)
    by_rank = {}
    for _, output in results:
        for line in output.splitlines():
            if line.startswith("RESULT "):
                fields = dict(item.split("=") for item in line.split()[1:])
                by_rank[int(fields["rank"])] = fields
    return by_rank


@needs_namespaces
@pytest.mark.slow
def test_torchrun_gloo_across_hosts(tmp_path: Path) -> None:
    script = write(tmp_path, "job.py", GLOO_JOB)
    with NamespacedHosts(2) as hosts:
        results = wait_all(hosts.torchrun([script], 2, master_port=29533), TIMEOUT_S * 2)
        by_rank = parse_results(results)
        assert hosts.shm_entries(0) == hosts.shm_entries(1) == []
    assert sorted(by_rank) == [0, 1, 2, 3]
    for rank, fields in by_rank.items():
        assert fields["sum"] == "10" and fields["world"] == "4"
        assert fields["host"] == f"host{rank // 2}"  # torchrun: node i runs ranks 2i, 2i+1


@needs_namespaces
@pytest.mark.slow
def test_launch_ranks_non_contiguous(tmp_path: Path) -> None:
    script = write(tmp_path, "job.py", GLOO_JOB)
    with NamespacedHosts(2) as hosts:
        processes = hosts.launch_ranks([script], [[0, 2], [1, 3]])
        by_rank = parse_results(wait_all(processes, TIMEOUT_S * 2))
    assert sorted(by_rank) == [0, 1, 2, 3]
    for rank, fields in by_rank.items():
        assert fields["sum"] == "10" and fields["world"] == "4"
        assert fields["host"] == f"host{rank % 2}"


# Rank 3 fails at once; the others would wait for it (as in a collective) far longer than the
# test allows, so the command must stop them.
CLI_JOB = """
import os, socket, sys, time
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} on {socket.gethostname()}"
      f" local {os.environ['LOCAL_RANK']} ifname {os.environ['GLOO_SOCKET_IFNAME']}", flush=True)
if os.environ["RANK"] == "3":
    time.sleep(2)  # after the others have printed
    sys.exit(3)
time.sleep(600)
"""


@needs_namespaces
def test_cli_streams_prefixed_output_and_fails_with_a_rank(tmp_path: Path) -> None:
    script = write(tmp_path, "cli_job.py", CLI_JOB)
    command = [sys.executable, str(MODULE_PATH), "--hosts", "2",
               "--nproc-per-host", "2", "--non-contiguous", "--", script]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as cli:  # fmt: skip
        try:
            stdout, stderr = cli.communicate(timeout=TIMEOUT_S / 2)
        except subprocess.TimeoutExpired:
            cli.terminate()  # SIGTERM: it still removes its hosts
            stdout, stderr = cli.communicate(timeout=TIMEOUT_S)
            pytest.fail(f"the command did not stop after rank 3 failed:\n{stdout}\n{stderr}")
    assert cli.returncode == 1, (stdout, stderr)
    lines = set(stdout.splitlines())
    for rank in range(4):
        host = f"host{rank % 2}"
        expected = f"[{host} rank {rank}] rank {rank} of 4 on {host} local {rank // 2} ifname eth0"
        assert expected in lines, stdout
    assert "host1 rank 3: exit 3" in stderr
    assert not [name for name in netns_list() if name.startswith(f"dch{cli.pid}x")]
