#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace dummy_collectives::hierarchy {

// Whether a group that spans hosts can still be used, and why not, agreed by every rank.
//
// Within a host the shared-memory level tells every rank at once when a peer dies, times out or
// aborts. Across hosts there is no shared memory: a rank blocked in the cross-host engine (gloo)
// waiting for a peer on another host that has given up would wait for the whole group timeout.
// So the first rank to see a failure publishes its reason in the group's store (compare-and-set:
// the first reason wins, so every rank reports the same cause) and aborts its host's level,
// which wakes its host peers; a rank whose cross-host wait lasts polls the store, and a rank
// whose engine fails (a dead peer's connection closes at once) waits briefly for the reason the
// dead rank's host peers publish, which names the dead rank.
class GroupHealth {
 public:
  // `abortHost` aborts this host's level with a reason (DummyBackend::abort's effect). `self`
  // names this rank in messages: "rank 2 (host h1, pid 1234)".
  GroupHealth(
      c10::intrusive_ptr<c10d::Store> store,
      std::function<void(const std::string&)> abortHost,
      std::string self);

  // Empty while the group is usable; otherwise the reason every rank reports.
  std::string brokenReason() const;
  // Raises the group's failure (DistBackendError, `context`: the collective) if it failed.
  void raiseIfBroken(const std::string& context) const;
  // The group failed here: publishes `reason` (unless another rank published first), aborts
  // this host's level, and raises DistBackendError with `context` and the reason that won.
  [[noreturn]] void fail(const std::string& context, const std::string& reason);
  // Marks the group failed with `reason` without raising (ProcessGroup.abort, exit).
  std::string markFailed(const std::string& reason);
  // A reason some rank published, or none (one store round trip; call it sparingly).
  std::optional<std::string> published() const;
  // Like published(), but waits up to `patience` for a reason to appear.
  std::optional<std::string> awaitPublished(std::chrono::milliseconds patience) const;

  const std::string& self() const {
    return self_;
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::function<void(const std::string&)> abortHost_;
  std::string self_;
  mutable std::mutex mu_;
  std::string reason_; // guarded by mu_
  std::atomic<bool> broken_{false};
};

} // namespace dummy_collectives::hierarchy
