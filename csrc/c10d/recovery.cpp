// The face's failure and recovery contract, as torch defines it for backends that recover
// (ProcessGroupNCCL's): abort() from any thread, shutdown(), getError(), shrink(), which gives
// the survivors of a failure a new group over themselves, and torch 2.15's reconfigure().
#include <dummy_collectives/backend.hpp>

#include <unistd.h>

#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_set>
#include <variant>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

#include "c10d/argument_checks.hpp"
#include "c10d/engine.hpp"
#include "c10d/this_process.hpp"
#include "c10d/work.hpp"

namespace dummy_collectives {
namespace {

// Whether a failure's reason names this rank as its origin: its own error or abort reads
// "rank 2 (pid 1234) ..." on one host and "rank 2 (host h1, pid 1234) ..." across hosts. (A
// rank of another host may have the same pid in its own pid namespace, never the same rank.)
bool namesRank(const std::string& reason, int rank, int pid) {
  const std::string who = c10::str("rank ", rank, " (");
  const std::string ownPid = c10::str("pid ", pid, ")");
  for (size_t at = reason.find(who); at != std::string::npos; at = reason.find(who, at + 1)) {
    const size_t open = at + who.size() - 1;
    const size_t close = reason.find(')', open);
    if (close != std::string::npos &&
        reason.substr(open, close + 1 - open).find(ownPid) != std::string::npos) {
      return true;
    }
  }
  return false;
}

} // namespace

std::shared_ptr<Lowering> DummyBackend::currentLowering() const {
  std::lock_guard<std::mutex> lock(lifecycleMu_);
  return lowering_;
}

void DummyBackend::refuseShutDown(const char* collective) const {
  C10_THROW_ERROR(
      DistBackendError,
      c10::str("dummy ", collective, " (rank ", getRank(), "): ", brokenReason(),
               " (ProcessGroup.shutdown or destroy_process_group); it can no longer be used"));
}

void DummyBackend::abort() {
  auto lowering = currentLowering();
  if (!lowering) {
    return; // zero mode, or shut down: nothing to abort
  }
  // The first reason wins (the lowering keeps it): aborting twice changes nothing.
  lowering->abort(c10::str(
      "rank ", getRank(), " (pid ", pid_, ") aborted the process group (ProcessGroup.abort)"));
}

void DummyBackend::shutdown() {
  if (shutDown_.load(std::memory_order_acquire) || thisProcessId() != pid_) {
    return; // done already; or a forked child, where the threads and memory are the parent's
  }
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard<std::mutex> lock(lifecycleMu_);
    engine = engine_;
  }
  // What was issued runs first (a failed group's collectives raise at once). Not under the
  // lock: abort() from another thread must still reach a collective that waits.
  if (engine) {
    engine->drain();
  }
  if (auto current = currentLowering(); current && current->brokenReason().empty()) {
    // Peers may still be joining (this rank may leave right after new_group returned).
    current->awaitJoined(options_->timeout);
  }
  std::shared_ptr<Lowering> lowering;
  {
    std::lock_guard<std::mutex> lock(lifecycleMu_);
    if (shutDown_.load(std::memory_order_relaxed)) {
      return; // another thread shut it down meanwhile
    }
    failureAtShutdown_ = lowering_ ? lowering_->brokenReason() : std::string();
    shutDown_.store(true, std::memory_order_release);
    engine = std::move(engine_);
    lowering = std::move(lowering_);
  }
  if (fr_ && !failureAtShutdown_.empty()) {
    // As ~DummyBackend: a rank that was not in the failed collective dumps when it lets go.
    flight_recorder::dumpOnFailure(fr_.get(), failureAtShutdown_);
  }
  engine.reset(); // runs what was issued during the drain, while the lowering lives; stops
  lowering.reset(); // its threads and shared memory go (a failed group's engines may stay)
}

