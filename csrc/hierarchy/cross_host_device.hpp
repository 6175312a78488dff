#pragma once

#include <optional>
#include <string>

#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <dummy_collectives/device_collectives.hpp>
#include <dummy_collectives/op_context.hpp>
#include "hierarchy/levels.hpp"

namespace dummy_collectives::hierarchy {

// The device face (DeviceCollectives) of a group that spans hosts: CUDA tensors through the
// device algorithms (two_level.hpp), never staged through host memory by us. NCCL's ordering:
// a collective runs after what the caller queued on its current stream before the call; it is
// complete on the host when its Work is (the links move memory outside any stream, so every
// step is waited for), which orders whatever the caller queues after waiting for it.
class CrossHostDevice final : public DeviceCollectives {
 public:
  // `whyNot`: why the group's CUDA tensors cannot take this path at all ("" where they may:
  // the hosts' leaders have links on UCX).
  CrossHostDevice(
      const Levels& levels,
      c10::intrusive_ptr<c10d::Store> store,
      std::string hostAddress,
      std::string whyNot);

  // Caller's thread: whether the group's CUDA tensors take this path. Decided at the first
  // collective on CUDA tensors, alike on every rank (every rank calls it then, as NCCL's lazy
  // communicator relies on): each host's leader says in the store whether its UCX moves CUDA
  // memory, and every rank reads what every host said.
  bool groupTakes();
  // For the debug log and Backend.algorithms: where the group's CUDA tensors go.
  std::string describe() const;

  // The call whose collective run() runs (TwoLevelLowering::runOnDevice), until it returns.
  void setCall(const OpContext* call) {
    call_ = call;
  }

  // Contiguous CUDA tensors on one device (the group-wide conditions: TwoLevelLowering).
  bool accepts(const std::vector<at::Tensor>& tensors) override;
  std::shared_ptr<Ticket> submit(const std::vector<at::Tensor>& tensors) override;
  void run(Ticket& ticket, DummyWork& work, const std::function<void()>& body) override;

  void allreduce(Transport& host, at::Tensor& tensor, const ReduceSpec& spec) override;
  void broadcast(Transport& host, at::Tensor& tensor, int root) override;
  void allgatherBase(Transport& host, at::Tensor& output, const at::Tensor& input) override;
  void allgather(
      Transport& host,
      std::vector<at::Tensor>& outputs,
      const at::Tensor& input) override;
  // An allreduce of a copy of the input, this rank's part kept: twice the bytes a
  // reduce-scatter needs, and never staged.
  void reduceScatterBase(
      Transport& host,
      at::Tensor& output,
      const at::Tensor& input,
      const ReduceSpec& spec) override;

 private:
  const OpContext& call() const;

  const Levels& levels_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string hostAddress_;
  std::string whyNot_;
  std::optional<bool> groupTakes_; // decided at the first collective on CUDA tensors
  const OpContext* call_ = nullptr;
  // Where the collectives' own device work (folds, copies) is queued: a stream of the pool,
  // not the caller's, taken at the first collective.
  std::optional<c10::Stream> stream_;
};

} // namespace dummy_collectives::hierarchy
