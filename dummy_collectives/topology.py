"""Which ranks of a group share a host, found when the group is created.

"Same host" means the ranks can share memory and see each other's processes: the same kernel
(boot id), the same ``/dev/shm`` file system and the same pid namespace. A hostname says none of
that: containers and network namespaces often share one name while each mounts its own
``/dev/shm``, and two containers with different names may share one. Every rank publishes its
identity through the group's store and reads everyone's (one ``multi_get``); hosts are ordered by
their smallest rank, and a rank's local rank is its position among its host's ranks.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import socket
import struct
from collections.abc import Mapping, Sequence
from datetime import timedelta

import torch.distributed as dist

# The variable that names a rank's host where the machine's own identity will not do (simulated
# hosts on one machine); the conformance kit's --hosts sets it (conformance/README.md).
HOST_ID_ENV = "DUMMY_COLLECTIVES_HOST_ID"

_KEY_PREFIX = "dummy_collectives/topology/"


@dataclasses.dataclass(frozen=True)
class HostIdentity:
    """What one rank knows about the machine it runs on."""

    key: str  # equal exactly for ranks that can share memory
    hostname: str
    address: str  # the address cross-host engines (gloo) bind to, for error messages
    machine: str  # the kernel's boot id: hosts made of namespaces share a machine's CPUs
    pid: int = 0
    # The kernel's boot id and the pid namespace: ranks that share it see each other's pids,
    # whatever their host (simulated hosts, namespaces that share the pid namespace).
    processes: str = ""


@dataclasses.dataclass(frozen=True)
class Topology:
    """The hosts of a group: ``hosts[h]`` lists the group ranks on host ``h``, ascending."""

    rank: int
    hosts: tuple[tuple[int, ...], ...]
    host_names: tuple[str, ...]
    host_addresses: tuple[str, ...]
    ranks_on_machine: int  # ranks of the group on this rank's machine, whatever their host
    # Each rank's pid where this rank can see its process (it shares the pid namespace), else 0:
    # a one-host group's liveness checks know a rank that dies before it maps the group's
    # shared memory. Across hosts nobody reads another host's pids.
    pids: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        return sum(len(ranks) for ranks in self.hosts)

    @property
    def host(self) -> int:
        """The index of this rank's host."""
        return next(h for h, ranks in enumerate(self.hosts) if self.rank in ranks)

    @property
    def local_rank(self) -> int:
        return self.hosts[self.host].index(self.rank)

    @property
    def local_size(self) -> int:
        return len(self.hosts[self.host])

    @property
    def uniform(self) -> bool:
        """Whether every host runs the same number of ranks (two-level algorithms then use every
        rank's rail; otherwise one leader per host carries the cross-host stage)."""
        return len({len(ranks) for ranks in self.hosts}) == 1

    def rail(self, local_rank: int) -> tuple[int, ...]:
        """The ranks with local rank ``local_rank`` on each host that has one, in host order."""
        return tuple(ranks[local_rank] for ranks in self.hosts if local_rank < len(ranks))


def _interface_address(interface: str) -> str:
    """The IPv4 address of ``interface`` (SIOCGIFADDR), or '' where it has none."""
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            request = struct.pack("256s", interface[:15].encode())
            reply = fcntl.ioctl(probe.fileno(), siocgifaddr, request)
        except OSError:
            return ""
    return socket.inet_ntoa(reply[20:24])


def _engine_address() -> str:
    """The address gloo binds to: GLOO_SOCKET_IFNAME's interface, else the hostname's."""
    interfaces = os.environ.get("GLOO_SOCKET_IFNAME", "")
    if interfaces:
        return _interface_address(interfaces.split(",")[0])
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return ""


def this_host() -> HostIdentity:
    """The identity of the host this process runs on (see the module docstring).

    ``DUMMY_COLLECTIVES_HOST_ID`` overrides it, as ``NCCL_HOSTID`` does NCCL's: ranks with the
    same value are one host, whatever their machine. Ranks that set different values on one
    machine run a multi-host group there (shared memory then still works inside each "host").
    """
    with open("/proc/sys/kernel/random/boot_id") as boot:
        boot_id = boot.read().strip()
    pid_namespace = os.stat("/proc/self/ns/pid").st_ino
    processes = f"{boot_id}/pidns:{pid_namespace}"
    pid = os.getpid()
    forced = os.environ.get(HOST_ID_ENV, "")
    if forced:
        return HostIdentity(f"id:{forced}", forced, _engine_address(), boot_id, pid, processes)
    shm = os.stat("/dev/shm")
    key = f"{boot_id}/shm:{shm.st_dev}:{shm.st_ino}/pidns:{pid_namespace}"
    return HostIdentity(key, socket.gethostname(), _engine_address(), boot_id, pid, processes)


