// The c10d face of a group that spans hosts: what each collective checks (argument_checks.cpp,
// shared with the one-host face) and which two-level algorithm it runs (two_level.cpp).
#include <dummy_collectives/hierarchy/hierarchical_backend.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <dummy_collectives/argument_checks.hpp>
#include <dummy_collectives/backend.hpp>
#include <dummy_collectives/debug_log.hpp>
#include <dummy_collectives/engine.hpp>
#include <dummy_collectives/exit_registry.hpp>
#include <dummy_collectives/flight_recorder.hpp>
#include <dummy_collectives/hierarchy/agreement.hpp>
#include <dummy_collectives/hierarchy/cross_host_p2p.hpp>
#include <dummy_collectives/hierarchy/two_level.hpp>
#include <dummy_collectives/monitored_barrier.hpp>
#include <dummy_collectives/param_comms.hpp>
#include <dummy_collectives/this_process.hpp>
#include <dummy_collectives/work.hpp>

#include "../host_staging.hpp"

namespace dummy_collectives::hierarchy {
namespace {

class HierarchyExitHandle final : public ExitHandle {
 public:
  HierarchyExitHandle(
      std::weak_ptr<Engine> engine, GroupHealth* health, flight_recorder::Group* recorded)
      : engine_(std::move(engine)), health_(health), recorded_(recorded) {}
  bool drain() override {
    auto engine = engine_.lock();
    if (!engine) {
      return false;
    }
    engine->drain();
    // A rank that was elsewhere when the group failed: its dump is part of the job's.
    const std::string broken = health_->brokenReason();
    if (!broken.empty()) {
      flight_recorder::dumpOnFailure(recorded_, broken);
    }
    return true;
  }
  void abort(const std::string& reason) override {
    if (engine_.lock()) {
      health_->markFailed(reason);
    }
  }

 private:
  std::weak_ptr<Engine> engine_;
  GroupHealth* health_; // lives as long as the engine (the backend destroys the engine first)
  flight_recorder::Group* recorded_; // null: not recorded (kept by the recorder for good)
};

// A receive from another host into a tensor the engine cannot write directly (a CUDA or
// non-contiguous one): the engine receives into a host copy, copied into the tensor on wait().
class StagedRecvWork final : public c10d::Work {
 public:
  StagedRecvWork(c10::intrusive_ptr<c10d::Work> inner, at::Tensor user, at::Tensor host)
      : c10d::Work(-1, c10d::OpType::RECV),
        inner_(std::move(inner)),
        user_(std::move(user)),
        host_(std::move(host)) {}
  bool isCompleted() override {
    return inner_->isCompleted();
  }
  bool wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    user_.copy_(host_);
    return true;
  }
  int sourceRank() const override {
    return inner_->sourceRank();
  }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  at::Tensor user_;
  at::Tensor host_;
};

// A point-to-point operation the flight recorder follows: completed when a wait on it returns
// or it is found complete; a group failure seen in wait() writes the dump.
class RecordedWork final : public c10d::Work {
 public:
  RecordedWork(
      c10::intrusive_ptr<c10d::Work> inner, uint64_t record, flight_recorder::Group* group)
      : c10d::Work(-1, inner->retrieveOpType()),
        inner_(std::move(inner)),
        record_(record),
        group_(group) {}
  bool isCompleted() override {
    const bool done = inner_->isCompleted();
    if (done && inner_->exception() == nullptr) {
      flight_recorder::completed(record_);
    }
    return done;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    try {
      inner_->wait(timeout);
    } catch (const c10::DistBackendError& e) {
      flight_recorder::dumpOnFailure(group_, e.what());
      throw;
    }
    flight_recorder::completed(record_);
    return true;
  }
  int sourceRank() const override {
    return inner_->sourceRank();
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return inner_->getFuture();
  }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  uint64_t record_;
  flight_recorder::Group* group_;
};

// A collective of the group running on this rank, for the store watcher (GroupHealth).
class InFlight {
 public:
  explicit InFlight(GroupHealth& health) : health_(health) {
    health_.collectiveBegins();
  }
  ~InFlight() {
    health_.collectiveEnds();
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  GroupHealth& health_;
};

// gloo takes tags from 0 up; dummy's own messages (the monitored barrier's) use negative ones,
// which go to the top of gloo's range instead, far from any tag user code counts up to.
int engineTag(int tag) {
  return tag >= 0 ? tag : std::numeric_limits<int>::max() + (tag + 1); // -1: INT_MAX
}

// Tensors grouped by dtype, each group concatenated: coalesced allreduces run one two-level
// allreduce per dtype instead of one per tensor.
std::map<at::ScalarType, std::vector<size_t>> byDtype(const std::vector<at::Tensor>& tensors) {
  std::map<at::ScalarType, std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    groups[tensors[i].scalar_type()].push_back(i);
  }
  return groups;
}

} // namespace

