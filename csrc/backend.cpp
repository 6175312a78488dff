#include <dummy_collectives/backend.hpp>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <dummy_collectives/algorithms.hpp>
#include <dummy_collectives/engine.hpp>
#include <dummy_collectives/shm_transport.hpp>
#include <dummy_collectives/work.hpp>

#include "host_staging.hpp"

namespace dummy_collectives {
namespace {

// Argument checks shared by every collective. They run on the caller's thread before anything
// is enqueued, so a bad call raises at once and leaves the group usable.
class Checker {
 public:
  Checker(const char* collective, int rank, int size)
      : collective_(collective), rank_(rank), size_(size) {}

  template <typename... Args>
  void require(bool ok, const Args&... why) const {
    TORCH_CHECK_VALUE(ok, "dummy ", collective_, " (rank ", rank_, "): ", why...);
  }

  void tensor(const at::Tensor& t, const char* what) const {
    require(t.defined(), what, " is an undefined tensor");
    require(
        t.layout() == c10::kStrided,
        what,
        " is a ",
        t.layout(),
        " tensor; only dense (strided) tensors are supported");
    require(
        t.device().is_cpu() || t.device().is_cuda(),
        what,
        " is on device '",
        t.device(),
        "'; dummy supports cpu and cuda tensors");
  }

  void single(const std::vector<at::Tensor>& tensors, const char* what) const {
    require(
        tensors.size() == 1,
        "expected a list of exactly 1 ",
        what,
        " tensor, got ",
        tensors.size(),
        " (one tensor per process)");
    tensor(tensors[0], what);
  }

  void root(int64_t root) const {
    require(
        root >= 0 && root < size_,
        "root rank ",
        root,
        " is out of range for a group of ",
        size_,
        " ranks");
  }

  void like(const at::Tensor& t, const at::Tensor& ref, int64_t numel, const char* what) const {
    tensor(t, what);
    require(
        t.scalar_type() == ref.scalar_type(),
        what,
        " has dtype ",
        t.scalar_type(),
        " but the input has dtype ",
        ref.scalar_type());
    require(
        t.device() == ref.device(),
        what,
        " is on ",
        t.device(),
        " but the input is on ",
        ref.device());
    require(
        t.numel() == numel,
        what,
        " has ",
        t.numel(),
        " elements; expected ",
        numel);
  }

 private:
  const char* collective_;
  int rank_;
  int size_;
};

const char* zeroModeUnsupported =
    " is not available in zero mode (DUMMY_COLLECTIVES_MODE=zero reproduces PyTorch's "
    "tutorial backend, which implements only allreduce and allgather)";

} // namespace

DummyBackend::DummyBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    c10::intrusive_ptr<BackendOptions> options)
    : c10d::Backend(rank, size),
      options_(options ? std::move(options) : c10::make_intrusive<BackendOptions>()) {
  if (options_->mode == Mode::kReal) {
    transport_ = std::make_shared<ShmTransport>(
        store,
        rank,
        size,
        options_->bufferBytes,
        WaitPolicy::forGroup(size, options_->spinMicros));
  }
  engine_ = std::make_shared<Engine>(Engine::Timing{});
}

DummyBackend::~DummyBackend() {
  engine_.reset(); // runs what is still queued, while the transport is alive
}

