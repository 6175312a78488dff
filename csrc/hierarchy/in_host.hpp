#pragma once

#include <memory>

#include <ATen/core/Tensor.h>

#include "inter_host/group_health.hpp"
#include "hierarchy/pipeline.hpp"
#include <dummy_collectives/op_context.hpp>
#include <dummy_collectives/reduce_ops.hpp>
#include "shm/shm_lowering.hpp"

namespace dummy_collectives {
class Engine;
}

namespace dummy_collectives::hierarchy {

// The level inside one host: the shared-memory lowering of this host's ranks (numbered by local
// rank), driven step by step. Each step starts on the level's own engine and returns what to
// wait for, so a pipeline's in-host step of one chunk overlaps the cross-host step of another
// (pipeline.hpp); a waiting thread runs the queued steps itself (Engine), so a step waited for
// at once costs no hand-off. Every step follows an agreement (agreement.hpp) or is the
// agreement's own first one, so a failure here is the group's: the wait fails the group.
// Steps on CUDA tensors (reduce, reduce-scatter, broadcast and the flat all-gather: the device
// algorithms') take the host's device path and are complete on the device when their wait
// returns.
class InHostLevel {
 public:
  InHostLevel(std::shared_ptr<ShmLowering> shm, inter_host::GroupHealth& health);
  ~InHostLevel(); // runs what is still queued, then stops the engine

  int rank() const {
    return shm_->rank();
  }
  int size() const {
    return shm_->size();
  }
  ShmLowering& shm() const {
    return *shm_;
  }

  // Which timeout a step has: the collective's first step names the rank that never came
  // (OpContext::timeout); every later one waits a grace longer (followingStepTimeout).
  enum class Step { kFirst, kFollowing };

  // output (size() parts) receives every local rank's input.
  Pending allgather(const OpContext& ctx, at::Tensor output, at::Tensor input, Step step);
  // perRank[j] receives local rank j's input (anywhere: views into one output, say; ours may
  // be `input` itself).
  Pending allgather(
      const OpContext& ctx, std::vector<at::Tensor> perRank, at::Tensor input, Step step);
  // output receives part rank() of the reduction of every local rank's input.
  Pending reduceScatter(
      const OpContext& ctx, at::Tensor output, at::Tensor input, const ReduceSpec& spec);
  Pending broadcast(const OpContext& ctx, at::Tensor data, int root);
  // Starts the queued steps now, on the level's worker, rather than at its next poll: this
  // thread is about to block elsewhere (pipeline.hpp, a blocking stage).
  void expedite() const;
  // Only local rank `root` receives the reduction.
  Pending reduce(const OpContext& ctx, at::Tensor data, int root, const ReduceSpec& spec);

 private:
  // Queues `steps(ShmLowering&, const OpContext&)` as the host's next collective, described by
  // `op` (its kind, dtype and sizes; numbered here), and returns its wait.
  template <typename Steps>
  Pending post(const OpContext& ctx, OpDescriptor op, Step step, Steps steps);

  std::shared_ptr<ShmLowering> shm_;
  inter_host::GroupHealth& health_;
  std::shared_ptr<Engine> engine_;
  uint64_t seq_ = 0; // the host's collectives so far; every local rank counts the same
};

} // namespace dummy_collectives::hierarchy
