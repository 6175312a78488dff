#pragma once

// The flight recorder: the last TORCH_FR_BUFFER_SIZE collectives and point-to-point operations
// of every dummy group of this process, dumped in the format of PyTorch's own flight recorder
// (torch/csrc/distributed/c10d/FlightRecorder.hpp), so `torchfrtrace` reads it as it reads
// NCCL's dumps.
//
// Why our own: torch's recorder is a header template (FlightRecorder<EventType>::get() holds a
// function-local static); libtorch does not export its instance, so an extension that records
// into it records into a private copy that torch's _dump_fr_trace() never sees.
//
// Cost on the hot path, where a small collective costs little more than c10d's own call path
// (docs/benchmarks.md, "Flight recorder cost"): no allocation once a ring slot has held a shape
// as large (each slot keeps its buffer), no lock another thread holds in the common case (each
// slot has a spin flag that only a dump contends for), three clock reads (created, started,
// completed).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include <dummy_collectives/arrival.hpp>
#include <dummy_collectives/op_descriptor.hpp>

namespace dummy_collectives {
namespace flight_recorder {

// A group as the dump names it: `pg_config[name] = {name, desc, ranks}`, and its entries'
// `process_group = (name, desc)`. Registered once per group and kept for the process's life
// (its entries outlive it in the ring, and a dump must still name their group).
struct Group {
  size_t id = 0;          // pg_id: order of registration in this process
  std::string name;       // c10d's group name ("0" for the default group)
  std::string desc;       // c10d's description of it; guarded by the recorder (describe())
  std::vector<uint64_t> ranks; // global ranks of the group, in group-rank order
  int globalRank = -1;    // this process's global rank (the dump file's suffix)
  // pg_status: the last collective sequence numbers enqueued, started and completed.
  std::atomic<int64_t> lastEnqueued{-1};
  std::atomic<int64_t> lastStarted{-1};
  std::atomic<int64_t> lastCompleted{-1};
};

// Whether the recorder records (TORCH_FR_BUFFER_SIZE, or its alias TORCH_NCCL_TRACE_BUFFER_SIZE,
// > 0; torch's default 2000 entries), read once.
bool enabled();
size_t capacity();

// Registers a group; null when the recorder is off. `globalRanks` empty: the group is the world
// (ranks 0..size-1).
std::shared_ptr<Group> registerGroup(
    const std::string& name, std::vector<int64_t> globalRanks, int groupRank, int groupSize);

// c10d sets a group's description (new_group(group_desc=...)) after its backend was made: the
// backend hands it over at its first operation.
void describe(Group* group, const std::string& desc);

// What an entry is about (its profiling name is "nccl:<op>", see profilingName()).
struct OpInfo {
  const char* op;          // torchfrtrace's name of the operation ("all_reduce", "send", ...)
  uint64_t collectiveSeq;  // collective_seq_id: the group's collectives so far
  uint64_t p2pSeq;         // p2p_seq_id: the group's point-to-point operations so far
  bool p2p = false;
  int self = -1;           // point-to-point: this rank and the peer (group ranks; -1 any source)
  int peer = -1;
  std::chrono::milliseconds timeout{0};
};

// Records an operation as "scheduled" and returns its id, 0 when the recorder is off or `group`
// is null. `inputs` / `outputs`: the tensors whose sizes and dtypes the entry lists.
uint64_t record(
    Group* group,
    const OpInfo& info,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs);
// The same, where the entry lists one flattened tensor in place of a list of `listCount` equal
// tensors (all-gather's outputs, reduce-scatter's inputs), as NCCL records them: torchfrtrace
// checks their numel against the group's size times the other side's.
uint64_t recordFlattened(
    Group* group,
    const OpInfo& info,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs,
    bool flattenInputs,
    size_t listCount);

// State changes of entry `id` (0: nothing). Started: the operation began (its first step, or
// for point-to-point its posting to the engine); completed: it finished on this rank. An entry
// overwritten meanwhile (the ring wrapped) is left alone.
void started(uint64_t id);
void completed(uint64_t id);
// Completed, with who made whom wait (arrival.hpp): the entry's last_arrival and waited_us,
// where the collective exchanged arrivals (arrival.known()).
void completed(uint64_t id, const Arrival& arrival);

// The dump, as torch's FlightRecorder::dump() writes it: a pickled dict with "version" "2.10",
// "pg_config", "pg_status", "comm_lib_version" and (includeCollectives) "entries". Entries carry
// no stack frames (capturing them costs microseconds per operation); with includeStackTraces
// each has an empty "frames" list.
std::string dumpPickle(bool includeCollectives, bool includeStackTraces, bool onlyActive);

// A group failed on this rank (timeout, dead peer, mismatch, abort): writes the dump to torch's
// per-rank file (TORCH_FR_DUMP_TEMP_FILE, or TORCH_NCCL_DEBUG_INFO_TEMP_FILE, + global rank;
// torch's default prefix where unset), through torch's DebugInfoWriter, once per process.
// Never throws. `why` goes to the debug log.
void dumpOnFailure(const Group* group, const std::string& why);

// Where a dump file is asked for (TORCH_FR_DUMP_TEMP_FILE set), makes SIGTERM write this
// process's dump (dumpOnFailure, naming `group`'s rank) before it ends the process, as it would
// have; once per process, and only where SIGTERM has no handler yet (flight_recorder_signal.cpp).
void dumpOnSigterm(const Group* group);

// Calls dumpOnFailure() if `error` is a c10::DistBackendError (a group's failure or a mismatch;
// bad arguments and other errors are not).
void dumpIfGroupFailure(const Group* group, const std::exception_ptr& error);

} // namespace flight_recorder
} // namespace dummy_collectives