HierarchicalBackend::HierarchicalBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    c10::intrusive_ptr<BackendOptions> options,
    Topology topology,
    c10::intrusive_ptr<DummyBackend> host,
    c10::intrusive_ptr<c10d::Backend> rail,
    c10::intrusive_ptr<c10d::Backend> everyone,
    std::vector<int64_t> globalRanks)
    : c10d::Backend(rank, size),
      options_(std::move(options)),
      topology_(std::move(topology)),
      hostBackend_(std::move(host)),
      waits_(std::make_unique<WaitLedger>(size)),
      pid_(thisProcessId()) {
  TORCH_CHECK(
      topology_.size() == size && topology_.rank() == rank,
      "dummy_collectives: the topology is of rank ", topology_.rank(), " of ", topology_.size(),
      ", the group's of rank ", rank, " of ", size);
  TORCH_CHECK(
      hostBackend_->getSize() == topology_.localSize() &&
          hostBackend_->getRank() == topology_.localRank(),
      "dummy_collectives: the host's backend is not this rank's host");
  health_ = std::make_unique<GroupHealth>(
      store,
      [hostBackend = hostBackend_.get()](const std::string& reason) {
        hostBackend->abortWith(reason);
      },
      [hostBackend = hostBackend_.get()] { return hostBackend->brokenReason(); },
      c10::str("rank ", rank, " (", topology_.describeHost(topology_.host()), ", pid ", pid_, ")"),
      /*watch=*/topology_.localRank() == 0,
      topology_.hostCount());
  host_ = std::make_unique<InHostLevel>(
      hostBackend_,
      [hostBackend = hostBackend_.get()] { return hostBackend->brokenReason(); },
      *health_);
  const bool needsRail = topology_.uniform() || topology_.localRank() == 0;
  TORCH_CHECK(
      needsRail == static_cast<bool>(rail),
      "dummy_collectives: rank ", rank, needsRail ? " needs" : " takes no", " cross-host rail");
  if (rail) {
    rail_ = std::make_unique<InterHostEngine>(
        std::move(rail), topology_.rail(topology_.uniform() ? topology_.localRank() : 0),
        topology_, *health_);
  }
  std::vector<int> all(size);
  for (int r = 0; r < size; ++r) {
    all[r] = r;
  }
  p2p_ = std::make_unique<CrossHostP2P>(everyone, rank);
  everyone_ = std::make_unique<InterHostEngine>(std::move(everyone), all, topology_, *health_);
  HierarchySettings settings;
  settings.inlineBytes = options_->interHostInlineBytes;
  settings.chunkBytes = options_->interHostChunkBytes;
  levels_ = std::unique_ptr<Levels>(
      new Levels{topology_, *host_, rail_.get(), *everyone_, *health_, settings});
  engine_ = std::make_shared<Engine>(Engine::Timing{});
  fault_ = fault_injection::fromEnv(); // DUMMY_COLLECTIVES_FAULT_INJECT (tests)
  // The flight recorder sees the group as its user does: the whole group's ranks and sequence
  // numbers. Its levels record nothing of their own there (the host level is told so; the
  // gloo levels record into torch's own recorder, whose dumps are separate).
  fr_ = flight_recorder::registerGroup(options_->group_name, std::move(globalRanks), rank, size);
  exitHandle_ = std::make_shared<HierarchyExitHandle>(engine_, health_.get(), fr_.get());
  registerForExit(exitHandle_, options_->timeout, rank);
  if (DC_LOG_ENABLED(kInfo)) {
    logCreation();
  }
}

