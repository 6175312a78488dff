// The c10d face of every group: what each collective checks (argument_checks.cpp) and which
// lowering step it is (lowering.hpp); how a collective is issued lives in backend_submission.cpp.
#include <dummy_collectives/backend.hpp>

#include <unistd.h>

#include <c10/util/Exception.h>

#include "c10d/argument_checks.hpp"
#include "c10d/collective_names.hpp"
#include <dummy_collectives/debug_log.hpp>
#include "c10d/exit_registry.hpp"
#include "c10d/monitored_barrier.hpp"
#include <dummy_collectives/param_comms.hpp>
#include "c10d/this_process.hpp"

#include "c10d/backend_submission.hpp"
#include "c10d/host_staging.hpp"

namespace dummy_collectives {
namespace {

using enum CollectiveKind;

const char* zeroModeUnsupported =
    " is not available in zero mode (DUMMY_COLLECTIVES_MODE=zero reproduces PyTorch's "
    "tutorial backend, which implements only allreduce and allgather)";

// What the exit flush needs of a live group. Weak references: they must not keep a destroyed
// group's threads and shared memory alive.
class GroupExitHandle final : public ExitHandle {
 public:
  GroupExitHandle(
      std::weak_ptr<Engine> engine,
      std::weak_ptr<Lowering> lowering,
      flight_recorder::Group* recorded)
      : engine_(std::move(engine)), lowering_(std::move(lowering)), recorded_(recorded) {}

  bool drain() override {
    // Declared so that they are released engine first, lowering last (as ~DummyBackend does).
    auto lowering = lowering_.lock();
    auto engine = engine_.lock();
    if (!engine || !lowering) {
      return false; // destroyed meanwhile
    }
    engine->drain();
    lowering->finishForExit();
    // A rank whose group failed while it was elsewhere (it skipped the collective its peers
    // timed out in) learns it here at the latest: its dump is part of the job's.
    const std::string broken = lowering->brokenReason();
    if (!broken.empty()) {
      flight_recorder::dumpOnFailure(recorded_, broken);
    }
    return true;
  }
  void abort(const std::string& reason) override {
    if (auto lowering = lowering_.lock()) {
      lowering->abort(reason);
    }
  }

