#include "hierarchy/cross_host_device.hpp"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "hierarchy/two_level.hpp"
#include "ucx/ucx_worker.hpp"

namespace dummy_collectives::hierarchy {
namespace {

class CrossHostTicket final : public DeviceCollectives::Ticket {
 public:
  explicit CrossHostTicket(c10::Device device) : device(device), ready(device.type()) {}
  c10::Device device;
  c10::Event ready; // recorded on the caller's current stream at submission
};

std::string movesCudaKey(int host) {
  return c10::str("dummy_collectives/ucx_moves_cuda/", host);
}

} // namespace

CrossHostDevice::CrossHostDevice(
    const Levels& levels,
    c10::intrusive_ptr<c10d::Store> store,
    std::string hostAddress,
    std::string whyNot)
    : levels_(levels),
      store_(std::move(store)),
      hostAddress_(std::move(hostAddress)),
      whyNot_(std::move(whyNot)) {}

bool CrossHostDevice::groupTakes() {
  if (!whyNot_.empty()) {
    return false;
  }
  if (groupTakes_) {
    return *groupTakes_;
  }
  const Topology& topology = levels_.topology;
  if (levels_.leader()) {
    std::string said = "y";
    try {
      if (!ucx::movesCudaMemory(hostAddress_)) {
        said = "-its UCX moves no CUDA memory (built without CUDA, or no driver found)";
      }
    } catch (const std::exception& e) {
      said = c10::str("-", e.what());
    }
    store_->set(movesCudaKey(topology.host()), std::vector<uint8_t>(said.begin(), said.end()));
  }
  groupTakes_ = true;
  for (int host = 0; host < topology.hostCount() && *groupTakes_; ++host) {
    const std::vector<uint8_t> said = store_->get(movesCudaKey(host));
    if (said.empty() || said[0] != 'y') {
      groupTakes_ = false;
      whyNot_ = c10::str(topology.describeHost(host), ": ",
                         std::string(said.begin() + (said.empty() ? 0 : 1), said.end()));
    }
  }
  return *groupTakes_;
}

std::string CrossHostDevice::describe() const {
  if (!whyNot_.empty()) {
    return c10::str("staged through host memory (", whyNot_, ")");
  }
  if (!groupTakes_) {
    return "in CUDA memory where every host's UCX moves it (known at the first collective on "
           "CUDA tensors)";
  }
  return "in CUDA memory: @device (every host's UCX moves it)";
}

bool CrossHostDevice::accepts(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) {
    return false;
  }
  const c10::Device device = tensors[0].device();
  for (const at::Tensor& t : tensors) {
    if (!t.is_cuda() || t.device() != device || !t.is_contiguous()) {
      return false;
    }
  }
  return true;
}

std::shared_ptr<DeviceCollectives::Ticket> CrossHostDevice::submit(
    const std::vector<at::Tensor>& tensors) {
  const c10::Device device = tensors[0].device();
  auto ticket = std::make_shared<CrossHostTicket>(device);
  const c10::impl::VirtualGuardImpl guard(device.type());
  ticket->ready.record(guard.getStream(device));
  return ticket;
}

void CrossHostDevice::run(Ticket& ticket, DummyWork&, const std::function<void()>& body) {
  auto& mine = static_cast<CrossHostTicket&>(ticket);
  // The links read the tensors outside any stream: what the caller queued must have run.
  mine.ready.synchronize();
  if (!stream_ || stream_->device() != mine.device) {
    const c10::impl::VirtualGuardImpl guard(mine.device.type());
    stream_ = guard.getStreamFromGlobalPool(mine.device);
  }
  const c10::StreamGuard current(*stream_); // sets the device too
  body();
  stream_->synchronize(); // complete on the host: the Work carries no device event
}

const OpContext& CrossHostDevice::call() const {
  TORCH_INTERNAL_ASSERT(call_ != nullptr, "a device collective outside TwoLevelLowering::run");
  return *call_;
}

void CrossHostDevice::allreduce(Transport&, at::Tensor& tensor, const ReduceSpec& spec) {
  two_level::allreduceOnDevice(levels_, call(), tensor, spec);
}

void CrossHostDevice::broadcast(Transport&, at::Tensor& tensor, int root) {
  two_level::broadcastOnDevice(levels_, call(), tensor, root);
}

void CrossHostDevice::allgatherBase(Transport&, at::Tensor& output, const at::Tensor& input) {
  two_level::allgatherOnDevice(levels_, call(), input, output);
}

void CrossHostDevice::allgather(
    Transport&, std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  const int64_t n = input.numel();
  at::Tensor flat = at::empty({static_cast<int64_t>(outputs.size()) * n}, input.options());
  two_level::allgatherOnDevice(levels_, call(), input, flat);
  for (size_t r = 0; r < outputs.size(); ++r) {
    outputs[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outputs[r].sizes()));
  }
}

void CrossHostDevice::reduceScatterBase(
    Transport&, at::Tensor& output, const at::Tensor& input, const ReduceSpec& spec) {
  at::Tensor all = input.clone();
  two_level::allreduceOnDevice(levels_, call(), all, spec);
  const int64_t n = output.numel();
  output.copy_(all.view(-1).narrow(0, levels_.topology.rank() * n, n).view(output.sizes()));
}

} // namespace dummy_collectives::hierarchy
