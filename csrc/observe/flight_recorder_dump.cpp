// The flight recorder's dump: torch's pickle layout (FlightRecorderDetail.hpp, dump() and
// getCollectiveTrace()), built from our ring with torch's own keys and pickler, and its writing
// to torch's per-rank file when a group fails.
#include "observe/flight_recorder_ring.hpp"

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>
#include <torch/csrc/distributed/c10d/TraceUtils.h>

#include <dummy_collectives/debug_log.hpp>

namespace dummy_collectives {
namespace flight_recorder {

namespace {

// Names the library torchfrtrace expects before the colon of a profiling name. It accepts only
// those it knows (nccl, gloo, xccl, ...: flight_recorder/components/types.py, Op) and stops on
// any other, so "dummy:all_reduce" would not load; NCCL's name is the one whose entries it
// reads in full (its coalesced-group checks key on "nccl:").
constexpr const char* kLibrary = "nccl";

// torch's ranks_str ("[0, 1, 2]"); its own is built with fmt, which libtorch does not export.
std::string ranksStr(const std::vector<uint64_t>& ranks) {
  std::string text = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return text + "]";
}

std::string profilingName(const EntryCopy& e) {
  if (!e.p2p) {
    return c10::str(kLibrary, ":", e.op);
  }
  // NCCL's form, group ranks: "nccl:send 0->1", "nccl:recv 1<-0".
  if (std::string(e.op) == "send") {
    return c10::str(kLibrary, ":send ", e.self, "->", e.peer);
  }
  return c10::str(kLibrary, ":recv ", e.self, "<-", e.peer);
}

// Reads one side (inputs or outputs) of an entry's shapes from `pos`.
void readSide(
    const std::vector<int64_t>& shapes,
    size_t& pos,
    c10::List<c10::IValue>& sizes,
    std::vector<std::string>& dtypes) {
  const int64_t count = shapes.at(pos++);
  for (int64_t t = 0; t < count; ++t) {
    const int64_t dtype = shapes.at(pos++);
    const int64_t dims = shapes.at(pos++);
    auto dimsList = c10d::new_list();
    for (int64_t d = 0; d < dims; ++d) {
      dimsList.push_back(shapes.at(pos++));
    }
    sizes.push_back(dimsList);
    dtypes.emplace_back(
        dtype >= 0 ? c10::toString(static_cast<c10::ScalarType>(dtype)) : "Undefined");
  }
}

c10::Dict<c10::IValue, c10::IValue> entryDict(
    const EntryCopy& e, const GroupCopy& group, bool includeStackTraces) {
  auto dict = c10d::new_dict();
  if (includeStackTraces) {
    dict.insert(c10d::frames_key, c10d::new_list()); // not captured: see the header
  }
  dict.insert(c10d::record_id_key, static_cast<int64_t>(e.id - 1));
  dict.insert(c10d::pg_id_key, static_cast<int64_t>(group.id));
  dict.insert(c10d::pg_name_key, std::make_tuple(group.name, group.desc));
  dict.insert(c10d::thread_name_key, e.threadName);
  dict.insert(c10d::thread_id_key, std::to_string(e.threadId));
  dict.insert(c10d::collective_seq_id_key, static_cast<int64_t>(e.collectiveSeq));
  dict.insert(c10d::p2p_seq_id_key, static_cast<int64_t>(e.p2pSeq));
  // One logical operation per entry (nothing is coalesced into one record here).
  dict.insert(c10d::op_id_key, static_cast<int64_t>(e.p2p ? e.p2pSeq : e.collectiveSeq));
  dict.insert(c10d::profiling_name_key, profilingName(e));
  dict.insert(c10d::time_created_key, e.createdNs);
  if (e.completedNs != 0) {
    dict.insert(c10d::duration_key, static_cast<double>(e.completedNs - e.startedNs) / 1e6);
  }
  size_t pos = 0;
  auto inputSizes = c10d::new_list();
  std::vector<std::string> inputDtypes;
  readSide(e.shapes, pos, inputSizes, inputDtypes);
  auto outputSizes = c10d::new_list();
  std::vector<std::string> outputDtypes;
  readSide(e.shapes, pos, outputSizes, outputDtypes);
  dict.insert(c10d::input_sizes_key, inputSizes);
  dict.insert(c10d::input_dtypes_key, inputDtypes);
  dict.insert(c10d::output_sizes_key, outputSizes);
  dict.insert(c10d::output_dtypes_key, outputDtypes);
  if (e.completedNs != 0) {
    dict.insert(c10d::state_key, c10d::completed_state);
  } else if (e.startedNs != 0) {
    dict.insert(c10d::state_key, c10d::started_state);
  } else {
    dict.insert(c10d::state_key, c10d::scheduled_state);
  }
  dict.insert(
      c10d::time_discovered_started_key,
      e.startedNs != 0 ? c10::IValue(e.startedNs) : c10::IValue());
  dict.insert(
      c10d::time_discovered_completed_key,
      e.completedNs != 0 ? c10::IValue(e.completedNs) : c10::IValue());
  // Retired: no longer tracked, as NCCL's watchdog retires a Work once it completed.
  dict.insert(c10d::retired_key, e.completedNs != 0);
  dict.insert(c10d::timeout_key, e.timeoutMs);
  dict.insert(c10d::is_p2p_key, e.p2p);
  // Room for the per-collective arrival tracking (not filled yet, so not written).
  if (e.lastArrival >= 0) {
    dict.insert("last_arrival", static_cast<int64_t>(e.lastArrival));
  }
  if (e.waitedUs >= 0) {
    dict.insert("waited_us", e.waitedUs);
  }
  return dict;
}

// torch's writer creates its default folder (~/.cache/torch) but not the folder of a prefix
// given in TORCH_FR_DUMP_TEMP_FILE, and a dump into a missing folder is lost: the README's recipe
// (`TORCH_FR_DUMP_TEMP_FILE=/tmp/fr/rank_ torchrun ...`) names a folder nobody made.
void createDumpFolder() {
  for (const char* name : {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}) {
    const char* prefix = std::getenv(name);
    if (prefix != nullptr && *prefix != '\0') {
      const auto folder = std::filesystem::path(prefix).parent_path();
      std::error_code ignored; // a folder that cannot be made: the writer reports the failure
      if (!folder.empty()) {
        std::filesystem::create_directories(folder, ignored);
      }
      return; // the first one set is the one torch reads
    }
  }
}

} // namespace

std::string dumpPickle(bool includeCollectives, bool includeStackTraces, bool onlyActive) {
  Ring& ring = Ring::get();
  // Groups first: every entry in the ring belongs to a group registered before it.
  const std::vector<GroupCopy> groups = ring.groups();
  auto result = c10d::new_dict();
  result.insert(c10d::version_key, c10d::version_val);

  auto pgConfig = c10d::new_dict();
  auto pgStatus = c10d::new_dict();
  for (const GroupCopy& group : groups) {
    auto info = c10d::new_dict();
    info.insert("name", group.name);
    info.insert("desc", group.desc);
    info.insert("ranks", ranksStr(group.ranks));
    pgConfig.insert_or_assign(group.name, info); // a name made again: its latest group
    auto status = c10d::new_dict();
    status.insert("last_enqueued_collective", group.lastEnqueued);
    status.insert("last_started_collective", group.lastStarted);
    status.insert("last_completed_collective", group.lastCompleted);
    pgStatus.insert(std::to_string(group.id), status);
  }
  result.insert(c10d::pg_config_key, pgConfig);
  result.insert(c10d::comm_lib_version_key_str, std::string("dummy_collectives"));
  result.insert(c10d::pg_status_key, pgStatus);

  if (includeCollectives) {
    auto entries = c10d::new_list();
    for (const EntryCopy& e : ring.snapshot()) {
      if (onlyActive && e.completedNs != 0) {
        continue;
      }
      if (e.group->id < groups.size()) {
        entries.push_back(entryDict(e, groups[e.group->id], includeStackTraces));
      }
    }
    result.insert(c10d::entries_key, entries);
  }
  return c10d::pickle_str(result);
}

void dumpOnFailure(const Group* group, const std::string& why) {
  if (group == nullptr) {
    return; // the recorder is off
  }
  static std::atomic<bool> dumped{false};
  if (dumped.exchange(true)) {
    return; // once per process, as NCCL's dump on timeout
  }
  try {
    const std::string dump = dumpPickle(true, false, false);
    // torch's writer: TORCH_FR_DUMP_TEMP_FILE (or TORCH_NCCL_DEBUG_INFO_TEMP_FILE) + rank, its
    // default prefix where unset, or the writer a user registered (DebugInfoWriter::
    // registerWriter). The first caller in the process fixes the rank, as in torch.
    createDumpFolder();
    c10d::DebugInfoWriter& writer = c10d::DebugInfoWriter::getWriter(group->globalRank);
    writer.write(dump);
    DC_LOG(kInfo, group->globalRank, "flight recorder: wrote its dump (",
           debug_log::bytes(dump.size()), ") for rank ", group->globalRank, " after: ", why);
  } catch (const std::exception& e) {
    DC_LOG(kWarn, group->globalRank, "flight recorder: could not write the dump: ", e.what());
  }
}

void dumpIfGroupFailure(const Group* group, const std::exception_ptr& error) {
  if (group == nullptr || !error) {
    return;
  }
  try {
    std::rethrow_exception(error);
  } catch (const c10::DistBackendError& e) {
    dumpOnFailure(group, e.what());
  } catch (...) {
  }
}

} // namespace flight_recorder
} // namespace dummy_collectives
