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

// Engine thread. Runs `body(host)` on `staged` (a HostStaging or a HostStagingList) in host
// memory: its contents copied in first if `copyIn`, the result copied back after if `copyOut`.
template <typename Staged, typename Body>
void runStaged(Staged& staged, bool copyIn, bool copyOut, Body&& body) {
  auto&& host = staged.acquire(copyIn);
  body(host);
  staged.release(copyOut);
}

// Engine thread. Runs `body(hostIn, hostOut)` on an operation's inputs and outputs in host
// memory: the inputs copied in, the outputs (never read) copied back after.
template <typename In, typename Out, typename Body>
void runStaged(In& in, Out& out, Body&& body) {
  auto&& hostIn = in.acquire(/*copyIn=*/true);
  auto&& hostOut = out.acquire(/*copyIn=*/false);
  body(hostIn, hostOut);
  in.release(/*copyOut=*/false);
  out.release(/*copyOut=*/true);
}

} // namespace dummy_collectives
