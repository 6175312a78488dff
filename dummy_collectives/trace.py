"""One timeline of all ranks: merge per-rank ``torch.profiler`` traces, see who waited for whom.

    python -m dummy_collectives.trace merge rank0.json rank1.json ... -o job.json
    python -m dummy_collectives.trace summary job.json

``merge`` reads the Chrome traces that ``prof.export_chrome_trace(path)`` writes on each rank
(``.json`` or ``.json.gz``) and writes one Chrome/Perfetto trace with a process row per rank
(pid = rank, named after the rank and its host). The rank comes from the trace's
``distributedInfo``, or from the order of the files where that is missing.

Ranks' clocks need not agree. The same collective is found on every rank (by process group and
sequence number, from torch's ``record_param_comms`` records; by its order among the events of
that name otherwise), and since every rank leaves a collective at about the same moment, a
rank's clock offset is the median, over the collectives it shares with an aligned rank, of the
difference of their end times. Each collective event then gets the args ``last_arrival`` (the
rank that entered it last) and ``waited_us`` (how long this rank waited for that rank), unless
the backend recorded them itself, and a child span ``wait for rank R`` shows the wait.

The backend records them itself where the profiler records shapes (``record_shapes=True``):
each collective then ends with a ``dummy.wait:<collective>`` event whose args name the
collective (``Seq``, ``Process Group Name``) and hold the values the backend measured, which the
merge copies onto the collective's event (``wait_source`` says which: ``backend`` or ``clocks``).

``summary`` prints, per collective kind and rank, the time spent waiting and for whom, and per
rank how often it arrived last and how long the others waited for it.

The module needs only the standard library.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Event = dict[str, Any]
# Names one collective, the same on every rank that took part in it.
Key = tuple[str, ...]

DEFAULT_PREFIX = "dummy:"  # the backend's collective events: dummy:all_reduce, ...
# What the backend measured of a collective's waits, recorded when it completed.
WAIT_RECORD_PREFIX = "dummy.wait:"
PARAM_COMMS = "record_param_comms"
# Point-to-point operations concern two ranks, not a group: nothing to align or wait for.
POINT_TO_POINT = frozenset({"send", "recv", "recvAnySource", "recvAnysource"})
# A rooted collective's root may leave before the others (a broadcast's root does not wait for
# its data to arrive anywhere): its end times align clocks only where nothing else is shared.
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})
MIN_UNROOTED = 3
# The input's metadata naming and ordering its processes: merge writes its own, one per rank.
PROCESS_METADATA = frozenset({"process_name", "process_labels", "process_sort_index"})
FLOW_PHASES = frozenset({"s", "t", "f"})


@dataclass
class RankTrace:
    """One rank's events, on the common time base; its collectives by key."""

    rank: int
    path: str
    host: str | None
    events: list[Event]
    collectives: dict[Key, Event] = field(default_factory=dict)
    offset_us: float = 0.0
    aligned: bool = False


# ----------------------------------------------------------------------------- files


