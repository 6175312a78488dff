// DeviceCollectives for CUDA tensors: the CUDA IPC transport, the backend stream and NCCL-style
// stream ordering around each collective.
#include <optional>

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/device_algorithms.hpp"
#include "cuda/device_reduce.hpp"
#include "cuda/ipc_transport.hpp"
#include <dummy_collectives/device_collectives.hpp>
#include "c10d/work.hpp"

namespace dummy_collectives::cuda {
namespace {

class CudaTicket final : public DeviceCollectives::Ticket {
 public:
  // Recorded on the caller's current stream at submission; none where the host waited for
  // that stream instead (CudaCollectives::hostOrdered()).
  std::optional<c10::Event> ready;
};

// A tensor as the device algorithms need it: contiguous. Non-contiguous ones are copied to a
// contiguous tensor (on the backend stream) and back afterwards.
class Contiguous {
 public:
  Contiguous(at::Tensor& user, bool copyIn) : user_(user) {
    if (user.is_contiguous()) {
      tensor = user;
    } else {
      tensor = copyIn ? user.contiguous() : at::empty(user.sizes(), user.options());
    }
  }
  void copyBack() {
    if (!tensor.is_same(user_)) {
      user_.copy_(tensor);
    }
  }
  at::Tensor tensor;

 private:
  at::Tensor& user_;
};

class CudaCollectives final : public DeviceCollectives {
 public:
  CudaCollectives(
      c10::intrusive_ptr<c10d::Store> store,
      int rank,
      int size,
      const BackendOptions& options)
      : store_(std::move(store)),
        rank_(rank),
        size_(size),
        enabled_(options.cudaIpc),
        bufferBytes_(options.cudaBufferBytes),
        hostWait_(options.cudaHostWait) {}

  bool accepts(const std::vector<at::Tensor>& tensors) override {
    if (unavailable_ || tensors.empty() || size_ > kMaxDeviceSources) {
      return false;
    }
    const c10::Device device = tensors[0].device();
    for (const auto& t : tensors) {
      if (!t.is_cuda() || t.device() != device) {
        return false;
      }
    }
    if (!transport_) {
      // First collective on CUDA tensors: set up with every rank (all of them are here, by the
      // same argument as NCCL's lazy communicator: collectives are issued in the same order).
      stream_.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
      transport_ = CudaIpcTransport::create(
          store_, rank_, size_, device, *stream_, bufferBytes_, enabled_, hostWait_);
      if (!transport_) {
        unavailable_ = true;
        return false;
      }
    }
    return device == transport_->device();
  }

  std::shared_ptr<Ticket> submit(const std::vector<at::Tensor>& tensors) override {
    const c10::Device device = transport_->device();
    auto ticket = std::make_shared<CudaTicket>();
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device.index());
    if (hostOrdered()) {
      // Recording an event would make this process take the GPU from the leader (a time-slice
      // hand-over: docs/benchmarks.md, "Why the leader does the GPU work"); waiting for the
      // stream here queues nothing.
      caller.synchronize();
    } else {
      ticket->ready.emplace(c10::DeviceType::CUDA);
      ticket->ready->record(caller);
    }
    for (const auto& t : tensors) {
      // The caller may free these before the backend stream is done with them.
      if (t.defined() && t.storage().data_ptr().get() != nullptr) {
        c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), *stream_);
      }
    }
    return ticket;
  }

  void run(Ticket& ticket, DummyWork& work, const std::function<void()>& body) override {
    auto& cudaTicket = static_cast<CudaTicket&>(ticket);
    c10::cuda::CUDAStreamGuard guard(*stream_); // sets the device too
    if (cudaTicket.ready) {
      cudaTicket.ready->block(*stream_);
    } else {
      // Host-ordered: what earlier collectives queued on our stream (they may write these
      // tensors) completes before the leader touches them.
      stream_->synchronize();
    }
    completedOnHost_ = false;
    body();
    if (completedOnHost_) {
      return; // nothing queued on our stream: the work is complete now, on the host
    }
    c10::Event done(c10::DeviceType::CUDA);
    done.record(*stream_);
    work.setDeviceCompletion(*stream_, std::move(done));
  }

  void allreduce(Transport& host, at::Tensor& tensor, const ReduceSpec& spec) override {
    Contiguous t(tensor, /*copyIn=*/true);
    if (transport_->sharesOneGpu() && size_ > 1) {
      const bool inPlace = t.tensor.is_same(tensor);
      if (hostOrdered() && !inPlace) {
        stream_->synchronize(); // the contiguous copy, which the leader is about to read
      }
      if (cuda::allreduceOnSharedGpu(*transport_, host, t.tensor, spec)) {
        t.copyBack();
        completedOnHost_ = hostOrdered() && inPlace;
        return;
      }
    }
    cuda::allreduce(*transport_, host, t.tensor, spec);
    t.copyBack();
  }

  void broadcast(Transport& host, at::Tensor& tensor, int root) override {
    Contiguous t(tensor, /*copyIn=*/rank_ == root);
    cuda::broadcast(*transport_, host, t.tensor, root);
    t.copyBack();
  }

  void allgatherBase(Transport& host, at::Tensor& output, const at::Tensor& input) override {
    Contiguous out(output, /*copyIn=*/false);
    cuda::allgatherBase(*transport_, host, out.tensor, input.contiguous());
    out.copyBack();
  }

  void allgather(
      Transport& host,
      std::vector<at::Tensor>& outputs,
      const at::Tensor& input) override {
    // Through one flat tensor (allocated on the backend stream), then into the list.
    const int64_t n = input.numel();
    at::Tensor flat = at::empty({static_cast<int64_t>(outputs.size()) * n}, input.options());
    cuda::allgatherBase(*transport_, host, flat, input.contiguous());
    for (size_t r = 0; r < outputs.size(); ++r) {
      outputs[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outputs[r].sizes()));
    }
  }

  void reduceScatterBase(
      Transport& host,
      at::Tensor& output,
      const at::Tensor& input,
      const ReduceSpec& spec) override {
    Contiguous out(output, /*copyIn=*/false);
    cuda::reduceScatterBase(*transport_, host, out.tensor, input.contiguous(), spec);
    out.copyBack();
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int size_;
  bool enabled_;
  size_t bufferBytes_;
  bool hostWait_;
  // Ranks other than the leader on a GPU all ranks share: ordered after the caller's stream on
  // the host, so that they queue no GPU work of their own (see allreduceOnSharedGpu).
  bool hostOrdered() const {
    return transport_->sharesOneGpu() && rank_ != kSharedGpuLeader;
  }

  bool unavailable_ = false; // set up failed on some rank: stage through the host
  bool completedOnHost_ = false; // the running body queued nothing on the backend stream
  std::optional<c10::cuda::CUDAStream> stream_;
  std::unique_ptr<CudaIpcTransport> transport_;
};

} // namespace

std::shared_ptr<DeviceCollectives> makeCudaCollectives(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    const BackendOptions& options) {
  return std::make_shared<CudaCollectives>(store, rank, size, options);
}

} // namespace dummy_collectives::cuda