void HierarchicalBackend::logCreation() const {
  using debug_log::bytes;
  const int me = getRank();
  const std::string& name = options_->group_name;
  DC_LOG(kInfo, me, "group", name.empty() ? "" : " " + name, ": rank ", me, " of ", getSize(),
         " on ", topology_.hostCount(), " hosts, mode ", modeName(options_->mode),
         "; this rank is local rank ", topology_.localRank(), " of ", topology_.localSize(),
         " on host ", topology_.host());
  // Enough hosts to see the layout; a thousand-host job need not print them all on every rank.
  constexpr int kHostsShown = 16;
  for (int h = 0; h < std::min(topology_.hostCount(), kHostsShown); ++h) {
    DC_LOG(kInfo, me, "host ", h, " of ", topology_.hostCount(), ": ",
           topology_.describeHost(h).substr(std::strlen("host "))); // "host <name> ..."
  }
  if (topology_.hostCount() > kHostsShown) {
    DC_LOG(kInfo, me, "... and ", topology_.hostCount() - kHostsShown, " more hosts");
  }
  const std::string between = topology_.uniform()
      ? c10::str("rails (ranks per host ", topology_.localSize(), "; this rank's rail: ranks ",
                 c10::Join(", ", topology_.rail(topology_.localRank())), ")")
      : c10::str("leaders (hosts run different numbers of ranks; their local rank 0 carries "
                 "the cross-host stage, this rank ",
                 topology_.localRank() == 0 ? "among them)" : "not)");
  DC_LOG(kInfo, me, "cross-host engine gloo (inter_host ", options_->interHost, ") over ", between,
         "; CUDA tensors cross hosts staged through host memory");
  DC_LOG(kInfo, me, "cross-host: up to inter_host_inline_bytes ",
         bytes(options_->interHostInlineBytes),
         " ride with the agreement (one exchange), larger messages are pipelined in at least ",
         two_level::kMinChunks, " chunks of ", bytes(two_level::kMinChunkBytes),
         " to inter_host_chunk_bytes ", bytes(options_->interHostChunkBytes));
}

HierarchicalBackend::~HierarchicalBackend() {
  if (::getpid() != pid_) {
    // A forked child: the threads of the engines exist only in the parent (see DummyBackend).
    new std::shared_ptr<Engine>(std::move(engine_));
    new std::unique_ptr<InterHostEngine>(std::move(rail_));
    new std::unique_ptr<InterHostEngine>(std::move(everyone_));
    new std::unique_ptr<CrossHostP2P>(std::move(p2p_));
    new std::unique_ptr<GroupHealth>(std::move(health_)); // its watcher thread is the parent's
    new c10::intrusive_ptr<DummyBackend>(std::move(hostBackend_));
    return;
  }
  engine_.reset(); // runs what is still queued, while the levels are alive
  if (!health_->brokenReason().empty()) {
    flight_recorder::dumpOnFailure(fr_.get(), health_->brokenReason());
    // A failed group may have given up a cross-host wait the engine cannot interrupt: its
    // destructor would join a thread still blocked in it. The process's exit closes it.
    new std::unique_ptr<InterHostEngine>(std::move(rail_));
    new std::unique_ptr<InterHostEngine>(std::move(everyone_));
    new std::unique_ptr<CrossHostP2P>(std::move(p2p_));
  }
}

void HierarchicalBackend::setTimeout(std::chrono::milliseconds timeout) {
  options_->timeout = timeout;
  hostBackend_->setTimeout(timeout);
  if (rail_) {
    (*rail_)->setTimeout(timeout);
  }
  (*everyone_)->setTimeout(timeout);
}

void HierarchicalBackend::abort() {
  health_->markFailed(c10::str(health_->self(), " aborted the process group (ProcessGroup.abort)"));
}

std::string HierarchicalBackend::brokenReason() const {
  return health_->brokenReason();
}

Checker HierarchicalBackend::checker(const char* collective) const {
  requireCreatorProcess(pid_, collective, getRank()); // a forked child: see this_process.hpp
  return Checker(collective, getRank(), getSize());
}

bool HierarchicalBackend::sameHost(int peer) const {
  return topology_.hostOf(peer) == topology_.host();
}

uint64_t HierarchicalBackend::recordPointToPoint(
    const char* name, int peer, const std::vector<at::Tensor>& tensors) {
  ++p2pSeq_;
  if (at::hasCallbacks()) { // takes a lock: ask once
    recordParamComms(*this, p2pSeq_, true, name, peer, tensors[0].scalar_type(), tensors, tensors);
  }
  if (!fr_) {
    return 0;
  }
  const flight_recorder::OpInfo info{
      name, seq_, p2pSeq_, true, getRank(), peer, options_->timeout};
  const uint64_t record = flight_recorder::record(fr_.get(), info, tensors, tensors);
  flight_recorder::started(record); // posted to the level that carries it
  return record;
}

