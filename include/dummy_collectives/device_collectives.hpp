#pragma once

// The backend's view of collectives on device (CUDA) tensors that move through device memory
// rather than host staging. CUDA-free on purpose: the CPU-only build compiles the backend
// unchanged and simply has none (makeDeviceCollectives returns null).

#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <dummy_collectives/options.hpp>
#include <dummy_collectives/reduce_ops.hpp>
#include <dummy_collectives/transport.hpp>

namespace dummy_collectives {

class DummyWork;

class DeviceCollectives {
 public:
  // What a collective records at submission for its run (its place in the caller's stream).
  class Ticket {
   public:
    virtual ~Ticket() = default;
  };

  virtual ~DeviceCollectives() = default;

  // Caller's thread: whether a collective over `tensors` takes the device path (all on this
  // rank's device for the group). The first call sets the path up with every rank through the
  // Store, like NCCL's first collective; if that fails on any rank, every rank answers false
  // from then on and stages through host memory.
  virtual bool accepts(const std::vector<at::Tensor>& tensors) = 0;

  // Caller's thread, at submission: orders the collective after the work already queued on the
  // caller's current stream, and keeps the tensors' memory from reuse until the device work is
  // done (record_stream).
  virtual std::shared_ptr<Ticket> submit(const std::vector<at::Tensor>& tensors) = 0;

  // Engine thread: runs `body` (calls to the collectives below) with the backend stream current
  // and ordered after the ticket, then gives `work` the completion event of what it queued.
  virtual void run(Ticket& ticket, DummyWork& work, const std::function<void()>& body) = 0;

  // Inside run(). In place; any layout (non-contiguous tensors go through a contiguous copy).
  virtual void allreduce(Transport& host, at::Tensor& tensor, const ReduceSpec& spec) = 0;
  virtual void broadcast(Transport& host, at::Tensor& tensor, int root) = 0;
  virtual void allgatherBase(Transport& host, at::Tensor& output, const at::Tensor& input) = 0;
  // outputs[r] receives rank r's input.
  virtual void allgather(
      Transport& host,
      std::vector<at::Tensor>& outputs,
      const at::Tensor& input) = 0;
  virtual void reduceScatterBase(
      Transport& host,
      at::Tensor& output,
      const at::Tensor& input,
      const ReduceSpec& spec) = 0;
};

// Sources foldOnDevice takes at most (a kernel's arguments hold their addresses).
constexpr int kMaxDeviceFoldSources = 16;

// Queues on `out`'s device's current stream: out = sources[0] op ... op sources[n-1], in that
// order, with the host kernels' arithmetic (so a result folded on any rank is the same bits),
// then AVG's division or PREMUL_SUM's factor as `spec` says. `out` may be one of the sources.
// CUDA builds only (csrc/cuda/device_fold.cpp): elsewhere no device tensor exists to fold.
void foldOnDevice(const ReduceSpec& spec, const at::Tensor& out,
                  const std::vector<at::Tensor>& sources);

// Blocks until what is queued on the current stream of `t`'s device has run; nothing for host
// tensors. For memory a network engine reads or writes next, outside any stream.
void waitForDevice(const at::Tensor& t);

// The CUDA IPC implementation in CUDA builds (csrc/cuda/cuda_collectives.cpp); null otherwise.
std::shared_ptr<DeviceCollectives> makeDeviceCollectives(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    const BackendOptions& options);

} // namespace dummy_collectives
