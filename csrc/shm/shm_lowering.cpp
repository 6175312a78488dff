// The lowering of a group on one host: each collective is one call of the shared-memory
// algorithms (algorithms.cpp) over the group's transport, or of the device path.
#include "shm/shm_lowering.hpp"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <dummy_collectives/flight_recorder.hpp>
#include "shm/p2p_engine.hpp"
#include "kernels/reduce_kernel.hpp"
#include "c10d/work.hpp"

#include "c10d/host_staging.hpp"
#include "c10d/local_error.hpp"

namespace dummy_collectives {
namespace {

// Fails the group for every rank on an error of this rank alone (local_error.hpp), naming it.
template <typename Body>
void failGroupOnLocalError(ShmTransport& transport, Body&& body) {
  dummy_collectives::failGroupOnLocalError(
      std::forward<Body>(body), [&](const std::string& error) { transport.failOnThisRank(error); });
}

// TRACE: the line of a point-to-point operation, written when it completes (after its
// copy-back), with its time since the call.
P2pEngine::Finish tracedP2p(
    P2pEngine::Finish finish,
    const debug_log::Site& site,
    std::string what,
    const at::Tensor& tensor) {
  what += c10::str(
      " of ", tensor.numel(), " ", tensor.scalar_type(), " elements (",
      debug_log::bytes(tensor.numel() * tensor.element_size()), ")", debug_log::inGroup(site));
  return [finish = std::move(finish), rank = site.rank, what = std::move(what),
          issuedAt = std::chrono::steady_clock::now()] {
    finish();
    debug_log::emit(
        debug_log::Level::kTrace, rank, what + ": done in " + debug_log::elapsedSince(issuedAt));
  };
}

std::vector<algorithms::Span> spansOf(const std::vector<at::Tensor>& tensors) {
  std::vector<algorithms::Span> spans;
  for (const auto& tensor : tensors) {
    spans.push_back(
        {static_cast<std::byte*>(tensor.data_ptr()),
         static_cast<size_t>(tensor.numel()) * tensor.element_size()});
  }
  return spans;
}

// Consecutive ranges of `tensor`'s bytes, `sizes[r]` bytes for rank r.
std::vector<algorithms::Span> spansOf(const at::Tensor& tensor, const std::vector<int64_t>& sizes) {
  auto* next = static_cast<std::byte*>(tensor.data_ptr());
  std::vector<algorithms::Span> spans;
  for (int64_t bytes : sizes) {
    spans.push_back({next, static_cast<size_t>(bytes)});
    next += bytes;
  }
  return spans;
}

} // namespace

ShmLowering::ShmLowering(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    c10::intrusive_ptr<BackendOptions> options,
    GroupJoin join,
    Placement placement,
    debug_log::Site site)
    : options_(std::move(options)), site_(site) {
  logPrefix_ = placement.hostLevel() ? "host level: " : "";
  transport_ = std::make_shared<ShmTransport>(
      store,
      rank,
      size,
      options_->bufferBytes,
      options_->spinMicros,
      options_->peerAccess,
      options_->peerAccessMinSpeed,
      std::vector<GroupSetting>{
          {"one_shot_max_bytes (DUMMY_COLLECTIVES_ONE_SHOT_MAX_BYTES)",
           options_->oneShotMaxBytes},
          {"peer_access_min_bytes (DUMMY_COLLECTIVES_PEER_ACCESS_MIN_BYTES)",
           options_->peerAccessMinBytes},
          {"peer_access_max_bytes (DUMMY_COLLECTIVES_PEER_ACCESS_MAX_BYTES)",
           options_->peerAccessMaxBytes}},
      std::move(join),
      std::move(placement));
  workers_ = std::make_shared<WorkerPool>(
      options_->threads > 0 ? options_->threads : WorkerPool::defaultThreads(size));
  p2p_ = std::make_shared<P2pEngine>(transport_, options_->timeout);
  device_ = makeDeviceCollectives(store, rank, size, *options_);
}

ShmLowering::~ShmLowering() = default; // members go in reverse order: the transport last

std::vector<std::vector<int>> ShmLowering::hosts() const {
  std::vector<int> ranks(transport_->size());
  for (int r = 0; r < transport_->size(); ++r) {
    ranks[r] = r;
  }
  return {ranks};
}

std::string ShmLowering::peerAccess() const {
  return transport_->peerAccessState();
}

std::optional<bool> ShmLowering::sharesCores() const {
  return transport_->sharesCores();
}

std::string ShmLowering::brokenReason() const {
  return transport_->brokenReason();
}

void ShmLowering::abort(const std::string& reason) {
  transport_->abort(reason);
}

void ShmLowering::awaitJoined(std::chrono::milliseconds limit) {
  transport_->awaitEveryRankMapped(std::chrono::steady_clock::now() + limit);
}

std::vector<int> ShmLowering::deadRanks() const {
  return transport_->deadRanks();
}

void ShmLowering::setTimeout(std::chrono::milliseconds timeout) {
  p2p_->setTimeout(timeout);
}

WaitLedger::Totals ShmLowering::waitTotals() const {
  return transport_->waits().totals();
}

void ShmLowering::resetWaits() {
  transport_->waits().reset();
}

void ShmLowering::finishForExit() {
  p2p_->finishForExit();
}

void ShmLowering::logCreation(int me) const {
  using debug_log::bytes;
  const char* part = logPrefix_.c_str();
  if (!logPrefix_.empty()) {
    std::vector<int> ranks;
    for (int r = 0; r < transport_->size(); ++r) {
      ranks.push_back(transport_->label(r));
    }
    DC_LOG(kInfo, me, part, "local rank ", transport_->rank(), " of ", transport_->size(),
           " (the group's ranks on this host: ", c10::Join(", ", ranks), ")");
  }
  DC_LOG(kInfo, me, part, "transport: shared memory, a segment of ",
         bytes(ShmTransport::segmentBytes(transport_->size(), transport_->slotBytes())),
         ", 2 slots of buffer_bytes ", bytes(transport_->slotBytes()), " per rank");
  DC_LOG(kInfo, me, part, "allreduce one-shot up to one_shot_max_bytes ",
         bytes(options_->oneShotMaxBytes), ", peer access ",
         options_->peerAccess
             ? c10::str("from ", bytes(options_->peerAccessMinBytes), " to ",
                        bytes(options_->peerAccessMaxBytes), " (min speed ",
                        options_->peerAccessMinSpeed,
                        ", the group decides at its first collective in that window)")
             : std::string("off (peer_access 0)"),
         ", reduce kernels ", reduceCapability());
  DC_LOG(kInfo, me, part, "threads per rank ", workers_->threads(),
         options_->threads > 0 ? "" : " (auto)", ", spin ",
         options_->spinMicros >= 0
             ? c10::str(options_->spinMicros, " us")
             : std::string("auto (1 ms while ranks have a core each, 2 us where they share)"),
         ", whether ranks share cores is decided at the first collective");
  std::string cuda = "none (CPU-only build)";
  if (device_) {
    cuda = options_->cudaIpc
        ? c10::str("CUDA IPC, 2 device buffers of ", bytes(options_->cudaBufferBytes),
                   " set up at the first CUDA collective (staged through host memory where "
                   "that fails), cuda_host_wait ", options_->cudaHostWait ? "on" : "off")
        : std::string("staged through host memory (cuda_ipc 0)");
  }
  DC_LOG(kInfo, me, part, "CUDA tensors: ", cuda);
}

algorithms::PeerAccessWindow ShmLowering::peerAccessWindow() const {
  return {options_->peerAccessMinBytes, options_->peerAccessMaxBytes};
}

algorithms::AllreducePlan ShmLowering::allreducePlan() const {
  return {options_->oneShotMaxBytes, peerAccessWindow()};
}

// ---- One collective ----------------------------------------------------------------------------

void ShmLowering::run(OpContext& call, const std::function<void()>& collective) {
  transport_->beginOp(call.op, call.timeout);
  failGroupOnLocalError(*transport_, collective);
  if (call.arrival != nullptr) {
    *call.arrival = transport_->arrival();
  }
}

void ShmLowering::allreduce(const OpContext&, at::Tensor& data, const ReduceSpec& spec) {
  algorithms::allreduce(*transport_, data, spec, allreducePlan(), *workers_);
}

void ShmLowering::allreduceCoalesced(
    const OpContext&,
    std::vector<at::Tensor>& data,
    const std::vector<ReduceSpec>& specs) {
  for (size_t i = 0; i < data.size(); ++i) {
    algorithms::allreduce(*transport_, data[i], specs[i], allreducePlan(), *workers_);
  }
}

at::Tensor ShmLowering::allreduceSparse(const OpContext&, const at::Tensor& input) {
  return algorithms::allreduceSparse(*transport_, input);
}

void ShmLowering::reduce(const OpContext&, at::Tensor& data, const ReduceSpec& spec, int root) {
  algorithms::reduce(*transport_, data, spec, root, options_->oneShotMaxBytes, *workers_);
}

void ShmLowering::broadcast(const OpContext&, at::Tensor& data, int root) {
  algorithms::broadcast(*transport_, data, root);
}

void ShmLowering::allgather(
    const OpContext&, const at::Tensor& input, std::vector<at::Tensor>& perRank) {
  algorithms::allgather(*transport_, input, perRank, peerAccessWindow(), workers_.get());
}

void ShmLowering::allgatherInto(const OpContext&, const at::Tensor& input, at::Tensor& output) {
  algorithms::allgatherInto(*transport_, input, output, peerAccessWindow(), workers_.get());
}

void ShmLowering::allgatherCoalesced(
    const OpContext&,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor>& outputs,
    bool byRank) {
  const size_t count = inputs.size();
  for (size_t i = 0; i < count; ++i) {
    if (!byRank) {
      algorithms::allgatherInto(
          *transport_, inputs[i], outputs[i], peerAccessWindow(), workers_.get());
      continue;
    }
    std::vector<at::Tensor> perRank;
    for (int r = 0; r < transport_->size(); ++r) {
      perRank.push_back(outputs[r * count + i]);
    }
    algorithms::allgather(*transport_, inputs[i], perRank, peerAccessWindow(), workers_.get());
  }
}

void ShmLowering::gather(
    const OpContext&, const at::Tensor& input, std::vector<at::Tensor>& outputs, int root) {
  algorithms::gather(*transport_, input, outputs, root, peerAccessWindow(), workers_.get());
}

void ShmLowering::scatter(
    const OpContext&, const std::vector<at::Tensor>& inputs, at::Tensor& output, int root) {
  algorithms::scatter(*transport_, inputs, output, root);
}

void ShmLowering::reduceScatter(
    const OpContext&,
    const std::vector<at::Tensor>& inputs,
    at::Tensor& output,
    const ReduceSpec& spec) {
  algorithms::reduceScatter(*transport_, inputs, output, spec);
}

void ShmLowering::reduceScatterTensors(
    const OpContext&,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor>& outputs,
    const std::vector<ReduceSpec>& specs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    algorithms::reduceScatterTensor(
        *transport_, inputs[i].reshape(-1), outputs[i], specs[i], peerAccessWindow(), *workers_);
  }
}