uint64_t HierarchicalBackend::recordCollective(
    const OpDescriptor& op,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs,
    std::chrono::milliseconds timeout) {
  if (!fr_) {
    return 0;
  }
  if (!frDescTaken_) {
    flight_recorder::describe(fr_.get(), getGroupDesc());
    frDescTaken_ = true;
  }
  const flight_recorder::OpInfo info{
      flight_recorder::opName(op.kind), op.seq, p2pSeq_, false, -1, -1, timeout};
  const size_t size = static_cast<size_t>(getSize());
  if (op.kind == CollectiveKind::kAllgather && inputs.size() == 1 &&
      outputs.size() == size) {
    return flight_recorder::recordFlattened(fr_.get(), info, inputs, outputs, false, size);
  }
  if (op.kind == CollectiveKind::kReduceScatter && outputs.size() == 1 &&
      inputs.size() == size) {
    return flight_recorder::recordFlattened(fr_.get(), info, inputs, outputs, true, size);
  }
  return flight_recorder::record(fr_.get(), info, inputs, outputs);
}

template <typename Algorithm>
c10::intrusive_ptr<c10d::Work> HierarchicalBackend::submit(
    OpDescriptor op,
    c10d::OpType opType,
    const char* profilingTitle,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    Issue issue,
    Algorithm algorithm,
    const SplitSizes* splits) {
  checker(collectiveName(op.kind)).writable(outputs); // before the number is taken
  op.seq = ++seq_;
  const bool observed = at::hasCallbacks(); // takes a lock: ask once
  if (observed) {
    const auto dtype = op.dtype >= 0 ? static_cast<at::ScalarType>(op.dtype) : at::kByte;
    recordParamComms(
        *this, op.seq, false, collectiveName(op.kind), getRank(), dtype, inputs, outputs,
        splits != nullptr ? *splits : SplitSizes{});
  }
  OpContext ctx;
  ctx.op = op;
  ctx.rank = getRank();
  ctx.timeout = issue.timeout == c10d::kUnsetTimeout ? options_->timeout : issue.timeout;
  if (fault_) {
    ctx.fault = &*fault_;
    ctx.faultStep = fault_->stepFor(getRank(), op.seq);
  }
  const uint64_t record = recordCollective(op, inputs, outputs, ctx.timeout);
  const auto issuedAt = debug_log::issueTime();
  // Where a profiler listens, the completion records who made whom wait (recordArrival).
  std::shared_ptr<const at::ThreadLocalState> issuer =
      observed ? std::make_shared<const at::ThreadLocalState>() : nullptr;
  // Raw pointers: the engine (which runs bodies) is destroyed before the levels; the flight
  // recorder keeps its group for good.
  auto run = [levels = levels_.get(), health = health_.get(), waits = waits_.get(), ctx, issuedAt,
              site = debug_log::Site{getRank(), &options_->group_name}, issuer, profilingTitle,
              groupUid = observed ? getGroupUid() : std::string(), record, group = fr_.get(),
              algorithm = std::move(algorithm)]() mutable {
    // Who made whom wait, as the agreement finds it (OpContext::arrival): what the flight
    // recorder stores with this collective once it is done.
    Arrival arrival;
    try {
      debug_log::traced(ctx.op, site, issuedAt, [&] {
        const auto now = std::chrono::steady_clock::now();
        ctx.deadline = now + ctx.timeout;
        ctx.arrivedNs =
            std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
        arrival.arrivedNs = ctx.arrivedNs;
        ctx.arrival = &arrival;
        const InFlight inFlight(*health); // the host's watcher asks the store meanwhile
        health->raiseIfBroken(ctx.describe());
        flight_recorder::started(record);
        try {
          algorithm(*levels, ctx);
          if (arrival.known()) {
            waits->add(arrival.lastRank, arrival.waitedNs);
          }
        } catch (const c10::DistBackendError&) {
          throw; // the group's failure, or a mismatch every rank raises alike
        } catch (const c10::ValueError&) {
          throw; // bad arguments every rank found after the agreement (all-to-all split sizes)
        } catch (const std::exception& e) {
          // Anything else (out of memory, a bug) happened on this rank alone, part way through
          // the collective's steps: its peers would wait for steps it never takes. Fail the
          // group, so every rank on every host raises this, naming this rank.
          health->fail(ctx.describe(), c10::str("failed on ", health->self(), ": ", e.what()));
        }
        flight_recorder::completed(record, arrival);
      });
    } catch (const c10::DistBackendError& e) {
      flight_recorder::dumpOnFailure(group, e.what()); // before anyone sees the error
      throw;
    }
    if (issuer) {
      recordArrival(*issuer, groupUid, ctx.op.seq, profilingTitle, arrival);
    }
  };
  if (issue.blocking && !observed) {
    std::exception_ptr error;
    const bool ran = engine_->runNow([&] {
      try {
        run();
      } catch (...) {
        error = std::current_exception();
      }
    });
    if (ran) {
      return DummyWork::ran(getRank(), opType, std::move(outputs), op.seq, error);
    }
  }
  auto shared = std::make_shared<decltype(run)>(std::move(run));
  auto work = c10::make_intrusive<DummyWork>(
      getRank(), opType, profilingTitle, inputs, std::move(outputs), op.seq,
      [shared](DummyWork&) { (*shared)(); }, engine_);
  engine_->enqueue(work);
  return work;
}

