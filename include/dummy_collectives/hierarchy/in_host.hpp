#pragma once

#include <functional>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <dummy_collectives/hierarchy/group_health.hpp>
#include <dummy_collectives/hierarchy/op_context.hpp>

namespace dummy_collectives::hierarchy {

// The level inside one host: any c10d backend over this host's ranks (a DummyBackend over
// shared memory), numbered by local rank. Two-level algorithms issue its collectives and wait
// for them here; a failure becomes the group's failure.
class InHostLevel {
 public:
  // `brokenReason`: why the host's backend can no longer be used (empty while it can).
  InHostLevel(
      c10::intrusive_ptr<c10d::Backend> backend,
      std::function<std::string()> brokenReason,
      GroupHealth& health)
      : backend_(std::move(backend)), brokenReason_(std::move(brokenReason)), health_(health) {}

  c10d::Backend& operator*() const {
    return *backend_;
  }
  c10d::Backend* operator->() const {
    return backend_.get();
  }
  const c10::intrusive_ptr<c10d::Backend>& backend() const {
    return backend_;
  }
  int rank() const {
    return backend_->getRank();
  }
  int size() const {
    return backend_->getSize();
  }

  // Waits for `work`, a collective of this level. Every collective a two-level algorithm runs
  // here follows an agreement (agreement.hpp), so it cannot be a mismatch: any failure (a dead
  // host peer, a timeout, an abort from another host) fails the group.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const OpContext& ctx) const;

 private:
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::function<std::string()> brokenReason_;
  GroupHealth& health_;
};

} // namespace dummy_collectives::hierarchy