def discover(
    store: dist.Store,
    rank: int,
    size: int,
    settings: Mapping[str, object] | None = None,
    timeout: timedelta | None = None,
) -> Topology:
    """Exchanges every rank's host identity (and ``settings``, values every rank of the group
    must share) through ``store``; raises ValueError naming a setting where a rank's value
    differs from rank 0's. ``timeout``: the group's (``new_group(timeout=...)``); None: the
    store's own, which for a new group is the default group's."""
    mine = this_host()
    record = {"identity": dataclasses.asdict(mine), "settings": dict(settings or {})}
    store.set(f"{_KEY_PREFIX}{rank}", json.dumps(record))
    keys = [f"{_KEY_PREFIX}{r}" for r in range(size)]
    try:
        raws = _multi_get(store, keys, timeout)
    except RuntimeError as exc:  # the store's timeout: some ranks never came
        missing = [r for r, key in enumerate(keys) if not store.check([key])]
        raise dist.DistStoreError(
            f"dummy_collectives: rank {rank} created a group of {size} ranks, but ranks "
            f"{missing} did not join it within the timeout ({exc}). If they did call "
            "new_group, the ranks named the group differently: torch 2.15 numbers groups per "
            "process, and a new_group(use_local_synchronization=True) that left ranks out "
            "numbers only its members'"
        ) from exc
    # Rank 0 returns only once every rank holds the records. Under tcp:// and env:// its process
    # serves the store, and the store goes with the first failed init_process_group: a rank
    # that raises next (a setting every rank finds bad alike) must not break a slower rank's
    # read ("Broken pipe") before that rank could raise the same error.
    store.set(f"{_KEY_PREFIX}read/{rank}", "1")
    if rank == 0:
        store.wait([f"{_KEY_PREFIX}read/{r}" for r in range(size)], timeout or store.timeout)
    records = [json.loads(raw) for raw in raws]
    _check_settings(rank, records)
    return _group_by_host(rank, [HostIdentity(**r["identity"]) for r in records])


def _check_settings(rank: int, records: Sequence[Mapping[str, object]]) -> None:
    """Every rank sees every rank's record, so every rank raises the same error naming every
    rank whose value differs from rank 0's (a rank that raised alone would leave the others
    waiting for it in the next step until their timeout)."""
    reference = records[0]["settings"]
    assert isinstance(reference, dict)
    differ: dict[str, list[str]] = {}
    for r, record in enumerate(records):
        settings = record["settings"]
        assert isinstance(settings, dict)
        for name in sorted(set(settings) | set(reference)):
            if settings.get(name) != reference.get(name):
                differ.setdefault(name, []).append(f"rank {r} uses {settings.get(name)!r}")
    if differ:
        lines = [
            f"{name}: rank 0 uses {reference.get(name)!r}, " + ", ".join(ranks)
            for name, ranks in differ.items()
        ]
        raise ValueError(
            f"dummy_collectives (rank {rank}): ranks disagree on settings that every rank of a "
            "group spanning hosts must share:\n  " + "\n  ".join(lines)
        )


def _group_by_host(rank: int, identities: Sequence[HostIdentity]) -> Topology:
    by_key: dict[str, list[int]] = {}
    for r, identity in enumerate(identities):
        by_key.setdefault(identity.key, []).append(r)  # ranks ascend; dicts keep first-seen order
    hosts = tuple(tuple(ranks) for ranks in by_key.values())
    machine = identities[rank].machine
    processes = identities[rank].processes
    return Topology(
        rank=rank,
        hosts=hosts,
        host_names=tuple(identities[ranks[0]].hostname for ranks in hosts),
        host_addresses=tuple(identities[ranks[0]].address for ranks in hosts),
        ranks_on_machine=sum(1 for identity in identities if identity.machine == machine),
        pids=tuple(
            identity.pid if processes and identity.processes == processes else 0
            for identity in identities
        ),
    )


def _multi_get(store: dist.Store, keys: list[str], timeout: timedelta | None) -> list[bytes]:
    """``store.multi_get(keys)`` within ``timeout`` rather than the store's own timeout (the
    default group's, for a new group), as torch's StoreTimeoutGuard does: one request that the
    store answers when the last key arrives, so every rank reads every record before any rank
    can raise and leave (a rank that polled could find the store's host gone)."""
    if timeout is None:
        return store.multi_get(keys)
    before = store.timeout
    store.set_timeout(timeout)
    try:
        return store.multi_get(keys)
    finally:
        store.set_timeout(before)