// ---- The collectives ---------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::allreduce(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].layout() == c10::kSparse) {
    return allreduce_sparse(tensors, opts);
  }
  const CheckedReduction checked = checks::allreduce(checker("allreduce"), tensors, opts.reduceOp);
  return submit(
      checked.op, c10d::OpType::ALLREDUCE, "dummy:all_reduce", tensors, tensors, issued(opts),
      [staged = HostStaging(tensors[0]), op = opts.reduceOp, spec = checked.specs[0]](
          const Levels& levels, const OpContext& ctx) mutable {
        two_level::allreduce(levels, ctx, staged.acquire(/*copyIn=*/true), op, spec);
        staged.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::allreduce_sparse(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  const OpDescriptor op =
      checks::allreduceSparse(checker("allreduce_sparse"), tensors, opts.reduceOp);
  return submit(
      op, c10d::OpType::_ALLREDUCE_SPARSE, "dummy:sparse_all_reduce", tensors, tensors,
      issued(opts), [tensor = tensors[0]](const Levels& levels, const OpContext& ctx) mutable {
        tensor.copy_(two_level::allreduceSparse(levels, ctx, tensor));
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  CheckedReduction checked =
      checks::allreduceCoalesced(checker("allreduce_coalesced"), tensors, opts.reduceOp);
  return submit(
      checked.op, c10d::OpType::ALLREDUCE_COALESCED, "dummy:allreduce_coalesced", tensors,
      tensors, issued(opts),
      [staged = HostStagingList(tensors), op = opts.reduceOp, specs = std::move(checked.specs)](
          const Levels& levels, const OpContext& ctx) mutable {
        std::vector<at::Tensor> hosts = staged.acquire(/*copyIn=*/true);
        agree(levels, ctx);
        for (const auto& [dtype, members] : byDtype(hosts)) {
          std::vector<at::Tensor> flat;
          for (size_t i : members) {
            flat.push_back(hosts[i].reshape(-1));
          }
          at::Tensor all = at::cat(flat);
          two_level::allreduceData(levels, ctx, all, op, specs[members[0]]);
          int64_t offset = 0;
          for (size_t i : members) {
            hosts[i].view(-1).copy_(all.narrow(0, offset, hosts[i].numel()));
            offset += hosts[i].numel();
          }
        }
        staged.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::reduce(
    std::vector<at::Tensor>& tensors,
    const c10d::ReduceOptions& opts) {
  const CheckedReduction checked = checks::reduce(checker("reduce"), tensors, opts);
  const int root = static_cast<int>(opts.rootRank);
  return submit(
      checked.op, c10d::OpType::REDUCE, "dummy:reduce", tensors, tensors, issued(opts),
      [staged = HostStaging(tensors[0]), op = opts.reduceOp, spec = checked.specs[0], root,
       isRoot = root == getRank()](const Levels& levels, const OpContext& ctx) mutable {
        two_level::reduce(levels, ctx, staged.acquire(/*copyIn=*/true), op, spec, root);
        staged.release(/*copyOut=*/isRoot);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::broadcast(
    std::vector<at::Tensor>& tensors,
    const c10d::BroadcastOptions& opts) {
  const OpDescriptor op = checks::broadcast(checker("broadcast"), tensors, opts);
  const int root = static_cast<int>(opts.rootRank);
  return submit(
      op, c10d::OpType::BROADCAST, "dummy:broadcast", tensors, tensors, issued(opts),
      [staged = HostStaging(tensors[0]), root, isRoot = root == getRank()](
          const Levels& levels, const OpContext& ctx) mutable {
        two_level::broadcast(levels, ctx, staged.acquire(/*copyIn=*/isRoot), root);
        staged.release(/*copyOut=*/!isRoot);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op = checks::allgather(checker("allgather"), outputTensors, inputTensors);
  std::vector<at::Tensor>& outputs = outputTensors[0];
  return submit(
      op, c10d::OpType::ALLGATHER, "dummy:all_gather", inputTensors, outputs, issued(opts),
      [in = HostStaging(inputTensors[0]), out = HostStagingList(outputs)](
          const Levels& levels, const OpContext& ctx) mutable {
        const at::Tensor& input = in.acquire(/*copyIn=*/true);
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        at::Tensor all = at::empty({input.numel() * levels.topology.size()}, input.options());
        two_level::allgather(levels, ctx, input, all);
        for (size_t r = 0; r < hostOut.size(); ++r) {
          hostOut[r].view(-1).copy_(all.narrow(0, r * input.numel(), input.numel()));
        }
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::_allgather_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op =
      checks::allgatherBase(checker("_allgather_base"), outputBuffer, inputBuffer);
  return submit(
      op, c10d::OpType::_ALLGATHER_BASE, "dummy:_allgather_base", {inputBuffer}, {outputBuffer},
      issued(opts),
      [in = HostStaging(inputBuffer), out = HostStaging(outputBuffer)](
          const Levels& levels, const OpContext& ctx) mutable {
        two_level::allgather(levels, ctx, in.acquire(/*copyIn=*/true), out.acquire(false));
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op = checks::allgatherCoalesced(
      checker("allgather_coalesced"), outputTensorLists, inputTensors);
  const std::vector<at::Tensor> outputs = flatten(outputTensorLists); // by rank, then by input
  return submit(
      op, c10d::OpType::ALLGATHER_COALESCED, "dummy:all_gather_coalesced", inputTensors, outputs,
      issued(opts),
      [in = HostStagingList(inputTensors), out = HostStagingList(outputs),
       count = inputTensors.size()](const Levels& levels, const OpContext& ctx) mutable {
        std::vector<at::Tensor> hostIn = in.acquire(/*copyIn=*/true);
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        agree(levels, ctx);
        for (size_t i = 0; i < count; ++i) {
          const int64_t n = hostIn[i].numel();
          at::Tensor all = at::empty({n * levels.topology.size()}, hostIn[i].options());
          two_level::allgatherData(levels, ctx, hostIn[i], all);
          for (int r = 0; r < levels.topology.size(); ++r) {
            hostOut[r * count + i].view(-1).copy_(all.narrow(0, r * n, n));
          }
        }
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const OpDescriptor op = checks::allgatherIntoTensorCoalesced(
      checker("allgather_into_tensor_coalesced"), outputs, inputs);
  return submit(
      op, c10d::OpType::COALESCED, "dummy:all_gather_into_tensor_coalesced", inputs, outputs,
      issued(opts),
      [in = HostStagingList(inputs), out = HostStagingList(outputs)](
          const Levels& levels, const OpContext& ctx) mutable {
        std::vector<at::Tensor> hostIn = in.acquire(/*copyIn=*/true);
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        agree(levels, ctx);
        for (size_t i = 0; i < hostIn.size(); ++i) {
          two_level::allgatherData(levels, ctx, hostIn[i], hostOut[i]);
        }
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::GatherOptions& opts) {
  std::vector<at::Tensor> outputs;
  const OpDescriptor op =
      checks::gather(checker("gather"), outputTensors, inputTensors, opts, outputs);
  return submit(
      op, c10d::OpType::GATHER, "dummy:gather", inputTensors, outputs, issued(opts),
      [in = HostStaging(inputTensors[0]), out = HostStagingList(outputs), root = op.root](
          const Levels& levels, const OpContext& ctx) mutable {
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        two_level::gather(levels, ctx, in.acquire(/*copyIn=*/true), hostOut, root);
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ScatterOptions& opts) {
  std::vector<at::Tensor> inputs;
  const OpDescriptor op =
      checks::scatter(checker("scatter"), outputTensors, inputTensors, opts, inputs);
  return submit(
      op, c10d::OpType::SCATTER, "dummy:scatter", inputs, outputTensors, issued(opts),
      [in = HostStagingList(inputs), out = HostStaging(outputTensors[0]), root = op.root](
          const Levels& levels, const OpContext& ctx) mutable {
        std::vector<at::Tensor> hostIn = in.acquire(/*copyIn=*/true);
        two_level::scatter(levels, ctx, hostIn, out.acquire(/*copyIn=*/false), root);
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::reduce_scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  const CheckedReduction checked = checks::reduceScatter(
      checker("reduce_scatter"), outputTensors, inputTensors, opts.reduceOp);
  return submit(
      checked.op, c10d::OpType::REDUCE_SCATTER, "dummy:reduce_scatter", inputTensors[0],
      outputTensors, issued(opts),
      [in = HostStagingList(inputTensors[0]), out = HostStaging(outputTensors[0]),
       op = opts.reduceOp, spec = checked.specs[0]](
          const Levels& levels, const OpContext& ctx) mutable {
        std::vector<at::Tensor> parts;
        for (const at::Tensor& t : in.acquire(/*copyIn=*/true)) {
          parts.push_back(t.reshape(-1));
        }
        two_level::reduceScatter(levels, ctx, at::cat(parts), out.acquire(false), op, spec);
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::_reduce_scatter_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outputs{outputBuffer};
  std::vector<at::Tensor> inputs{inputBuffer};
  const CheckedReduction checked = checks::reduceScatterTensors(
      checker("_reduce_scatter_base"), outputs, inputs, opts.reduceOp, /*coalesced=*/false);
  return submit(
      checked.op, c10d::OpType::_REDUCE_SCATTER_BASE, "dummy:_reduce_scatter_base", inputs,
      outputs, issued(opts),
      [in = HostStaging(inputBuffer), out = HostStaging(outputBuffer), op = opts.reduceOp,
       spec = checked.specs[0]](const Levels& levels, const OpContext& ctx) mutable {
        two_level::reduceScatter(
            levels, ctx, in.acquire(/*copyIn=*/true), out.acquire(false), op, spec);
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  CheckedReduction checked = checks::reduceScatterTensors(
      checker("reduce_scatter_tensor_coalesced"), outputs, inputs, opts.reduceOp,
      /*coalesced=*/true);
  return submit(
      checked.op, c10d::OpType::COALESCED, "dummy:reduce_scatter_tensor_coalesced", inputs,
      outputs, issued(opts),
      [in = HostStagingList(inputs), out = HostStagingList(outputs), op = opts.reduceOp,
       specs = std::move(checked.specs)](const Levels& levels, const OpContext& ctx) mutable {
        std::vector<at::Tensor> hostIn = in.acquire(/*copyIn=*/true);
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        agree(levels, ctx);
        for (size_t i = 0; i < hostIn.size(); ++i) {
          two_level::reduceScatterData(levels, ctx, hostIn[i], hostOut[i], op, specs[i]);
        }
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::alltoall_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes,
    const c10d::AllToAllOptions& opts) {
  const CheckedAlltoall checked = checks::alltoallBase(
      checker("alltoall_base"), outputBuffer, inputBuffer, outputSplitSizes, inputSplitSizes);
  std::vector<int64_t> sendBytes;
  std::vector<int64_t> recvBytes;
  for (size_t r = 0; r < checked.sendRows.size(); ++r) {
    sendBytes.push_back(checked.sendRows[r] * static_cast<int64_t>(checked.sendRowBytes));
    recvBytes.push_back(checked.recvRows[r] * static_cast<int64_t>(checked.recvRowBytes));
  }
  const SplitSizes splits{inputSplitSizes, outputSplitSizes};
  return submit(
      checked.op, c10d::OpType::ALLTOALL_BASE, "dummy:all_to_all", {inputBuffer},
      {outputBuffer}, issued(opts),
      [in = HostStaging(inputBuffer), out = HostStaging(outputBuffer), sendBytes, recvBytes](
          const Levels& levels, const OpContext& ctx) mutable {
        two_level::alltoall(
            levels, ctx, in.acquire(/*copyIn=*/true), out.acquire(false), sendBytes, recvBytes);
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      },
      &splits);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::alltoall(
    std::vector<at::Tensor>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllToAllOptions& opts) {
  const OpDescriptor op = checks::alltoall(checker("alltoall"), outputTensors, inputTensors);
  return submit(
      op, c10d::OpType::ALLTOALL, "dummy:all_to_all", inputTensors, outputTensors, issued(opts),
      [in = HostStagingList(inputTensors), out = HostStagingList(outputTensors)](
          const Levels& levels, const OpContext& ctx) mutable {
        std::vector<at::Tensor> hostIn = in.acquire(/*copyIn=*/true);
        std::vector<at::Tensor> hostOut = out.acquire(/*copyIn=*/false);
        std::vector<at::Tensor> sendParts;
        std::vector<int64_t> sendBytes;
        std::vector<int64_t> recvBytes;
        int64_t received = 0;
        for (size_t r = 0; r < hostIn.size(); ++r) {
          sendParts.push_back(bytesOf(hostIn[r]));
          sendBytes.push_back(sendParts.back().numel());
          recvBytes.push_back(hostOut[r].numel() * hostOut[r].element_size());
          received += recvBytes.back();
        }
        at::Tensor inBytes = at::cat(sendParts);
        at::Tensor outBytes = at::empty({received}, at::kByte);
        two_level::alltoall(levels, ctx, inBytes, outBytes, sendBytes, recvBytes);
        int64_t offset = 0;
        for (size_t r = 0; r < hostOut.size(); ++r) {
          bytesOf(hostOut[r]).copy_(outBytes.narrow(0, offset, recvBytes[r]));
          offset += recvBytes[r];
        }
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::barrier(const c10d::BarrierOptions& opts) {
  return submit(
      OpDescriptor{}, c10d::OpType::BARRIER, "dummy:barrier", {}, {}, issued(opts),
      [](const Levels& levels, const OpContext& ctx) { two_level::barrier(levels, ctx); });
}

void HierarchicalBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  dummy_collectives::monitoredBarrier(*this, opts, waitAllRanks, options_->timeout);
}

// ---- Point-to-point ----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::send(
    std::vector<at::Tensor>& tensors,
    int dstRank,
    int tag) {
  checks::send(checker("send"), tensors, dstRank);
  const uint64_t record = recordPointToPoint("send", dstRank, tensors);
  if (sameHost(dstRank)) {
    return recorded(hostBackend_->send(tensors, topology_.localRankOf(dstRank), tag), record);
  }
  health_->raiseIfBroken(c10::str("dummy send to rank ", dstRank, " on rank ", getRank()));
  // The engine sends from contiguous host memory; the Work keeps the copy alive.
  const at::Tensor host = tensors[0].to(at::kCPU).contiguous();
  return recorded(p2p_->send(host, dstRank, static_cast<uint32_t>(engineTag(tag))), record);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::recorded(
    c10::intrusive_ptr<c10d::Work> work, uint64_t record) {
  if (record == 0) {
    return work;
  }
  return c10::make_intrusive<RecordedWork>(std::move(work), record, fr_.get());
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::recv(
    std::vector<at::Tensor>& tensors,
    int srcRank,
    int tag) {
  checks::recv(checker("recv"), tensors, srcRank);
  const uint64_t record = recordPointToPoint("recv", srcRank, tensors);
  if (sameHost(srcRank)) {
    return recorded(hostBackend_->recv(tensors, topology_.localRankOf(srcRank), tag), record);
  }
  health_->raiseIfBroken(c10::str("dummy recv from rank ", srcRank, " on rank ", getRank()));
  const at::Tensor& user = tensors[0];
  const auto engineTagged = static_cast<uint32_t>(engineTag(tag));
  if (user.is_cpu() && user.is_contiguous()) {
    return recorded(p2p_->recv(user, srcRank, engineTagged), record);
  }
  at::Tensor host = at::empty(user.sizes(), user.options().device(at::kCPU));
  return recorded(
      c10::make_intrusive<StagedRecvWork>(p2p_->recv(host, srcRank, engineTagged), user, host),
      record);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::recvAnysource(
    std::vector<at::Tensor>& tensors,
    int tag) {
  const Checker check = checker("recvAnysource");
  checks::recv(check, tensors, std::nullopt);
  // A message may come through shared memory or through the engine, and neither lets a posted
  // receive be withdrawn once the other one matched: a receive from any source could take two.
  check.require(
      false,
      "receiving from any source is not supported in a group whose ranks span ",
      topology_.hostCount(),
      " hosts; pass the source rank (torch.distributed.recv(tensor, src=...))");
  return {};
}

} // namespace dummy_collectives::hierarchy
