#pragma once

#include <optional>

#include <ATen/ATen.h>
#include <c10/core/Event.h>

namespace dummy_collectives {

// A user tensor as the host algorithms need it: contiguous, in host memory. Contiguous CPU
// tensors are used in place; anything else (CUDA tensors, non-contiguous views) is copied in
// before the collective runs and back after it.
//
// Made on the caller's thread: for a device tensor it records an event on the caller's current
// stream, and the engine thread waits on that event before reading, so the collective sees
// everything the caller queued before it (the NCCL ordering rule).
class HostStaging {
 public:
  explicit HostStaging(at::Tensor user);

  // Engine thread. `copyIn` false for pure outputs (their contents are never read).
  at::Tensor& acquire(bool copyIn);
  // Engine thread. Copies the host result back into the user's tensor if it was staged.
  void release(bool copyOut);

 private:
  at::Tensor user_;
  at::Tensor host_;
  std::optional<c10::Event> ready_;
};

// HostStaging for a list of tensors.
class HostStagingList {
 public:
  explicit HostStagingList(const std::vector<at::Tensor>& users);
  std::vector<at::Tensor> acquire(bool copyIn);
  void release(bool copyOut);

 private:
  std::vector<HostStaging> items_;
};

} // namespace dummy_collectives
