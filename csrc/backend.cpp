// The c10d face of a group on one host: what each collective checks (argument_checks.cpp) and
// which algorithm it runs (algorithms.cpp, or the device path); how a collective is issued lives
// in backend_submission.cpp.
#include <dummy_collectives/backend.hpp>

#include <unistd.h>

#include <c10/util/Exception.h>

#include <dummy_collectives/algorithms.hpp>
#include <dummy_collectives/argument_checks.hpp>
#include <dummy_collectives/debug_log.hpp>
#include <dummy_collectives/exit_registry.hpp>
#include <dummy_collectives/monitored_barrier.hpp>
#include <dummy_collectives/p2p_engine.hpp>
#include <dummy_collectives/param_comms.hpp>
#include <dummy_collectives/this_process.hpp>

#include "backend_submission.hpp"
#include "host_staging.hpp"

namespace dummy_collectives {
namespace {

const char* zeroModeUnsupported =
    " is not available in zero mode (DUMMY_COLLECTIVES_MODE=zero reproduces PyTorch's "
    "tutorial backend, which implements only allreduce and allgather)";

// What the exit flush needs of a live backend. Weak references: they must not keep a destroyed
// group's threads and shared memory alive.
class ShmExitHandle final : public ExitHandle {
 public:
  ShmExitHandle(
      std::weak_ptr<Engine> engine,
      std::weak_ptr<P2pEngine> p2p,
      std::weak_ptr<ShmTransport> transport,
      flight_recorder::Group* recorded)
      : engine_(std::move(engine)),
        p2p_(std::move(p2p)),
        transport_(std::move(transport)),
        recorded_(recorded) {}

  bool drain() override {
    // Declared so that they are released engine first, transport last (as ~DummyBackend does).
    auto transport = transport_.lock();
    auto p2p = p2p_.lock();
    auto engine = engine_.lock();
    if (!engine || !p2p || !transport) {
      return false; // destroyed meanwhile
    }
    engine->drain();
    p2p->finishForExit();
    // A rank whose group failed while it was elsewhere (it skipped the collective its peers
    // timed out in) learns it here at the latest: its dump is part of the job's.
    const std::string broken = transport->brokenReason();
    if (!broken.empty()) {
      flight_recorder::dumpOnFailure(recorded_, broken);
    }
    return true;
  }
  void abort(const std::string& reason) override {
    if (auto transport = transport_.lock()) {
      transport->abort(reason);
    }
  }

 private:
  std::weak_ptr<Engine> engine_;
  std::weak_ptr<P2pEngine> p2p_;
  std::weak_ptr<ShmTransport> transport_;
  flight_recorder::Group* recorded_; // null: not recorded (kept by the recorder for good)
};

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

} // namespace

DummyBackend::DummyBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    c10::intrusive_ptr<BackendOptions> options,
    Placement hostLevel,
    std::vector<int64_t> globalRanks,
    std::vector<int32_t> pids)
    : c10d::Backend(rank, size),
      options_(options ? std::move(options) : c10::make_intrusive<BackendOptions>()),
      hostLevel_(!hostLevel.groupRanks.empty()),
      pid_(thisProcessId()) {
  if (options_->mode == Mode::kReal) {
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
        GroupJoin{options_->timeout, std::move(pids)},
        std::move(hostLevel));
    workers_ = std::make_shared<WorkerPool>(
        options_->threads > 0 ? options_->threads : WorkerPool::defaultThreads(size));
    p2p_ = std::make_shared<P2pEngine>(transport_, options_->timeout);
    device_ = makeDeviceCollectives(store, rank, size, *options_);
  }
  engine_ = std::make_shared<Engine>(Engine::Timing{});
  if (transport_ && !hostLevel_) { // a host level's operations are steps of its group's
    fr_ = flight_recorder::registerGroup(options_->group_name, std::move(globalRanks), rank, size);
  }
  if (transport_) {
    exitHandle_ = std::make_shared<ShmExitHandle>(engine_, p2p_, transport_, fr_.get());
    registerForExit(exitHandle_, options_->timeout, rank);
  }
  traceSite_ = {transport_ ? transport_->label(rank) : rank, &options_->group_name, !hostLevel_};
  if (DC_LOG_ENABLED(kInfo)) {
    logCreation();
  }
}