def load_json(path: str | Path) -> dict[str, Any]:
    """A Chrome trace, gzip'd or not, as its JSON object form."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    if isinstance(data, list):  # the format's bare-array form
        return {"traceEvents": data}
    return dict(data)


def write_json(data: dict[str, Any], path: str | Path) -> None:
    text = json.dumps(data).encode()
    Path(path).write_bytes(gzip.compress(text) if str(path).endswith(".gz") else text)


def _ranks(loaded: Sequence[dict[str, Any]]) -> list[int]:
    """Each file's rank: ``distributedInfo``'s where every file has a distinct one, else the
    order of the files."""
    ranks = [(d.get("distributedInfo") or {}).get("rank") for d in loaded]
    if all(isinstance(r, int) for r in ranks) and len(set(ranks)) == len(ranks):
        return [int(r) for r in ranks]
    return list(range(len(loaded)))


def read_traces(paths: Sequence[str | Path], prefix: str) -> tuple[list[RankTrace], int | None]:
    """The ranks' traces on one time base (the earliest file's), and that base in ns."""
    loaded = [load_json(p) for p in paths]
    bases = [d.get("baseTimeNanoseconds") for d in loaded]
    known = [int(b) for b in bases if b is not None]
    base_ns = min(known) if known else None
    traces = []
    for path, data, rank, base in zip(paths, loaded, _ranks(loaded), bases, strict=True):
        # Each file counts microseconds from its own base: rebase them (the bases' difference
        # in integer ns, exactly) so that only the clocks' own disagreement is left to estimate.
        shift_us = (int(base) - base_ns) / 1000 if base is not None and base_ns is not None else 0.0
        events = [dict(e) for e in data.get("traceEvents", []) if isinstance(e, dict)]
        for event in events:
            if shift_us and "ts" in event:
                event["ts"] = float(event["ts"]) + shift_us
        trace = RankTrace(rank, str(path), data.get("host_name"), events)
        trace.collectives = find_collectives(events, prefix)
        apply_recorded_waits(events, trace.collectives)
        traces.append(trace)
    return sorted(traces, key=lambda t: t.rank), base_ns


# ----------------------------------------------------------------------------- matching


def op_of(name: str) -> str:
    """``dummy:all_reduce`` -> ``all_reduce``."""
    return name.split(":", 1)[-1]


def _end(event: Event) -> float:
    return float(event["ts"]) + float(event.get("dur", 0.0))


def _group_and_seq(record: Event | None) -> Key | None:
    args = (record or {}).get("args") or {}
    seq = args.get("Seq", args.get("seq"))
    group = args.get("Process Group Name", args.get("pg_name"))
    if seq is None or group is None:
        return None
    return ("group", str(group), str(seq))


def find_collectives(events: list[Event], prefix: str) -> dict[Key, Event]:
    """One rank's collective events (complete events named ``prefix*``), keyed alike on every
    rank: by the process group and sequence number of the ``record_param_comms`` record that
    c10d makes on the same thread just before, else by order among events of that name."""
    pending: dict[tuple[Any, Any], Event] = {}  # per thread: the record not yet claimed
    seen: Counter[str] = Counter()
    found: dict[Key, Event] = {}
    complete = [e for e in events if e.get("ph") == "X" and "ts" in e]
    for event in sorted(complete, key=lambda e: float(e["ts"])):
        name = str(event.get("name", ""))
        thread = (event.get("pid"), event.get("tid"))
        if name == PARAM_COMMS:
            collective = ((event.get("args") or {}).get("Collective name")) or ""
            if collective not in POINT_TO_POINT:
                pending[thread] = event
            continue
        if not name.startswith(prefix):
            continue
        record = pending.pop(thread, None)
        if op_of(name) in POINT_TO_POINT:
            continue
        key = _group_and_seq(record)
        if key is None:
            key = ("order", str(seen[name]))
            seen[name] += 1
        found[(*key, name)] = event
    return found


def apply_recorded_waits(events: list[Event], collectives: dict[Key, Event]) -> None:
    """Puts what the backend recorded (``dummy.wait:*`` events) on the collectives' events,
    matched by process group, sequence number and collective."""
    recorded: dict[tuple[str, str, str], dict[str, Any]] = {}
    for event in events:
        name = str(event.get("name", ""))
        args = event.get("args") or {}
        if not name.startswith(WAIT_RECORD_PREFIX) or "last_arrival" not in args:
            continue
        key = _group_and_seq(event)
        if key is not None:
            recorded[(key[1], key[2], op_of(name))] = args
    if not recorded:
        return
    for key, event in collectives.items():
        if key[0] != "group":
            continue
        args = recorded.get((key[1], key[2], op_of(key[-1])))
        mine = event.setdefault("args", {})
        if args is not None and "last_arrival" not in mine:
            mine["last_arrival"] = int(args["last_arrival"])
            mine["waited_us"] = recorded_waited_us(args)
            mine["wait_source"] = "backend"


def recorded_waited_us(args: dict[str, Any]) -> float:
    """A ``dummy.wait:*`` event's wait in microseconds: exact from ``waited_ns`` (the backend
    writes integers: torch's exporter writes a float such as 0.0 as ``0.``, not JSON)."""
    if "waited_ns" in args:
        return int(args["waited_ns"]) / 1000
    return float(args["waited_us"])


# ----------------------------------------------------------------------------- clocks


def _end_differences(trace: RankTrace, reference: RankTrace) -> list[float]:
    shared = [k for k in trace.collectives if k in reference.collectives]
    unrooted = [k for k in shared if op_of(k[-1]) not in ROOTED]
    use = unrooted if len(unrooted) >= MIN_UNROOTED else shared
    return [_end(trace.collectives[k]) - _end(reference.collectives[k]) for k in use]


def estimate_offsets(traces: list[RankTrace]) -> None:
    """Each rank's clock offset from the lowest rank's: the median end-time difference over
    the collectives it shares with a rank already aligned (directly with the lowest rank where
    they share any; through another rank where only subgroups connect them)."""
    if not traces:
        return
    traces[0].aligned = True
    progress = True
    while progress:
        progress = False
        for trace in (t for t in traces if not t.aligned):
            for reference in (t for t in traces if t.aligned):
                differences = _end_differences(trace, reference)
                if differences:
                    trace.offset_us = reference.offset_us + statistics.median(differences)
                    trace.aligned = progress = True
                    break