void ShmLowering::alltoall(
    const OpContext&,
    const at::Tensor& input,
    at::Tensor& output,
    const std::vector<int64_t>& sendBytes,
    const std::vector<int64_t>& recvBytes) {
  algorithms::alltoall(*transport_, spansOf(input, sendBytes), spansOf(output, recvBytes));
}

void ShmLowering::alltoallLists(
    const OpContext&, const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& outputs) {
  algorithms::alltoall(*transport_, spansOf(inputs), spansOf(outputs));
}

void ShmLowering::barrier(const OpContext&) {
  algorithms::barrier(*transport_);
}

// ---- Device tensors ----------------------------------------------------------------------------

DeviceCollectives* ShmLowering::deviceFor(const std::vector<at::Tensor>& tensors) {
  const bool takes =
      device_ && !tensors.empty() && tensors[0].is_cuda() && device_->accepts(tensors);
  return takes ? device_.get() : nullptr;
}

void ShmLowering::runOnDevice(
    OpContext& call,
    DeviceCollectives::Ticket& ticket,
    DummyWork& work,
    const std::function<void(DeviceCollectives&, Transport&)>& body) {
  // The device's part completes later, on its stream; the host's part (handshakes) is done here.
  transport_->beginOp(call.op, call.timeout);
  failGroupOnLocalError(*transport_, [&] {
    device_->run(ticket, work, [&] { body(*device_, *transport_); });
  });
  if (call.arrival != nullptr) {
    *call.arrival = transport_->arrival();
  }
}

