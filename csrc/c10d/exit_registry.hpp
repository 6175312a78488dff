#pragma once

#include <chrono>
#include <memory>
#include <string>

// Interpreter exit (Python's atexit, before finalisation; README, faults): every live group of
// this process runs what it still has outstanding on the calling thread, at most
// min(group timeout, kExitGrace), then is aborted. Afterwards no engine thread holds a Work or
// tensor, so none touches Python objects (tensors, future callbacks) while the interpreter
// finalises: that raced with finalisation and crashed the process ("terminate called without an
// active exception").
namespace dummy_collectives {

constexpr std::chrono::milliseconds kExitGrace{10000};

// What flushAllForExit() needs of a live group.
class ExitHandle {
 public:
  virtual ~ExitHandle() = default;
  // Runs everything outstanding on the calling thread; on return no queued or running Work is
  // left. False if the group is gone meanwhile (nothing to do).
  virtual bool drain() = 0;
  // Past the exit deadline: ends every wait of the group, so drain() returns.
  virtual void abort(const std::string& reason) = 0;
};

// Registers a group for the exit flush. The registry keeps only a weak reference: a destroyed
// group drops out by itself. Groups are flushed in registration order.
void registerForExit(
    const std::shared_ptr<ExitHandle>& handle,
    std::chrono::milliseconds timeout,
    int rank);

// Flushes every registered group of this process (a no-op in a forked child, whose registry
// entries, threads and locks are the parent's).
void flushAllForExit();

} // namespace dummy_collectives