c10::intrusive_ptr<c10d::Work> DummyBackend::submit(
    OpDescriptor op,
    c10d::OpType opType,
    const char* profilingTitle,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    std::chrono::milliseconds timeout,
    Algorithm algorithm) {
  op.seq = ++seq_;
  const auto limit = timeout == c10d::kUnsetTimeout ? options_->timeout : timeout;
  // Raw transport pointer: the engine (which runs bodies) is destroyed before the transport.
  auto body = [transport = transport_.get(), op, limit, algorithm = std::move(algorithm)]() {
    transport->beginOp(op, Clock::now() + limit);
    algorithm(*transport);
  };
  auto work = c10::make_intrusive<DummyWork>(
      getRank(), opType, profilingTitle, inputs, std::move(outputs), op.seq, std::move(body), engine_);
  engine_->enqueue(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> DummyBackend::zeroed(
    c10d::OpType opType,
    const char* profilingTitle,
    std::vector<at::Tensor> outputs) {
  for (auto& tensor : outputs) {
    tensor.zero_();
  }
  return DummyWork::completed(getRank(), opType, profilingTitle, std::move(outputs));
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allreduce(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  const Checker check("allreduce", getRank(), getSize());
  check.single(tensors, "input");
  const at::Tensor& tensor = tensors[0];
  const ReduceSpec spec =
      resolveReduce(opts.reduceOp, tensor.scalar_type(), getSize(), "allreduce", getRank());
  if (mode() == Mode::kZero) {
    return zeroed(c10d::OpType::ALLREDUCE, "dummy:all_reduce", tensors);
  }
  OpDescriptor op;
  op.kind = CollectiveKind::kAllreduce;
  op.dtype = static_cast<int32_t>(tensor.scalar_type());
  op.numel = tensor.numel();
  op.reduceOp = static_cast<int32_t>(opts.reduceOp.op_);
  auto staged = std::make_shared<HostStaging>(tensor);
  return submit(
      op,
      c10d::OpType::ALLREDUCE,
      "dummy:all_reduce",
      tensors,
      tensors,
      opts.timeout,
      [staged, spec, oneShot = options_->oneShotMaxBytes](Transport& t) {
        at::Tensor& host = staged->acquire(/*copyIn=*/true);
        algorithms::allreduce(t, host, spec, oneShot);
        staged->release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const Checker check("allgather", getRank(), getSize());
  check.single(inputTensors, "input");
  const at::Tensor& input = inputTensors[0];
  check.require(
      outputTensors.size() == 1,
      "expected 1 list of output tensors, got ",
      outputTensors.size());
  std::vector<at::Tensor>& outputs = outputTensors[0];
  check.require(
      static_cast<int>(outputs.size()) == getSize(),
      "the output list has ",
      outputs.size(),
      " tensors; it needs one per rank (",
      getSize(),
      ")");
  for (const auto& output : outputs) {
    check.like(output, input, input.numel(), "an output tensor");
  }
  if (mode() == Mode::kZero) {
    return zeroed(c10d::OpType::ALLGATHER, "dummy:all_gather", outputs);
  }
  OpDescriptor op;
  op.kind = CollectiveKind::kAllgather;
  op.dtype = static_cast<int32_t>(input.scalar_type());
  op.numel = input.numel();
  auto in = std::make_shared<HostStaging>(input);
  auto outs = std::make_shared<std::vector<HostStaging>>(outputs.begin(), outputs.end());
  return submit(
      op,
      c10d::OpType::ALLGATHER,
      "dummy:all_gather",
      inputTensors,
      outputs,
      opts.timeout,
      [in, outs](Transport& t) {
        std::vector<at::Tensor> hostOutputs;
        hostOutputs.reserve(outs->size());
        for (auto& out : *outs) {
          hostOutputs.push_back(out.acquire(/*copyIn=*/false));
        }
        algorithms::allgather(t, in->acquire(/*copyIn=*/true), hostOutputs);
        in->release(/*copyOut=*/false);
        for (auto& out : *outs) {
          out.release(/*copyOut=*/true);
        }
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::_allgather_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::AllgatherOptions& opts) {
  const Checker check("_allgather_base", getRank(), getSize());
  check.tensor(inputBuffer, "input");
  check.like(outputBuffer, inputBuffer, inputBuffer.numel() * getSize(), "the output tensor");
  TORCH_CHECK(mode() == Mode::kReal, "dummy _allgather_base", zeroModeUnsupported);
  OpDescriptor op;
  op.kind = CollectiveKind::kAllgatherBase;
  op.dtype = static_cast<int32_t>(inputBuffer.scalar_type());
  op.numel = inputBuffer.numel();
  auto in = std::make_shared<HostStaging>(inputBuffer);
  auto out = std::make_shared<HostStaging>(outputBuffer);
  return submit(
      op,
      c10d::OpType::_ALLGATHER_BASE,
      "dummy:_allgather_base",
      {inputBuffer},
      {outputBuffer},
      opts.timeout,
      [in, out](Transport& t) {
        at::Tensor& hostOut = out->acquire(/*copyIn=*/false);
        algorithms::allgatherInto(t, in->acquire(/*copyIn=*/true), hostOut);
        in->release(/*copyOut=*/false);
        out->release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::broadcast(
    std::vector<at::Tensor>& tensors,
    const c10d::BroadcastOptions& opts) {
  const Checker check("broadcast", getRank(), getSize());
  check.single(tensors, "input");
  check.root(opts.rootRank);
  check.require(opts.rootTensor == 0, "rootTensor must be 0, got ", opts.rootTensor);
  TORCH_CHECK(mode() == Mode::kReal, "dummy broadcast", zeroModeUnsupported);
  const at::Tensor& tensor = tensors[0];
  OpDescriptor op;
  op.kind = CollectiveKind::kBroadcast;
  op.dtype = static_cast<int32_t>(tensor.scalar_type());
  op.numel = tensor.numel();
  op.root = static_cast<int32_t>(opts.rootRank);
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == getRank();
  auto staged = std::make_shared<HostStaging>(tensor);
  return submit(
      op,
      c10d::OpType::BROADCAST,
      "dummy:broadcast",
      tensors,
      tensors,
      opts.timeout,
      [staged, root, isRoot](Transport& t) {
        algorithms::broadcast(t, staged->acquire(/*copyIn=*/isRoot), root);
        staged->release(/*copyOut=*/!isRoot);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::barrier(const c10d::BarrierOptions& opts) {
  TORCH_CHECK(mode() == Mode::kReal, "dummy barrier", zeroModeUnsupported);
  OpDescriptor op;
  op.kind = CollectiveKind::kBarrier;
  return submit(
      op, c10d::OpType::BARRIER, "dummy:barrier", {}, {}, opts.timeout, [](Transport& t) {
        algorithms::barrier(t);
      });
}

} // namespace dummy_collectives