 private:
  std::weak_ptr<Engine> engine_;
  std::weak_ptr<Lowering> lowering_;
  flight_recorder::Group* recorded_; // null: not recorded (kept by the recorder for good)
};

// All-to-all's split sizes as the lowerings take them: bytes per rank, from the checked rows.
std::vector<int64_t> bytesPerRank(const std::vector<int64_t>& rows, size_t rowBytes) {
  std::vector<int64_t> bytes;
  for (int64_t n : rows) {
    bytes.push_back(n * static_cast<int64_t>(rowBytes));
  }
  return bytes;
}

} // namespace

DummyBackend::DummyBackend(
    int rank,
    int size,
    c10::intrusive_ptr<BackendOptions> options,
    std::shared_ptr<Lowering> lowering,
    std::vector<int64_t> globalRanks)
    : c10d::Backend(rank, size),
      options_(options ? std::move(options) : c10::make_intrusive<BackendOptions>()),
      lowering_(std::move(lowering)),
      pid_(thisProcessId()) {
  engine_ = std::make_shared<Engine>(Engine::Timing{});
  globalRanks_ = globalRanks;
  if (lowering_) {
    fr_ = flight_recorder::registerGroup(options_->group_name, std::move(globalRanks), rank, size);
    exitHandle_ = std::make_shared<GroupExitHandle>(engine_, lowering_, fr_.get());
    registerForExit(exitHandle_, options_->timeout, rank);
  }
  traceSite_ = {rank, &options_->group_name, true};
  if (DC_LOG_ENABLED(kInfo)) {
    logCreation();
  }
}

DummyBackend::~DummyBackend() {
  if (::getpid() != pid_) {
    // A forked child (that exits normally): the engine threads exist only in the parent and
    // their mutexes and condition variables may be in any state; joining or destroying them
    // hangs. The shared memory is the parent's. Leave it all to the parent.
    leaveToExit(std::move(engine_), std::move(lowering_));
    return;
  }
  engine_.reset(); // runs what is still queued, while the lowering is alive
  if (fr_ && lowering_ && !lowering_->brokenReason().empty()) {
    // As at exit: a rank that was not in the failed collective dumps when it lets go.
    flight_recorder::dumpOnFailure(fr_.get(), lowering_->brokenReason());
  }
}

void DummyBackend::logCreation() const {
  const int me = getRank();
  const std::string& name = options_->group_name;
  const auto hosts = lowering_ ? lowering_->hosts() : std::vector<std::vector<int>>{{}};
  DC_LOG(kInfo, me, "group", name.empty() ? "" : " " + name, ": rank ", getRank(), " of ",
         getSize(),
         hosts.size() == 1 ? ", all on one host" : c10::str(" on ", hosts.size(), " hosts"),
         ", mode ", modeName(mode()), lowering_ ? lowering_->rankPlacement() : std::string());
  if (lowering_) {
    lowering_->logCreation(me);
  }
}

void DummyBackend::setTimeout(std::chrono::milliseconds timeout) {
  options_->timeout = timeout;
  if (auto lowering = currentLowering()) {
    lowering->setTimeout(timeout);
  }
}

void DummyBackend::requireUsable(const char* collective) const {
  requireCreatorProcess(pid_, collective, getRank());
  if (C10_UNLIKELY(shutDown_.load(std::memory_order_acquire))) {
    refuseShutDown(collective);
  }
}

void DummyBackend::requireReal(const char* collective) const {
  TORCH_CHECK(mode() == Mode::kReal, "dummy ", collective, zeroModeUnsupported);
}

std::string DummyBackend::brokenReason() const {
  if (shutDown_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(lifecycleMu_);
    return c10::str("the process group was shut down",
                    failureAtShutdown_.empty() ? "" : " after it failed: ", failureAtShutdown_);
  }
  auto lowering = currentLowering();
  return lowering ? lowering->brokenReason() : std::string();
}

WaitLedger::Totals DummyBackend::waitTotals() const {
  auto lowering = currentLowering();
  if (!lowering) { // zero mode (nothing waits), or shut down
    WaitLedger::Totals none;
    none.timesLast.assign(getSize(), 0);
    none.waitedForNs.assign(getSize(), 0);
    return none;
  }
  return lowering->waitTotals();
}

void DummyBackend::resetWaits() {
  if (auto lowering = currentLowering()) {
    lowering->resetWaits();
  }
}

Checker DummyBackend::checker(const char* collective) const {
  requireUsable(collective);
  return Checker(collective, getRank(), getSize());
}

// ---- The collectives ---------------------------------------------------------------------------
// Each: check on the caller's thread, then one body that stages the tensors into contiguous host
// memory (HostStaging: in place where they already are) and runs its lowering step.

c10::intrusive_ptr<c10d::Work> DummyBackend::allreduce(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].layout() == c10::kSparse) {
    return allreduce_sparse(tensors, opts); // gloo's dispatch: the frontend sends both here
  }
  const CheckedReduction checked = checks::allreduce(checker(kAllreduce), tensors, opts.reduceOp);
  if (mode() == Mode::kZero) {
    return zeroed(kAllreduce, tensors);
  }
  OpDescriptor op = checked.op;
  const ReduceSpec& spec = checked.specs[0];
  if (DeviceCollectives* device = deviceFor(tensors)) {
    if (getSize() == 1 && !spec.premul) {
      // Nothing moves and nothing changes (AVG divides by one): no device work to order, as
      // NCCL does for one rank.
      flight_recorder::completed(stamp(op, tensors, tensors, opts.timeout).record);
      const CollectiveNames& names = namesOf(kAllreduce);
      return DummyWork::completed(getRank(), names.opType, names.title, tensors);
    }
    return submitDevice(
        *device, op, tensors, tensors, issued(opts),
        [tensor = tensors[0], spec](DeviceCollectives& d, Transport& t) mutable {
          d.allreduce(t, tensor, spec);
        });
  }
  return submit(
      op, tensors, tensors, issued(opts),
      [staged = HostStaging(tensors[0]), spec](Lowering& l, const OpContext& c) mutable {
        runStaged(staged, /*copyIn=*/true, /*copyOut=*/true,
                  [&](at::Tensor& host) { l.allreduce(c, host, spec); });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allreduce_sparse(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  const OpDescriptor op =
      checks::allreduceSparse(checker(kAllreduceSparse), tensors, opts.reduceOp);
  requireReal(kAllreduceSparse);
  return submit(
      op, tensors, tensors, issued(opts),
      [tensor = tensors[0]](Lowering& l, const OpContext& c) mutable {
        // Replaces the tensor's indices and values with the sum's (gloo does the same).
        tensor.copy_(l.allreduceSparse(c, tensor));
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  CheckedReduction checked =
      checks::allreduceCoalesced(checker(kAllreduceCoalesced), tensors, opts.reduceOp);
  requireReal(kAllreduceCoalesced);
  return submit(
      checked.op, tensors, tensors, issued(opts),
      [staged = HostStagingList(tensors), specs = std::move(checked.specs)](
          Lowering& l, const OpContext& c) mutable {
        runStaged(staged, /*copyIn=*/true, /*copyOut=*/true,
                  [&](std::vector<at::Tensor>& hosts) { l.allreduceCoalesced(c, hosts, specs); });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::reduce(
    std::vector<at::Tensor>& tensors,
    const c10d::ReduceOptions& opts) {
  const CheckedReduction checked = checks::reduce(checker(kReduce), tensors, opts);
  requireReal(kReduce);
  const int root = static_cast<int>(opts.rootRank);
  return submit(
      checked.op, tensors, tensors, issued(opts),
      [staged = HostStaging(tensors[0]), spec = checked.specs[0], root,
       isRoot = root == getRank()](Lowering& l, const OpContext& c) mutable {
        runStaged(staged, /*copyIn=*/true, /*copyOut=*/isRoot,
                  [&](at::Tensor& host) { l.reduce(c, host, spec, root); });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::broadcast(
    std::vector<at::Tensor>& tensors,
    const c10d::BroadcastOptions& opts) {
  const OpDescriptor op = checks::broadcast(checker(kBroadcast), tensors, opts);
  requireReal(kBroadcast);
  const int root = static_cast<int>(opts.rootRank);
  if (DeviceCollectives* device = deviceFor(tensors)) {
    return submitDevice(
        *device, op, tensors, tensors, issued(opts),
        [tensor = tensors[0], root](DeviceCollectives& d, Transport& t) mutable {
          d.broadcast(t, tensor, root);
        });
  }
  return submit(
      op, tensors, tensors, issued(opts),
      [staged = HostStaging(tensors[0]), root, isRoot = root == getRank()](
          Lowering& l, const OpContext& c) mutable {
        runStaged(staged, /*copyIn=*/isRoot, /*copyOut=*/!isRoot,
                  [&](at::Tensor& host) { l.broadcast(c, host, root); });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op = checks::allgather(checker(kAllgather), outputTensors, inputTensors);
  std::vector<at::Tensor>& outputs = outputTensors[0];
  if (mode() == Mode::kZero) {
    return zeroed(kAllgather, outputs);
  }
  const at::Tensor& input = inputTensors[0];
  std::vector<at::Tensor> touched(outputs);
  touched.push_back(input);
  if (DeviceCollectives* device = deviceFor(touched)) {
    return submitDevice(
        *device, op, inputTensors, outputs, issued(opts),
        [input, outputs](DeviceCollectives& d, Transport& t) mutable {
          d.allgather(t, outputs, input);
        });
  }
  return submit(
      op, inputTensors, outputs, issued(opts),
      [in = HostStaging(input), out = HostStagingList(outputs)](
          Lowering& l, const OpContext& c) mutable {
        runStaged(in, out, [&](at::Tensor& hostIn, std::vector<at::Tensor>& hostOut) {
          l.allgather(c, hostIn, hostOut);
        });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::_allgather_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op =
      checks::allgatherBase(checker(kAllgatherBase), outputBuffer, inputBuffer);
  requireReal(kAllgatherBase);
  if (DeviceCollectives* device = deviceFor({inputBuffer, outputBuffer})) {
    return submitDevice(
        *device, op, {inputBuffer}, {outputBuffer}, issued(opts),
        [input = inputBuffer, output = outputBuffer](DeviceCollectives& d, Transport& t) mutable {
          d.allgatherBase(t, output, input);
        });
  }
  return submit(
      op, {inputBuffer}, {outputBuffer}, issued(opts),
      [in = HostStaging(inputBuffer), out = HostStaging(outputBuffer)](
          Lowering& l, const OpContext& c) mutable {
        runStaged(in, out, [&](at::Tensor& hostIn, at::Tensor& hostOut) {
          l.allgatherInto(c, hostIn, hostOut);
        });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op = checks::allgatherCoalesced(
      checker(kAllgatherCoalesced), outputTensorLists, inputTensors);
  requireReal(kAllgatherCoalesced);
  const std::vector<at::Tensor> outputs = flatten(outputTensorLists); // by rank, then by input
  return submit(
      op, inputTensors, outputs, issued(opts),
      [in = HostStagingList(inputTensors), out = HostStagingList(outputs)](
          Lowering& l, const OpContext& c) mutable {
        runStaged(in, out, [&](std::vector<at::Tensor>& hostIn, std::vector<at::Tensor>& hostOut) {
          l.allgatherCoalesced(c, hostIn, hostOut, /*byRank=*/true);
        });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op = checks::allgatherIntoTensorCoalesced(
      checker(kAllgatherIntoTensorCoalesced), outputs, inputs);
  requireReal(kAllgatherIntoTensorCoalesced);
  return submit(
      op, inputs, outputs, issued(opts),
      [in = HostStagingList(inputs), out = HostStagingList(outputs)](
          Lowering& l, const OpContext& c) mutable {
        runStaged(in, out, [&](std::vector<at::Tensor>& hostIn, std::vector<at::Tensor>& hostOut) {
          l.allgatherCoalesced(c, hostIn, hostOut, /*byRank=*/false);
        });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::GatherOptions& opts) {
  std::vector<at::Tensor> outputs;
  const OpDescriptor op =
      checks::gather(checker(kGather), outputTensors, inputTensors, opts, outputs);
  requireReal(kGather);
  return submit(
      op, inputTensors, outputs, issued(opts),
      [in = HostStaging(inputTensors[0]), out = HostStagingList(outputs), root = op.root](
          Lowering& l, const OpContext& c) mutable {
        runStaged(in, out, [&](at::Tensor& hostIn, std::vector<at::Tensor>& hostOut) {
          l.gather(c, hostIn, hostOut, root);
        });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ScatterOptions& opts) {
  std::vector<at::Tensor> inputs;
  const OpDescriptor op =
      checks::scatter(checker(kScatter), outputTensors, inputTensors, opts, inputs);
  requireReal(kScatter);
  return submit(
      op, inputs, outputTensors, issued(opts),
      [in = HostStagingList(inputs), out = HostStaging(outputTensors[0]), root = op.root](
          Lowering& l, const OpContext& c) mutable {
        runStaged(in, out, [&](std::vector<at::Tensor>& hostIn, at::Tensor& hostOut) {
          l.scatter(c, hostIn, hostOut, root);
        });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::reduce_scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  const CheckedReduction checked = checks::reduceScatter(
      checker(kReduceScatter), outputTensors, inputTensors, opts.reduceOp);
  requireReal(kReduceScatter);
  return submit(
      checked.op, inputTensors[0], outputTensors, issued(opts),
      [in = HostStagingList(inputTensors[0]), out = HostStaging(outputTensors[0]),
       spec = checked.specs[0]](Lowering& l, const OpContext& c) mutable {
        runStaged(in, out, [&](std::vector<at::Tensor>& hostIn, at::Tensor& hostOut) {
          l.reduceScatter(c, hostIn, hostOut, spec);
        });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::_reduce_scatter_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outputs{outputBuffer};
  std::vector<at::Tensor> inputs{inputBuffer};
  return reduceScatterTensors(outputs, inputs, opts, /*coalesced=*/false);
}

c10::intrusive_ptr<c10d::Work> DummyBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return reduceScatterTensors(outputs, inputs, opts, /*coalesced=*/true);
}

c10::intrusive_ptr<c10d::Work> DummyBackend::reduceScatterTensors(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts,
    bool coalesced) {
  const CollectiveKind collective =
      coalesced ? kReduceScatterTensorCoalesced : kReduceScatterBase;
  CheckedReduction checked =
      checks::reduceScatterTensors(checker(collective), outputs, inputs, opts.reduceOp, coalesced);
  requireReal(collective);
  DeviceCollectives* device = coalesced ? nullptr : deviceFor({inputs[0], outputs[0]});
  if (device != nullptr) {
    OpDescriptor op = checked.op;
    op.layout = 0; // the device path's descriptor carries no layout (one tensor)
    return submitDevice(
        *device, op, inputs, outputs, issued(opts),
        [input = inputs[0], output = outputs[0], spec = checked.specs[0]](
            DeviceCollectives& d, Transport& t) mutable {
          d.reduceScatterBase(t, output, input, spec);
        });
  }
  return submit(
      checked.op, inputs, outputs, issued(opts),
      [in = HostStagingList(inputs), out = HostStagingList(outputs),
       specs = std::move(checked.specs)](Lowering& l, const OpContext& c) mutable {
        runStaged(in, out, [&](std::vector<at::Tensor>& hostIn, std::vector<at::Tensor>& hostOut) {
          l.reduceScatterTensors(c, hostIn, hostOut, specs);
        });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::alltoall_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes,
    const c10d::AllToAllOptions& opts) {
  const CheckedAlltoall checked = checks::alltoallBase(
      checker(kAlltoallBase), outputBuffer, inputBuffer, outputSplitSizes, inputSplitSizes);
  requireReal(kAlltoallBase);
  return submit(
      checked.op, {inputBuffer}, {outputBuffer}, issued(opts),
      [in = HostStaging(inputBuffer), out = HostStaging(outputBuffer),
       sendBytes = bytesPerRank(checked.sendRows, checked.sendRowBytes),
       recvBytes = bytesPerRank(checked.recvRows, checked.recvRowBytes)](
          Lowering& l, const OpContext& c) mutable {
        runStaged(in, out, [&](at::Tensor& hostIn, at::Tensor& hostOut) {
          l.alltoall(c, hostIn, hostOut, sendBytes, recvBytes);
        });
      },
      SplitSizes{inputSplitSizes, outputSplitSizes});
}

c10::intrusive_ptr<c10d::Work> DummyBackend::alltoall(
    std::vector<at::Tensor>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllToAllOptions& opts) {
  const OpDescriptor op = checks::alltoall(checker(kAlltoall), outputTensors, inputTensors);
  requireReal(kAlltoall);
  return submit(
      op, inputTensors, outputTensors, issued(opts),
      [in = HostStagingList(inputTensors), out = HostStagingList(outputTensors)](
          Lowering& l, const OpContext& c) mutable {
        runStaged(in, out, [&](std::vector<at::Tensor>& hostIn, std::vector<at::Tensor>& hostOut) {
          l.alltoallLists(c, hostIn, hostOut);
        });
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::barrier(const c10d::BarrierOptions& opts) {
  const OpDescriptor op{.kind = kBarrier};
  requireUsable(namesOf(kBarrier).method);
  requireReal(kBarrier);
  return submit(
      op, {}, {}, issued(opts),
      [](Lowering& l, const OpContext& c) { l.barrier(c); });
}

void DummyBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  requireUsable("monitoredBarrier");
  requireReal("monitoredBarrier");
  dummy_collectives::monitoredBarrier(*this, opts, waitAllRanks, options_->timeout);
}

// ---- Point-to-point ----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> DummyBackend::send(
    std::vector<at::Tensor>& tensors,
    int dstRank,
    int tag) {
  checks::send(checker("send"), tensors, dstRank);
  requireReal("send");
  return lowering_->send(tensors, pointToPoint("send", "dummy:send", dstRank, tag, tensors));
}

c10::intrusive_ptr<c10d::Work> DummyBackend::recv(
    std::vector<at::Tensor>& tensors,
    int srcRank,
    int tag) {
  checks::recv(checker("recv"), tensors, srcRank);
  return receive(tensors, srcRank, tag, "recv");
}

c10::intrusive_ptr<c10d::Work> DummyBackend::recvAnysource(
    std::vector<at::Tensor>& tensors,
    int tag) {
  const Checker check = checker("recvAnysource");
  checks::recv(check, tensors, std::nullopt);
  if (lowering_) {
    const size_t hosts = lowering_->hosts().size();
    // A message may come through shared memory or through a cross-host engine, and neither
    // lets a posted receive be withdrawn once the other one matched: a receive from any source
    // could take two.
    check.require(
        hosts == 1,
        "receiving from any source is not supported in a group whose ranks span ", hosts,
        " hosts; pass the source rank (torch.distributed.recv(tensor, src=...))");
  }
  return receive(tensors, -1, tag, "recvAnysource");
}

c10::intrusive_ptr<c10d::Work> DummyBackend::receive(
    std::vector<at::Tensor>& tensors,
    int srcRank,
    int tag,
    const char* what) {
  requireReal(what);
  checker(what).writable(tensors);
  return lowering_->recv(
      tensors,
      pointToPoint(
          what, srcRank < 0 ? "dummy:recvAnySource" : "dummy:recv", srcRank, tag, tensors));
}

} // namespace dummy_collectives