c10d::ErrorType DummyBackend::getError() {
  std::string reason;
  if (shutDown_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(lifecycleMu_);
    reason = failureAtShutdown_;
  } else if (auto lowering = currentLowering()) {
    reason = lowering->brokenReason();
  }
  if (reason.empty()) {
    return c10d::ErrorType::SUCCESS;
  }
  // The reason is worded by the level that saw the failure first, and every rank reports it.
  if (reason.find("timed out after") != std::string::npos) {
    return c10d::ErrorType::TIMEOUT;
  }
  return namesRank(reason, getRank(), pid_) ? c10d::ErrorType::COMM_ERROR
                                            : c10d::ErrorType::REMOTE_ERROR;
}

std::vector<int> DummyBackend::deadRanks() const {
  auto lowering = currentLowering();
  return lowering ? lowering->deadRanks() : std::vector<int>{};
}

c10::intrusive_ptr<c10d::Backend> DummyBackend::shrink(
    const std::vector<int64_t>& ranksToExclude,
    int shrinkFlags,
    const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) {
  requireCreatorProcess(pid_, "shrink", getRank()); // a shut-down parent may still shrink
  const Checker check("shrink", getRank(), getSize());
  check.require(
      static_cast<bool>(groupFactory_),
      "this group was not made by torch.distributed (dummy_collectives' creator), so it cannot "
      "make the survivors' group");
  check.require(!ranksToExclude.empty(), "ranks_to_exclude is empty");
  std::set<int64_t> excluded;
  for (const int64_t r : ranksToExclude) {
    check.require(
        r >= 0 && r < getSize(), "rank ", r, " in ranks_to_exclude is not a rank of this group of ",
        getSize());
    check.require(excluded.insert(r).second, "rank ", r, " is in ranks_to_exclude twice");
  }
  check.require(
      excluded.count(getRank()) == 0,
      "this rank is in ranks_to_exclude: only the ranks that stay call shrink");
  check.require(
      static_cast<int>(excluded.size()) < getSize(), "ranks_to_exclude names every rank");
  check.require(
      (shrinkFlags & ~kShrinkAbort) == 0, "unknown shrink_flags ", shrinkFlags,
      " (SHRINK_DEFAULT 0 or SHRINK_ABORT 1)");
  c10::intrusive_ptr<BackendOptions> options;
  if (optsOverride) {
    auto given = c10::dynamic_intrusive_pointer_cast<BackendOptions>(optsOverride);
    check.require(
        static_cast<bool>(given), "pg_options must be dummy_collectives.Options, got ",
        optsOverride->backend);
    options = c10::make_intrusive<BackendOptions>(*given);
  } else {
    options = c10::make_intrusive<BackendOptions>(*options_); // the parent's, its timeout too
  }
  options->group_name = c10::str(options_->group_name.empty() ? "0" : options_->group_name,
                                 ":shrunk", shrinks_);
  if ((shrinkFlags & kShrinkAbort) != 0) {
    abort(); // what is in flight on this group raises, here and on the other survivors
  }
  std::vector<int64_t> survivors;
  int newRank = -1;
  for (int r = 0; r < getSize(); ++r) {
    if (excluded.count(r) == 0) {
      if (r == getRank()) {
        newRank = static_cast<int>(survivors.size());
      }
      survivors.push_back(globalRanks_.empty() ? r : globalRanks_[static_cast<size_t>(r)]);
    }
  }
  // Every survivor counts this group's shrinks alike, so each shrink (a retry after a failed
  // one, or after a second death) meets under its own prefix, which the excluded ranks never
  // wrote. The new group is made without this one: it may have failed. (torch destroys it
  // next: shutdown() releases it.)
  const std::string prefix = c10::str(
      "dummy_collectives/shrink", shrinks_++, "/without-",
      c10::Join("-", std::vector<int64_t>(excluded.begin(), excluded.end())), "/");
  return groupFactory_(
      prefix, newRank, static_cast<int>(survivors.size()), survivors, options);
}