def shift(trace: RankTrace) -> None:
    for event in trace.events:
        if "ts" in event:
            event["ts"] = float(event["ts"]) - trace.offset_us


# ----------------------------------------------------------------------------- waits


def annotate_waits(traces: list[RankTrace]) -> None:
    """``last_arrival`` and ``waited_us`` on every collective event seen on two ranks or more
    (kept where the backend recorded them itself: it knows better than aligned clocks)."""
    keys = {k for t in traces for k in t.collectives}
    for key in keys:
        taking_part = {t.rank: t.collectives[key] for t in traces if key in t.collectives}
        if len(taking_part) < 2:
            continue
        last = max(taking_part, key=lambda r: (float(taking_part[r]["ts"]), r))
        last_start = float(taking_part[last]["ts"])
        for event in taking_part.values():
            args = event.setdefault("args", {})
            if "last_arrival" in args and "waited_us" in args:
                continue
            args["last_arrival"] = last
            args["waited_us"] = round(max(0.0, last_start - float(event["ts"])), 3)
            args["wait_source"] = "clocks"


def wait_spans(trace: RankTrace) -> list[Event]:
    """A child span ``wait for rank R`` from the start of each collective this rank waited in
    until the last rank arrived (clipped to the collective)."""
    spans = []
    for event in trace.collectives.values():
        args = event.get("args") or {}
        waited, last = args.get("waited_us"), args.get("last_arrival")
        if not waited or last is None or last == trace.rank:
            continue
        span = {
            "ph": "X",
            "cat": "wait",
            "name": f"wait for rank {last}",
            "pid": trace.rank,
            "tid": event.get("tid"),
            "ts": float(event["ts"]),
            "dur": min(float(waited), float(event.get("dur", waited))),
            "args": {"collective": event.get("name")},
        }
        spans.append(span)
    return spans


# ----------------------------------------------------------------------------- merge


def _process_rows(trace: RankTrace) -> list[Event]:
    where = f" (host {trace.host})" if trace.host else ""
    meta = {"ph": "M", "pid": trace.rank, "tid": 0, "ts": 0}
    return [
        {**meta, "name": "process_name", "args": {"name": f"rank {trace.rank}{where}"}},
        {**meta, "name": "process_sort_index", "args": {"sort_index": trace.rank}},
    ]


def _on_rank_row(event: Event, rank: int, ranks: int) -> Event:
    event["pid"] = rank
    # Flow ids are per file: keep every rank's apart, or arrows would join unrelated ranks.
    if event.get("ph") in FLOW_PHASES and "id" in event:
        flow = event["id"]
        event["id"] = flow * ranks + rank if isinstance(flow, int) else f"{rank}:{flow}"
    return event


def merge(paths: Sequence[str | Path], prefix: str = DEFAULT_PREFIX) -> dict[str, Any]:
    """The merged trace of the ranks' traces in ``paths`` (see the module docstring)."""
    traces, base_ns = read_traces(paths, prefix)
    estimate_offsets(traces)
    for trace in traces:
        shift(trace)
    annotate_waits(traces)
    events: list[Event] = []
    for trace in traces:
        events += _process_rows(trace)
        for event in trace.events:
            if event.get("ph") == "M" and event.get("name") in PROCESS_METADATA:
                continue
            events.append(_on_rank_row(event, trace.rank, len(traces)))
        events += wait_spans(trace)
    ranks = [
        {
            "rank": t.rank,
            "file": t.path,
            "host": t.host,
            "clock_offset_us": round(t.offset_us, 3),
            "aligned": t.aligned,
            "collectives": len(t.collectives),
        }
        for t in traces
    ]
    merged: dict[str, Any] = {"schemaVersion": 1, "displayTimeUnit": "ms"}
    if base_ns is not None:
        merged["baseTimeNanoseconds"] = base_ns
    merged["mergedRanks"] = ranks
    merged["traceEvents"] = events
    return merged


