// The face's failure and recovery contract, as torch defines it for backends that recover
// (ProcessGroupNCCL's): abort() from any thread, shutdown(), getError(), the abort hooks, and
// shrink(), which gives the survivors of a failure a new group over themselves.
#include <dummy_collectives/backend.hpp>

#include <algorithm>
#include <set>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

#include "c10d/abort_hooks.hpp"
#include "c10d/argument_checks.hpp"
#include "c10d/engine.hpp"
#include "c10d/this_process.hpp"

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
  // The hooks run before the group is failed (torch's contract), once.
  abortHooks_->runOnce();
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
      static_cast<bool>(shrinkFactory_),
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
  if ((shrinkFlags & kShrinkAbort) != 0) {
    abort(); // what is in flight on this group raises, here and on the other survivors
  }
  // The new group is made without this one: it may have failed, and its excluded ranks are
  // gone. (torch destroys it next: shutdown() releases it.)
  return shrinkFactory_(std::vector<int64_t>(excluded.begin(), excluded.end()), options);
}

#ifdef C10D_BACKEND_HAS_HOOKS
void DummyBackend::registerAbortHook(int64_t hookId, c10d::AbortHook hook) {
  abortHooks_->add(hookId, std::move(hook));
}

void DummyBackend::unregisterAbortHook(int64_t hookId) {
  abortHooks_->remove(hookId);
}
#endif

} // namespace dummy_collectives