#ifdef C10D_BACKEND_HAS_RECONFIGURE
// (torch >= 2.15 made a Backend's rank and size assignable for reconfigure.)
void DummyBackend::adopt(DummyBackend& fresh) {
  std::lock_guard<std::mutex> lock(lifecycleMu_);
  rank_ = fresh.rank_;
  size_ = fresh.size_;
  std::swap(options_, fresh.options_);
  std::swap(lowering_, fresh.lowering_);
  std::swap(engine_, fresh.engine_);
  std::swap(exitHandle_, fresh.exitHandle_);
  std::swap(traceSite_, fresh.traceSite_); // names its group through its options: swapped too
  std::swap(fr_, fresh.fr_);
  std::swap(frDescTaken_, fresh.frDescTaken_);
  std::swap(globalRanks_, fresh.globalRanks_);
  std::swap(groupFactory_, fresh.groupFactory_); // a later shrink meets under the new prefix
  std::swap(shrinks_, fresh.shrinks_);
  seq_ = 0; // the new group numbers its collectives from 1, on every member
  p2pSeq_ = 0;
}

namespace {

constexpr std::string_view kHandlePrefix = "dummy:";

// A handle is "dummy:<rank in the world>:<uuid of its configuration>:<pid>@<host>": unique
// per process and configuration, and its world rank orders the new group's ranks in the
// flight recorder, as gloo's handles do.
int64_t worldRankOf(const c10d::ReconfigureHandle& handle) {
  const size_t end = handle.find(':', kHandlePrefix.size());
  TORCH_CHECK_VALUE(
      handle.rfind(kHandlePrefix, 0) == 0 && end != std::string::npos,
      "dummy reconfigure: ", handle, " is not a dummy_collectives reconfigure handle");
  return std::stoll(handle.substr(kHandlePrefix.size(), end - kHandlePrefix.size()));
}

} // namespace

c10d::ReconfigureHandle DummyBackend::get_reconfigure_handle() const {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const int64_t world =
      globalRanks_.empty() ? getRank() : globalRanks_[static_cast<size_t>(getRank())];
  return c10::str(kHandlePrefix, world, ":", reconfigured_, ":", pid_, "@", host);
}

c10::intrusive_ptr<c10d::Work> DummyBackend::reconfigure(const c10d::ReconfigureOptions& opts) {
  requireUsable("reconfigure");
  const Checker check("reconfigure", getRank(), getSize());
  check.require(static_cast<bool>(groupFactory_), "this group cannot be reconfigured");
  std::vector<c10d::ReconfigureHandle> handles;
  std::visit([&](const auto& given) { handles.assign(given.begin(), given.end()); }, opts.handles);
  if (std::holds_alternative<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles)) {
    std::sort(handles.begin(), handles.end()); // a set: every member orders it alike
  }
  check.require(!handles.empty(), "no handles");
  check.require(
      std::set<c10d::ReconfigureHandle>(handles.begin(), handles.end()).size() == handles.size(),
      "the handles are not unique");
  const auto mine = std::find(handles.begin(), handles.end(), get_reconfigure_handle());
  check.require(mine != handles.end(), "this rank's handle is not among the handles");
  std::vector<int64_t> worldRanks;
  for (const auto& handle : handles) {
    worldRanks.push_back(worldRankOf(handle));
  }
  auto options = c10::make_intrusive<BackendOptions>(*options_);
  if (opts.timeout) {
    options->timeout = *opts.timeout;
  }
  // What this group was running finishes first (a failed group's collectives raise at once).
  if (auto engine = engine_) {
    engine->drain();
  }
  auto made = groupFactory_(
      c10::str("dummy_collectives/reconfigure/", opts.uuid, "/"),
      static_cast<int>(mine - handles.begin()), static_cast<int>(handles.size()), worldRanks,
      options);
  auto fresh = c10::dynamic_intrusive_pointer_cast<DummyBackend>(made);
  TORCH_INTERNAL_ASSERT(fresh, "dummy reconfigure: the group factory made another backend");
  const auto timeout = options_->timeout;
  adopt(*fresh);
  reconfigured_ = opts.uuid;
  setTimeout(timeout); // opts.timeout bounded the reconfigure only, as gloo's does
  return DummyWork::completed(getRank(), c10d::OpType::UNKNOWN, "dummy:reconfigure", {});
}
#endif

} // namespace dummy_collectives