def describe_merge(merged: dict[str, Any], output: str) -> str:
    ranks = merged.get("mergedRanks", [])
    offsets = ", ".join(
        f"rank {r['rank']} {r['clock_offset_us'] / 1000:+.3f} ms" for r in ranks[1:]
    )
    lines = [f"{output}: {len(ranks)} ranks; clock offsets from rank {ranks[0]['rank']}: "]
    lines[0] += offsets or "none"
    lines += [
        f"warning: rank {r['rank']} shares no collective with the others; its clock is "
        "left as it was"
        for r in ranks
        if not r["aligned"]
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- summary


@dataclass
class KindRow:
    """One collective kind on one rank."""

    kind: str
    rank: int
    count: int = 0
    waited_us: float = 0.0
    waited_for_us: Counter[int] = field(default_factory=Counter)


@dataclass
class RankRow:
    rank: int
    collectives: int = 0
    arrived_last: int = 0
    others_waited_us: float = 0.0


@dataclass
class Summary:
    kinds: list[KindRow]
    ranks: list[RankRow]

    def most_waited_for(self) -> RankRow | None:
        """The rank the others waited for longest (None where nobody waited)."""
        top = max(self.ranks, key=lambda r: r.others_waited_us, default=None)
        return top if top is not None and top.others_waited_us > 0 else None


def summarize(merged: dict[str, Any]) -> Summary:
    """Who waited for whom in a merged trace (events with ``last_arrival`` and ``waited_us``;
    the row, pid, is the rank)."""
    kinds: dict[tuple[str, int], KindRow] = {}
    ranks: dict[int, RankRow] = {}
    for event in merged.get("traceEvents", []):
        args = event.get("args") or {}
        if event.get("ph") != "X" or "last_arrival" not in args or "waited_us" not in args:
            continue
        if not isinstance(event.get("pid"), int) or event.get("name", "").startswith(
            WAIT_RECORD_PREFIX
        ):
            continue  # the backend's own records: already on their collectives
        rank, last, waited = event["pid"], int(args["last_arrival"]), float(args["waited_us"])
        kind = str(event.get("name", ""))
        row = kinds.setdefault((kind, rank), KindRow(kind, rank))
        row.count += 1
        row.waited_us += waited
        mine = ranks.setdefault(rank, RankRow(rank))
        mine.collectives += 1
        if last == rank:
            mine.arrived_last += 1
        elif waited > 0:
            row.waited_for_us[last] += waited
            ranks.setdefault(last, RankRow(last)).others_waited_us += waited
    return Summary(
        kinds=[kinds[k] for k in sorted(kinds)],
        ranks=[ranks[r] for r in sorted(ranks)],
    )


def _mostly(row: KindRow) -> str:
    if not row.waited_for_us:
        return "-"
    rank, waited = row.waited_for_us.most_common(1)[0]
    return f"rank {rank} ({100 * waited / row.waited_us:.0f}%)"


def format_summary(summary: Summary) -> str:
    if not summary.kinds:
        return "no collective carries last_arrival / waited_us: is this a merged trace?"
    width = max(len("kind"), *(len(r.kind) for r in summary.kinds))
    lines = [
        "Waiting in collectives, per kind and rank (a rank waits from its own start until the "
        "last rank arrives):",
        "",
        f"{'kind':<{width}}  rank  count  waited ms   mean us  mostly waited for",
    ]
    for r in summary.kinds:
        mean = r.waited_us / r.count if r.count else 0.0
        lines.append(
            f"{r.kind:<{width}}  {r.rank:>4}  {r.count:>5}  {r.waited_us / 1000:>9.3f}"
            f"  {mean:>8.1f}  {_mostly(r)}"
        )
    lines += ["", "Per rank:", "rank  collectives  arrived last  others waited for it ms"]
    for r in summary.ranks:
        lines.append(
            f"{r.rank:>4}  {r.collectives:>11}  {r.arrived_last:>12}"
            f"  {r.others_waited_us / 1000:>24.3f}"
        )
    top = summary.most_waited_for()
    total = sum(r.others_waited_us for r in summary.ranks)
    if top is None:
        lines += ["", "Nobody waited."]
    else:
        share = 100 * top.others_waited_us / total
        lines += [
            "",
            f"Most waited for: rank {top.rank}, {top.others_waited_us / 1000:.3f} ms of the "
            f"{total / 1000:.3f} ms ranks spent waiting ({share:.0f}%)",
        ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dummy_collectives.trace", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    merging = commands.add_parser("merge", help="merge per-rank traces into one timeline")
    merging.add_argument("traces", nargs="+", help="one rank's export_chrome_trace file each")
    merging.add_argument("-o", "--output", required=True, help="the merged trace (.json[.gz])")
    merging.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        help=f"name prefix of the backend's collective events (default {DEFAULT_PREFIX})",
    )
    summary = commands.add_parser("summary", help="who waited for whom in a merged trace")
    summary.add_argument("trace", help="a trace written by merge")
    args = parser.parse_args(argv)
    if args.command == "merge":
        merged = merge(args.traces, args.prefix)
        write_json(merged, args.output)
        print(describe_merge(merged, args.output))
    else:
        print(format_summary(summarize(load_json(args.trace))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