// ---- Point-to-point ----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ShmLowering::send(
    std::vector<at::Tensor>& tensors, const PointToPoint& p) {
  // Staged on the caller's thread: the sender's data is taken as it is at the call.
  auto staged = std::make_shared<HostStaging>(tensors[0]);
  const at::Tensor& host = staged->acquire(/*copyIn=*/true);
  auto work = c10::make_intrusive<DummyWork>(
      rank(), c10d::OpType::SEND, p.title, tensors, std::vector<at::Tensor>(), 0, nullptr, p2p_);
  P2pEngine::Finish finish = [staged, record = p.record] {
    staged->release(/*copyOut=*/false);
    flight_recorder::completed(record);
  };
  if (DC_LOG_ENABLED(kTrace)) {
    finish = tracedP2p(
        std::move(finish), site_,
        c10::str("send #", p.number, " to rank ", transport_->label(p.peer)), host);
  }
  p2p_->send(
      work, p.peer, p.tag, host.data_ptr(), host.numel() * host.element_size(), std::move(finish));
  return work;
}

c10::intrusive_ptr<c10d::Work> ShmLowering::recv(
    std::vector<at::Tensor>& tensors, const PointToPoint& p) {
  auto staged = std::make_shared<HostStaging>(tensors[0]);
  at::Tensor& host = staged->acquire(/*copyIn=*/false);
  auto work = c10::make_intrusive<DummyWork>(
      rank(),
      p.peer < 0 ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV,
      p.title,
      tensors, // the profiler records the buffer's shape, as gloo's does
      tensors,
      0,
      nullptr,
      p2p_);
  P2pEngine::Finish finish = [staged, record = p.record] {
    staged->release(/*copyOut=*/true);
    flight_recorder::completed(record);
  };
  if (DC_LOG_ENABLED(kTrace)) {
    finish = tracedP2p(
        std::move(finish),
        site_,
        p.peer < 0 ? c10::str("recvAnysource #", p.number)
                   : c10::str("recv #", p.number, " from rank ", transport_->label(p.peer)),
        host);
  }
  p2p_->recv(
      work, p.peer, p.tag, host.data_ptr(), host.numel() * host.element_size(), std::move(finish));
  return work;
}

} // namespace dummy_collectives