DummyBackend::~DummyBackend() {
  if (::getpid() != pid_) {
    // A forked child (that exits normally): the engine threads exist only in the parent and
    // their mutexes and condition variables may be in any state; joining or destroying them
    // hangs. The shared memory is the parent's. Leave it all to the parent.
    new std::shared_ptr<Engine>(std::move(engine_));
    new std::shared_ptr<P2pEngine>(std::move(p2p_));
    new std::shared_ptr<ShmTransport>(std::move(transport_));
    return;
  }
  engine_.reset(); // runs what is still queued, while the transport is alive
  p2p_.reset();
  if (fr_ && transport_ && !transport_->brokenReason().empty()) {
    // As at exit: a rank that was not in the failed collective dumps when it lets go.
    flight_recorder::dumpOnFailure(fr_.get(), transport_->brokenReason());
  }
}

void DummyBackend::logCreation() const {
  using debug_log::bytes;
  const int me = traceSite_.rank;
  // A host level is a part of its group (HierarchicalBackend logs the group itself).
  const char* part = hostLevel_ ? "host level: " : "";
  if (hostLevel_) {
    std::vector<int> ranks;
    for (int r = 0; r < getSize(); ++r) {
      ranks.push_back(transport_->label(r));
    }
    DC_LOG(kInfo, me, part, "local rank ", getRank(), " of ", getSize(),
           " (the group's ranks on this host: ", c10::Join(", ", ranks), ")");
  } else {
    const std::string& name = options_->group_name;
    DC_LOG(kInfo, me, "group", name.empty() ? "" : " " + name, ": rank ", getRank(), " of ",
           getSize(), ", all on one host, mode ", modeName(mode()));
  }
  if (!transport_) {
    return; // zero mode: nothing moves
  }
  DC_LOG(kInfo, me, part, "transport: shared memory, a segment of ",
         bytes(ShmTransport::segmentBytes(getSize(), transport_->slotBytes())),
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

void DummyBackend::abort() {
  if (transport_) {
    transport_->abort(c10::str(
        "rank ", getRank(), " (pid ", pid_, ") aborted the process group (ProcessGroup.abort)"));
  }
}

void DummyBackend::abortWith(const std::string& reason) {
  if (transport_) {
    transport_->abort(reason);
  }
}

void DummyBackend::setTimeout(std::chrono::milliseconds timeout) {
  options_->timeout = timeout;
  if (p2p_) {
    p2p_->setTimeout(timeout);
  }
}

void DummyBackend::requireCreator(const char* collective) const {
  requireCreatorProcess(pid_, collective, getRank());
}

void DummyBackend::requireReal(const char* collective) const {
  TORCH_CHECK(mode() == Mode::kReal, "dummy ", collective, zeroModeUnsupported);
}

std::string DummyBackend::peerAccess() const {
  return transport_ ? transport_->peerAccessState() : "off";
}

std::optional<bool> DummyBackend::sharesCores() const {
  return transport_ ? transport_->sharesCores() : std::nullopt;
}

std::string DummyBackend::brokenReason() const {
  return transport_ ? transport_->brokenReason() : std::string();
}

WaitLedger::Totals DummyBackend::waitTotals() const {
  if (!transport_) { // zero mode: nothing waits
    WaitLedger::Totals none;
    none.timesLast.assign(getSize(), 0);
    none.waitedForNs.assign(getSize(), 0);
    return none;
  }
  return transport_->waits().totals();
}

void DummyBackend::resetWaits() {
  if (transport_) {
    transport_->waits().reset();
  }
}

algorithms::PeerAccessWindow DummyBackend::peerAccessWindow() const {
  return {options_->peerAccessMinBytes, options_->peerAccessMaxBytes};
}

algorithms::AllreducePlan DummyBackend::allreducePlan() const {
  return {options_->oneShotMaxBytes, peerAccessWindow()};
}

Checker DummyBackend::checker(const char* collective) const {
  requireCreator(collective);
  return Checker(collective, getRank(), getSize());
}

// ---- The collectives ---------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> DummyBackend::allreduce(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].layout() == c10::kSparse) {
    return allreduce_sparse(tensors, opts); // gloo's dispatch: the frontend sends both here
  }
  const CheckedReduction checked = checks::allreduce(checker("allreduce"), tensors, opts.reduceOp);
  if (mode() == Mode::kZero) {
    return zeroed(c10d::OpType::ALLREDUCE, "dummy:all_reduce", tensors);
  }
  OpDescriptor op = checked.op;
  const ReduceSpec& spec = checked.specs[0];
  if (onDevicePath(tensors)) {
    if (getSize() == 1 && !spec.premul) {
      // Nothing moves and nothing changes (AVG divides by one): no device work to order, as
      // NCCL does for one rank.
      flight_recorder::completed(stamp(op, tensors, tensors, opts.timeout).record);
      return DummyWork::completed(getRank(), c10d::OpType::ALLREDUCE, "dummy:all_reduce", tensors);
    }
    return submitDevice(
        op, c10d::OpType::ALLREDUCE, "dummy:all_reduce", tensors, tensors, issued(opts),
        [tensor = tensors[0], spec](DeviceCollectives& d, Transport& t) mutable {
          d.allreduce(t, tensor, spec);
        });
  }
  return submit(
      op, c10d::OpType::ALLREDUCE, "dummy:all_reduce", tensors, tensors, issued(opts),
      [staged = HostStaging(tensors[0]), spec, plan = allreducePlan(), workers = workers_](
          Transport& t) mutable {
        at::Tensor& host = staged.acquire(/*copyIn=*/true);
        algorithms::allreduce(t, host, spec, plan, *workers);
        staged.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allreduce_sparse(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  const OpDescriptor op =
      checks::allreduceSparse(checker("allreduce_sparse"), tensors, opts.reduceOp);
  requireReal("allreduce_sparse");
  return submit(
      op, c10d::OpType::_ALLREDUCE_SPARSE, "dummy:sparse_all_reduce", tensors, tensors,
      issued(opts), [tensor = tensors[0]](Transport& t) {
        // Replaces the tensor's indices and values with the sum's (gloo does the same).
        tensor.copy_(algorithms::allreduceSparse(t, tensor));
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  CheckedReduction checked =
      checks::allreduceCoalesced(checker("allreduce_coalesced"), tensors, opts.reduceOp);
  requireReal("allreduce_coalesced");
  return submit(
      checked.op, c10d::OpType::ALLREDUCE_COALESCED, "dummy:allreduce_coalesced", tensors,
      tensors, issued(opts),
      [staged = HostStagingList(tensors), specs = std::move(checked.specs),
       plan = allreducePlan(), workers = workers_](Transport& t) mutable {
        std::vector<at::Tensor> hosts = staged.acquire(/*copyIn=*/true);
        for (size_t i = 0; i < hosts.size(); ++i) {
          algorithms::allreduce(t, hosts[i], specs[i], plan, *workers);
        }
        staged.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::reduce(
    std::vector<at::Tensor>& tensors,
    const c10d::ReduceOptions& opts) {
  const CheckedReduction checked = checks::reduce(checker("reduce"), tensors, opts);
  requireReal("reduce");
  const int root = static_cast<int>(opts.rootRank);
  return submit(
      checked.op, c10d::OpType::REDUCE, "dummy:reduce", tensors, tensors, issued(opts),
      [staged = HostStaging(tensors[0]), spec = checked.specs[0], root,
       isRoot = root == getRank(), oneShot = options_->oneShotMaxBytes,
       workers = workers_](Transport& t) mutable {
        algorithms::reduce(t, staged.acquire(/*copyIn=*/true), spec, root, oneShot, *workers);
        staged.release(/*copyOut=*/isRoot);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::broadcast(
    std::vector<at::Tensor>& tensors,
    const c10d::BroadcastOptions& opts) {
  const OpDescriptor op = checks::broadcast(checker("broadcast"), tensors, opts);
  requireReal("broadcast");
  const int root = static_cast<int>(opts.rootRank);
  if (onDevicePath(tensors)) {
    return submitDevice(
        op, c10d::OpType::BROADCAST, "dummy:broadcast", tensors, tensors, issued(opts),
        [tensor = tensors[0], root](DeviceCollectives& d, Transport& t) mutable {
          d.broadcast(t, tensor, root);
        });
  }
  return submit(
      op, c10d::OpType::BROADCAST, "dummy:broadcast", tensors, tensors, issued(opts),
      [staged = HostStaging(tensors[0]), root, isRoot = root == getRank()](
          Transport& t) mutable {
        algorithms::broadcast(t, staged.acquire(/*copyIn=*/isRoot), root);
        staged.release(/*copyOut=*/!isRoot);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op = checks::allgather(checker("allgather"), outputTensors, inputTensors);
  std::vector<at::Tensor>& outputs = outputTensors[0];
  if (mode() == Mode::kZero) {
    return zeroed(c10d::OpType::ALLGATHER, "dummy:all_gather", outputs);
  }
  const at::Tensor& input = inputTensors[0];
  std::vector<at::Tensor> touched(outputs);
  touched.push_back(input);
  if (onDevicePath(touched)) {
    return submitDevice(
        op, c10d::OpType::ALLGATHER, "dummy:all_gather", inputTensors, outputs, issued(opts),
        [input, outputs](DeviceCollectives& d, Transport& t) mutable {
          d.allgather(t, outputs, input);
        });
  }
  return submit(
      op, c10d::OpType::ALLGATHER, "dummy:all_gather", inputTensors, outputs, issued(opts),
      [in = HostStaging(input), out = HostStagingList(outputs), window = peerAccessWindow(),
       workers = workers_](Transport& t) mutable {
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        algorithms::allgather(t, in.acquire(/*copyIn=*/true), hostOut, window, workers.get());
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::_allgather_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op =
      checks::allgatherBase(checker("_allgather_base"), outputBuffer, inputBuffer);
  requireReal("_allgather_base");
  if (onDevicePath({inputBuffer, outputBuffer})) {
    return submitDevice(
        op, c10d::OpType::_ALLGATHER_BASE, "dummy:_allgather_base", {inputBuffer},
        {outputBuffer}, issued(opts),
        [input = inputBuffer, output = outputBuffer](DeviceCollectives& d, Transport& t) mutable {
          d.allgatherBase(t, output, input);
        });
  }
  return submit(
      op, c10d::OpType::_ALLGATHER_BASE, "dummy:_allgather_base", {inputBuffer}, {outputBuffer},
      issued(opts),
      [in = HostStaging(inputBuffer), out = HostStaging(outputBuffer),
       window = peerAccessWindow(), workers = workers_](Transport& t) mutable {
        at::Tensor& hostOut = out.acquire(/*copyIn=*/false);
        algorithms::allgatherInto(t, in.acquire(/*copyIn=*/true), hostOut, window, workers.get());
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op = checks::allgatherCoalesced(
      checker("allgather_coalesced"), outputTensorLists, inputTensors);
  requireReal("allgather_coalesced");
  const std::vector<at::Tensor> outputs = flatten(outputTensorLists); // by rank, then by input
  return submit(
      op, c10d::OpType::ALLGATHER_COALESCED, "dummy:all_gather_coalesced", inputTensors, outputs,
      issued(opts),
      [in = HostStagingList(inputTensors), out = HostStagingList(outputs), ws = getSize(),
       count = inputTensors.size(), window = peerAccessWindow(),
       workers = workers_](Transport& t) mutable {
        std::vector<at::Tensor> hostIn = in.acquire(/*copyIn=*/true);
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        for (size_t i = 0; i < count; ++i) {
          std::vector<at::Tensor> perRank;
          for (int r = 0; r < ws; ++r) {
            perRank.push_back(hostOut[r * count + i]);
          }
          algorithms::allgather(t, hostIn[i], perRank, window, workers.get());
        }
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op = checks::allgatherIntoTensorCoalesced(
      checker("allgather_into_tensor_coalesced"), outputs, inputs);
  requireReal("allgather_into_tensor_coalesced");
  return submit(
      op, c10d::OpType::COALESCED, "dummy:all_gather_into_tensor_coalesced", inputs, outputs,
      issued(opts),
      [in = HostStagingList(inputs), out = HostStagingList(outputs), window = peerAccessWindow(),
       workers = workers_](Transport& t) mutable {
        std::vector<at::Tensor> hostIn = in.acquire(/*copyIn=*/true);
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        for (size_t i = 0; i < hostIn.size(); ++i) {
          algorithms::allgatherInto(t, hostIn[i], hostOut[i], window, workers.get());
        }
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::GatherOptions& opts) {
  std::vector<at::Tensor> outputs;
  const OpDescriptor op =
      checks::gather(checker("gather"), outputTensors, inputTensors, opts, outputs);
  requireReal("gather");
  return submit(
      op, c10d::OpType::GATHER, "dummy:gather", inputTensors, outputs, issued(opts),
      [in = HostStaging(inputTensors[0]), out = HostStagingList(outputs), root = op.root,
       window = peerAccessWindow(), workers = workers_](Transport& t) mutable {
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        algorithms::gather(t, in.acquire(/*copyIn=*/true), hostOut, root, window, workers.get());
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ScatterOptions& opts) {
  std::vector<at::Tensor> inputs;
  const OpDescriptor op =
      checks::scatter(checker("scatter"), outputTensors, inputTensors, opts, inputs);
  requireReal("scatter");
  return submit(
      op, c10d::OpType::SCATTER, "dummy:scatter", inputs, outputTensors, issued(opts),
      [in = HostStagingList(inputs), out = HostStaging(outputTensors[0]),
       root = op.root](Transport& t) mutable {
        algorithms::scatter(t, in.acquire(/*copyIn=*/true), out.acquire(/*copyIn=*/false), root);
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::reduce_scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  const CheckedReduction checked = checks::reduceScatter(
      checker("reduce_scatter"), outputTensors, inputTensors, opts.reduceOp);
  requireReal("reduce_scatter");
  return submit(
      checked.op, c10d::OpType::REDUCE_SCATTER, "dummy:reduce_scatter", inputTensors[0],
      outputTensors, issued(opts),
      [in = HostStagingList(inputTensors[0]), out = HostStaging(outputTensors[0]),
       spec = checked.specs[0]](Transport& t) mutable {
        algorithms::reduceScatter(t, in.acquire(/*copyIn=*/true), out.acquire(false), spec);
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
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
  const char* collective =
      coalesced ? "reduce_scatter_tensor_coalesced" : "_reduce_scatter_base";
  CheckedReduction checked =
      checks::reduceScatterTensors(checker(collective), outputs, inputs, opts.reduceOp, coalesced);
  requireReal(collective);
  if (!coalesced && onDevicePath({inputs[0], outputs[0]})) {
    OpDescriptor op = checked.op;
    op.layout = 0; // the device path's descriptor carries no layout (one tensor)
    return submitDevice(
        op, c10d::OpType::_REDUCE_SCATTER_BASE, "dummy:_reduce_scatter_base", inputs, outputs,
        issued(opts),
        [input = inputs[0], output = outputs[0], spec = checked.specs[0]](
            DeviceCollectives& d, Transport& t) mutable {
          d.reduceScatterBase(t, output, input, spec);
        });
  }
  return submit(
      checked.op, coalesced ? c10d::OpType::COALESCED : c10d::OpType::_REDUCE_SCATTER_BASE,
      coalesced ? "dummy:reduce_scatter_tensor_coalesced" : "dummy:_reduce_scatter_base", inputs,
      outputs, issued(opts),
      [in = HostStagingList(inputs), out = HostStagingList(outputs),
       specs = std::move(checked.specs), window = peerAccessWindow(),
       workers = workers_](Transport& t) mutable {
        std::vector<at::Tensor> hostIn = in.acquire(/*copyIn=*/true);
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        for (size_t i = 0; i < hostIn.size(); ++i) {
          algorithms::reduceScatterTensor(
              t, hostIn[i].reshape(-1), hostOut[i], specs[i], window, *workers);
        }
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::alltoall_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes,
    const c10d::AllToAllOptions& opts) {
  CheckedAlltoall checked = checks::alltoallBase(
      checker("alltoall_base"), outputBuffer, inputBuffer, outputSplitSizes, inputSplitSizes);
  requireReal("alltoall_base");
  const OpDescriptor op = checked.op; // the body takes `checked` over
  return submit(
      op, c10d::OpType::ALLTOALL_BASE, "dummy:all_to_all", {inputBuffer}, {outputBuffer},
      issued(opts),
      [in = HostStaging(inputBuffer), out = HostStaging(outputBuffer),
       checked = std::move(checked)](Transport& t) mutable {
        auto* src = static_cast<std::byte*>(in.acquire(/*copyIn=*/true).data_ptr());
        auto* dst = static_cast<std::byte*>(out.acquire(/*copyIn=*/false).data_ptr());
        std::vector<algorithms::Span> sends, receives;
        for (size_t r = 0; r < checked.sendRows.size(); ++r) {
          sends.push_back({src, checked.sendRows[r] * checked.sendRowBytes});
          src += checked.sendRows[r] * checked.sendRowBytes;
          receives.push_back({dst, checked.recvRows[r] * checked.recvRowBytes});
          dst += checked.recvRows[r] * checked.recvRowBytes;
        }
        algorithms::alltoall(t, sends, receives);
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      },
      SplitSizes{inputSplitSizes, outputSplitSizes});
}

c10::intrusive_ptr<c10d::Work> DummyBackend::alltoall(
    std::vector<at::Tensor>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllToAllOptions& opts) {
  const OpDescriptor op = checks::alltoall(checker("alltoall"), outputTensors, inputTensors);
  requireReal("alltoall");
  return submit(
      op, c10d::OpType::ALLTOALL, "dummy:all_to_all", inputTensors, outputTensors, issued(opts),
      [in = HostStagingList(inputTensors),
       out = HostStagingList(outputTensors)](Transport& t) mutable {
        auto spans = [](std::vector<at::Tensor>& tensors) {
          std::vector<algorithms::Span> result;
          for (auto& tensor : tensors) {
            result.push_back(
                {static_cast<std::byte*>(tensor.data_ptr()),
                 static_cast<size_t>(tensor.numel()) * tensor.element_size()});
          }
          return result;
        };
        std::vector<at::Tensor> hostIn = in.acquire(/*copyIn=*/true);
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        algorithms::alltoall(t, spans(hostIn), spans(hostOut));
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::barrier(const c10d::BarrierOptions& opts) {
  requireCreator("barrier");
  requireReal("barrier");
  return submit(
      OpDescriptor{}, c10d::OpType::BARRIER, "dummy:barrier", {}, {}, issued(opts),
      [](Transport& t) { algorithms::barrier(t); });
}

void DummyBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  requireCreator("monitoredBarrier");
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
  ++p2pSeq_;
  const uint64_t record = recordPointToPoint("send", dstRank, tensors);
  const bool observed = at::hasCallbacks(); // takes a lock: ask once
  if (observed && !hostLevel_) { // a host level: the group records it
    recordParamComms(
        *this, p2pSeq_, true, "send", dstRank, tensors[0].scalar_type(), tensors, tensors);
  }
  // Staged on the caller's thread: the sender's data is taken as it is at the call.
  auto staged = std::make_shared<HostStaging>(tensors[0]);
  const at::Tensor& host = staged->acquire(/*copyIn=*/true);
  auto work = c10::make_intrusive<DummyWork>(
      getRank(), c10d::OpType::SEND, observed ? "dummy:send" : nullptr, tensors,
      std::vector<at::Tensor>(), 0, nullptr, p2p_);
  const uint64_t bytes = host.numel() * host.element_size();
  P2pEngine::Finish finish = [staged, record] {
    staged->release(/*copyOut=*/false);
    flight_recorder::completed(record);
  };
  if (DC_LOG_ENABLED(kTrace)) {
    finish = tracedP2p(
        std::move(finish), traceSite_,
        c10::str("send #", p2pSeq_, " to rank ", transport_->label(dstRank)), host);
  }
  p2p_->send(work, dstRank, tag, host.data_ptr(), bytes, std::move(finish));
  return work;
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
  checks::recv(checker("recvAnysource"), tensors, std::nullopt);
  return receive(tensors, -1, tag, "recvAnysource");
}

c10::intrusive_ptr<c10d::Work> DummyBackend::receive(
    std::vector<at::Tensor>& tensors,
    int srcRank,
    int tag,
    const char* what) {
  requireReal(what);
  checker(what).writable(tensors);
  ++p2pSeq_;
  const uint64_t record = recordPointToPoint("recv", srcRank, tensors);
  const bool observed = at::hasCallbacks(); // takes a lock: ask once
  if (observed && !hostLevel_) { // a host level: the group records it
    recordParamComms(
        *this, p2pSeq_, true, what, srcRank, tensors[0].scalar_type(), tensors, tensors);
  }
  auto staged = std::make_shared<HostStaging>(tensors[0]);
  at::Tensor& host = staged->acquire(/*copyIn=*/false);
  auto work = c10::make_intrusive<DummyWork>(
      getRank(),
      srcRank < 0 ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV,
      !observed ? nullptr : srcRank < 0 ? "dummy:recvAnySource" : "dummy:recv",
      tensors, // the profiler records the buffer's shape, as gloo's does
      tensors,
      0,
      nullptr,
      p2p_);
  const uint64_t bytes = host.numel() * host.element_size();
  P2pEngine::Finish finish = [staged, record] {
    staged->release(/*copyOut=*/true);
    flight_recorder::completed(record);
  };
  if (DC_LOG_ENABLED(kTrace)) {
    finish = tracedP2p(
        std::move(finish),
        traceSite_,
        srcRank < 0 ? c10::str(what, " #", p2pSeq_)
                    : c10::str(what, " #", p2pSeq_, " from rank ", transport_->label(srcRank)),
        host);
  }
  p2p_->recv(work, srcRank, tag, host.data_ptr(), bytes, std::move(finish));
  return work;
}

} // namespace dummy_collectives
