#include <dummy_collectives/backend.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/ParamCommsUtils.hpp>

#include <dummy_collectives/algorithms.hpp>
#include <dummy_collectives/device_collectives.hpp>
#include <dummy_collectives/engine.hpp>
#include <dummy_collectives/p2p_engine.hpp>
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

  // A list of `expected` tensors, each shaped like `ref` with `numel` elements.
  void list(
      const std::vector<at::Tensor>& tensors,
      size_t expected,
      const at::Tensor& ref,
      int64_t numel,
      const char* what,
      const char* refWhat = "the input") const {
    require(
        tensors.size() == expected,
        "the ",
        what,
        " list has ",
        tensors.size(),
        " tensors; expected ",
        expected);
    for (const auto& t : tensors) {
      like(t, ref, numel, what, refWhat);
    }
  }

  // Non-empty list of tensors sharing the first one's dtype and device.
  void uniform(const std::vector<at::Tensor>& tensors, const char* what) const {
    require(!tensors.empty(), "the ", what, " list is empty");
    for (const auto& t : tensors) {
      like(t, tensors[0], t.numel(), what, "the first one");
    }
  }

  // Non-empty list of tensors on one device; dtypes may differ (coalesced collectives move each
  // tensor on its own, as gloo and NCCL allow).
  void sameDevice(const std::vector<at::Tensor>& tensors, const char* what) const {
    require(!tensors.empty(), "the ", what, " list is empty");
    for (const auto& t : tensors) {
      tensor(t, what);
      require(
          t.device() == tensors[0].device(),
          "the ", what, " tensors are on different devices (", t.device(), " and ",
          tensors[0].device(), ")");
    }
  }

  // The per-rank list only the root passes (gather's outputs, scatter's inputs): on the root one
  // list of a tensor per rank, each like `ref`; elsewhere none. Returns the root's list.
  std::vector<at::Tensor> rootList(
      const std::vector<std::vector<at::Tensor>>& lists,
      bool isRoot,
      int root,
      const at::Tensor& ref,
      const char* what,
      const char* refWhat) const {
    if (!isRoot) {
      require(
          lists.empty() || (lists.size() == 1 && lists[0].empty()),
          "only the root (rank ",
          root,
          ") takes ",
          what,
          " tensors");
      return {};
    }
    require(lists.size() == 1, "the root needs 1 list of ", what, "s, got ", lists.size());
    list(lists[0], size_, ref, ref.numel(), what, refWhat);
    return lists[0];
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

  // `t` must match `ref` (named `refWhat`) in dtype and device and have `numel` elements.
  void like(
      const at::Tensor& t,
      const at::Tensor& ref,
      int64_t numel,
      const char* what,
      const char* refWhat = "the input") const {
    tensor(t, what);
    require(
        t.scalar_type() == ref.scalar_type(),
        what,
        " has dtype ",
        t.scalar_type(),
        " but ",
        refWhat,
        " has dtype ",
        ref.scalar_type());
    require(
        t.device() == ref.device(),
        what,
        " is on ",
        t.device(),
        " but ",
        refWhat,
        " is on ",
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

// What flushAllForExit() needs of a live backend. Weak references: they must not keep a
// destroyed group's threads and shared memory alive.
struct ExitEntry {
  std::weak_ptr<Engine> engine;
  std::weak_ptr<P2pEngine> p2p;
  std::weak_ptr<ShmTransport> transport;
  std::chrono::milliseconds timeout;
  int rank;
};

// The live backends of this process. Never destroyed: backends may outlive static destruction.
struct ExitRegistry {
  std::mutex mu;
  std::atomic<int> pid{0}; // the process the entries belong to
  std::vector<ExitEntry> entries;
};

ExitRegistry& exitRegistry() {
  static auto* registry = new ExitRegistry();
  return *registry;
}

void flushForExit(const ExitEntry& entry, std::chrono::steady_clock::time_point start) {
  // Declared so that they are released engine first, transport last (as ~DummyBackend does).
  auto transport = entry.transport.lock();
  auto p2p = entry.p2p.lock();
  auto engine = entry.engine.lock();
  if (!engine || !p2p || !transport) {
    return; // destroyed meanwhile
  }
  const auto deadline = start + std::min(DummyBackend::kExitGrace, entry.timeout);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  // Peers that never join an outstanding operation must not hold the exit up for the whole
  // group timeout: past the deadline the group is aborted, which ends every wait.
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_until(lock, deadline, [&] { return done; })) {
      transport->abort(c10::str(
          "rank ", entry.rank, " (pid ", ::getpid(), ") exited with operations still outstanding"));
    }
  });
  engine->drain();
  p2p->finishForExit();
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
}

// FNV-1a over 64-bit values: a descriptor's layout digest.
uint64_t digestOf(const std::vector<int64_t>& values) {
  uint64_t digest = 14695981039346656037ULL;
  for (const int64_t v : values) {
    const auto value = static_cast<uint64_t>(v);
    for (int byte = 0; byte < 8; ++byte) {
      digest = (digest ^ ((value >> (8 * byte)) & 0xff)) * 1099511628211ULL;
    }
  }
  return digest;
}

// Coalesced collectives: every tensor's dtype and element count, in order, folded into the
// descriptor, so ranks whose lists differ in any one tensor fail the descriptor check instead
// of silently reducing unrelated elements (the totals alone can match).
OpDescriptor withLayout(OpDescriptor op, const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> values;
  for (const auto& t : tensors) {
    values.push_back(static_cast<int64_t>(t.scalar_type()));
    values.push_back(t.numel());
  }
  op.layout = digestOf(values);
  return op;
}

} // namespace

DummyBackend::DummyBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    c10::intrusive_ptr<BackendOptions> options)
    : c10d::Backend(rank, size),
      options_(options ? std::move(options) : c10::make_intrusive<BackendOptions>()),
      pid_(static_cast<int>(::getpid())) {
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
             options_->peerAccessMaxBytes}});
    workers_ = std::make_shared<WorkerPool>(
        options_->threads > 0 ? options_->threads : WorkerPool::defaultThreads(size));
    p2p_ = std::make_shared<P2pEngine>(transport_, options_->timeout);
    device_ = makeDeviceCollectives(store, rank, size, *options_);
  }
  engine_ = std::make_shared<Engine>(Engine::Timing{});
  if (transport_) {
    ExitRegistry& registry = exitRegistry();
    std::lock_guard<std::mutex> lock(registry.mu);
    if (registry.pid != pid_) {
      registry.pid = pid_;
      registry.entries.clear(); // inherited through fork: the parent's
    }
    auto& entries = registry.entries;
    entries.erase(
        std::remove_if(
            entries.begin(),
            entries.end(),
            [](const ExitEntry& e) { return e.engine.expired(); }),
        entries.end());
    entries.push_back({engine_, p2p_, transport_, options_->timeout, rank});
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
}

void DummyBackend::abort() {
  if (transport_) {
    transport_->abort(c10::str(
        "rank ", getRank(), " (pid ", pid_, ") aborted the process group (ProcessGroup.abort)"));
  }
}

void DummyBackend::flushAllForExit() {
  ExitRegistry& registry = exitRegistry();
  // In a forked child the lock may be held by a thread that exists only in the parent.
  if (registry.pid != static_cast<int>(::getpid())) {
    return;
  }
  std::vector<ExitEntry> entries;
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    entries = registry.entries;
  }
  const auto start = std::chrono::steady_clock::now();
  for (const auto& entry : entries) {
    flushForExit(entry, start);
  }
}

void DummyBackend::setTimeout(std::chrono::milliseconds timeout) {
  options_->timeout = timeout;
  if (p2p_) {
    p2p_->setTimeout(timeout);
  }
}

DummyBackend::Stamp DummyBackend::stamp(
    OpDescriptor& op,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs,
    std::chrono::milliseconds timeout,
    const SplitSizes& splits) {
  op.seq = ++seq_;
  const bool observed = at::hasCallbacks();
  if (observed) {
    const auto dtype = op.dtype >= 0 ? static_cast<at::ScalarType>(op.dtype) : at::kByte;
    recordParamComms(
        op.seq, false, collectiveName(op.kind), getRank(), dtype, inputs, outputs, splits);
  }
  return {timeout == c10d::kUnsetTimeout ? options_->timeout : timeout, observed};
}

c10::intrusive_ptr<c10d::Work> DummyBackend::enqueue(
    const OpDescriptor& op,
    c10d::OpType opType,
    const char* profilingTitle,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    std::function<void(DummyWork&)> body) {
  auto work = c10::make_intrusive<DummyWork>(
      getRank(),
      opType,
      profilingTitle,
      inputs,
      std::move(outputs),
      op.seq,
      std::move(body),
      engine_);
  engine_->enqueue(work);
  return work;
}

template <typename Algorithm>
c10::intrusive_ptr<c10d::Work> DummyBackend::submit(
    OpDescriptor op,
    c10d::OpType opType,
    const char* profilingTitle,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    Issue issue,
    Algorithm algorithm,
    const SplitSizes& splits) {
  const Stamp stamped = stamp(op, inputs, outputs, issue.timeout, splits);
  const auto limit = stamped.limit;
  if (issue.blocking && !stamped.observed) {
    // The caller waits for this Work next thing: with nothing queued ahead, run it here. That
    // skips the queue, the body's allocation and the hand-offs around them, most of what a
    // small blocking collective costs on top of moving its bytes. (Under a profiler the engine
    // runs it, so the Work's profiling record spans the collective.)
    std::exception_ptr error;
    Transport& transport = *transport_;
    const bool ran = engine_->runNow([&] {
      try {
        transport.beginOp(op, limit);
        algorithm(transport);
      } catch (...) {
        error = std::current_exception();
      }
    });
    if (ran) {
      return DummyWork::ran(getRank(), opType, std::move(outputs), op.seq, error);
    }
  }
  // Raw transport pointer: the engine (which runs bodies) is destroyed before the transport.
  // The algorithm may own move-only state (HostStaging); a Work's body must be copyable.
  auto shared = std::make_shared<Algorithm>(std::move(algorithm));
  auto body = [transport = transport_.get(), op, limit, shared](DummyWork&) {
    transport->beginOp(op, limit);
    (*shared)(*transport);
  };
  return enqueue(op, opType, profilingTitle, inputs, std::move(outputs), std::move(body));
}

bool DummyBackend::onDevicePath(const std::vector<at::Tensor>& tensors) const {
  return device_ && !tensors.empty() && tensors[0].is_cuda() && device_->accepts(tensors);
}

template <typename Body>
c10::intrusive_ptr<c10d::Work> DummyBackend::submitDevice(
    OpDescriptor op,
    c10d::OpType opType,
    const char* profilingTitle,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    Issue issue,
    Body body) {
  op.path = DataPath::kCudaIpc;
  const auto limit = stamp(op, inputs, outputs, issue.timeout).limit;
  std::vector<at::Tensor> touched(inputs);
  touched.insert(touched.end(), outputs.begin(), outputs.end());
  auto ticket = device_->submit(touched);
  // Raw pointers: the engine (which runs bodies) is destroyed before the transport and device.
  auto run = [transport = transport_.get(), device = device_.get(), op, limit, ticket,
              body = std::move(body)](DummyWork& work) mutable {
    transport->beginOp(op, limit);
    device->run(*ticket, work, [&] { body(*device, *transport); });
  };
  return enqueue(op, opType, profilingTitle, inputs, std::move(outputs), std::move(run));
}

OpDescriptor DummyBackend::describe(
    CollectiveKind kind,
    const at::Tensor& reference,
    int64_t numel,
    int root,
    int reduceOp,
    int count) {
  OpDescriptor op;
  op.kind = kind;
  op.dtype = static_cast<int32_t>(reference.scalar_type());
  op.numel = numel;
  op.root = root;
  op.reduceOp = reduceOp;
  op.count = count;
  return op;
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

algorithms::PeerAccessWindow DummyBackend::peerAccessWindow() const {
  return {options_->peerAccessMinBytes, options_->peerAccessMaxBytes};
}

algorithms::AllreducePlan DummyBackend::allreducePlan() const {
  return {options_->oneShotMaxBytes, peerAccessWindow()};
}

void DummyBackend::recordParamComms(
    uint64_t seq,
    bool p2p,
    const std::string& name,
    int rank,
    at::ScalarType dtype,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs,
    const SplitSizes& splits) const {
  // The caller checks that somebody listens: the macro allocates.
  auto total = [](const std::vector<at::Tensor>& tensors) {
    int64_t n = 0;
    for (const auto& t : tensors) {
      n += t.numel();
    }
    return n;
  };
  RECORD_PARAM_COMMS_DATA(
      std::make_tuple(static_cast<int64_t>(seq), p2p),
      std::make_tuple(getGroupUid(), getGroupDesc()),
      inputs,
      outputs,
      rank,
      std::string(name), // the macro takes its strings and vectors by value (rvalues)
      total(inputs),
      total(outputs),
      dtype,
      std::vector<int64_t>(splits.in),
      std::vector<int64_t>(splits.out),
      -1,
      -1,
      getSize());
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
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].layout() == c10::kSparse) {
    return allreduce_sparse(tensors, opts); // gloo's dispatch: the frontend sends both here
  }
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
  if (onDevicePath(tensors)) {
    if (getSize() == 1 && !spec.premul) {
      // Nothing moves and nothing changes (AVG divides by one): no device work to order, as
      // NCCL does for one rank.
      stamp(op, tensors, tensors, opts.timeout);
      return DummyWork::completed(getRank(), c10d::OpType::ALLREDUCE, "dummy:all_reduce", tensors);
    }
    return submitDevice(
        op,
        c10d::OpType::ALLREDUCE,
        "dummy:all_reduce",
        tensors,
        tensors,
        issued(opts),
        [tensor = tensors[0], spec](DeviceCollectives& d, Transport& t) mutable {
          d.allreduce(t, tensor, spec);
        });
  }
  return submit(
      op,
      c10d::OpType::ALLREDUCE,
      "dummy:all_reduce",
      tensors,
      tensors,
      issued(opts),
      [staged = HostStaging(tensor), spec, plan = allreducePlan(), workers = workers_](
          Transport& t) mutable {
        at::Tensor& host = staged.acquire(/*copyIn=*/true);
        algorithms::allreduce(t, host, spec, plan, *workers);
        staged.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allreduce_sparse(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  const Checker check("allreduce_sparse", getRank(), getSize());
  check.require(tensors.size() == 1, "expected a list of exactly 1 tensor, got ", tensors.size());
  const at::Tensor& tensor = tensors[0];
  check.require(
      tensor.defined() && tensor.layout() == c10::kSparse,
      "expected a sparse COO tensor, got a ",
      tensor.layout(),
      " one");
  check.require(
      tensor.device().is_cpu(),
      "sparse tensors must be on the CPU here, got one on '",
      tensor.device(),
      "'; move it with .cpu() or use a dense tensor");
  check.require(
      opts.reduceOp.op_ == c10d::ReduceOp::SUM,
      "sparse tensors are summed (ReduceOp.SUM, as with gloo); got another ReduceOp");
  requireReal("allreduce_sparse");
  OpDescriptor op;
  op.kind = CollectiveKind::kAllreduceSparse;
  op.dtype = static_cast<int32_t>(tensor.scalar_type());
  op.numel = tensor.numel();
  op.reduceOp = static_cast<int32_t>(c10d::ReduceOp::SUM);
  // Ranks must agree on the sizes and the sparse/dense split, not only the element count.
  std::vector<int64_t> shape = tensor.sizes().vec();
  shape.push_back(tensor.sparse_dim());
  op.layout = digestOf(shape);
  return submit(
      op,
      c10d::OpType::_ALLREDUCE_SPARSE,
      "dummy:sparse_all_reduce",
      tensors,
      tensors,
      issued(opts),
      [tensor = tensors[0]](Transport& t) {
        // Replaces the tensor's indices and values with the sum's (gloo does the same).
        tensor.copy_(algorithms::allreduceSparse(t, tensor));
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
  std::vector<at::Tensor> touched(outputs);
  touched.push_back(input);
  if (onDevicePath(touched)) {
    return submitDevice(
        op,
        c10d::OpType::ALLGATHER,
        "dummy:all_gather",
        inputTensors,
        outputs,
        issued(opts),
        [input, outputs](DeviceCollectives& d, Transport& t) mutable {
          d.allgather(t, outputs, input);
        });
  }
  return submit(
      op,
      c10d::OpType::ALLGATHER,
      "dummy:all_gather",
      inputTensors,
      outputs,
      issued(opts),
      [in = HostStaging(input),
       out = HostStagingList(outputs),
       window = peerAccessWindow(),
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
  const Checker check("_allgather_base", getRank(), getSize());
  check.tensor(inputBuffer, "input");
  check.like(outputBuffer, inputBuffer, inputBuffer.numel() * getSize(), "the output tensor");
  TORCH_CHECK(mode() == Mode::kReal, "dummy _allgather_base", zeroModeUnsupported);
  OpDescriptor op;
  op.kind = CollectiveKind::kAllgatherBase;
  op.dtype = static_cast<int32_t>(inputBuffer.scalar_type());
  op.numel = inputBuffer.numel();
  if (onDevicePath({inputBuffer, outputBuffer})) {
    return submitDevice(
        op,
        c10d::OpType::_ALLGATHER_BASE,
        "dummy:_allgather_base",
        {inputBuffer},
        {outputBuffer},
        issued(opts),
        [input = inputBuffer, output = outputBuffer](DeviceCollectives& d, Transport& t) mutable {
          d.allgatherBase(t, output, input);
        });
  }
  return submit(
      op,
      c10d::OpType::_ALLGATHER_BASE,
      "dummy:_allgather_base",
      {inputBuffer},
      {outputBuffer},
      issued(opts),
      [in = HostStaging(inputBuffer),
       out = HostStaging(outputBuffer),
       window = peerAccessWindow(),
       workers = workers_](Transport& t) mutable {
        at::Tensor& hostOut = out.acquire(/*copyIn=*/false);
        algorithms::allgatherInto(t, in.acquire(/*copyIn=*/true), hostOut, window, workers.get());
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
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
  if (onDevicePath(tensors)) {
    return submitDevice(
        op,
        c10d::OpType::BROADCAST,
        "dummy:broadcast",
        tensors,
        tensors,
        issued(opts),
        [tensor = tensors[0], root](DeviceCollectives& d, Transport& t) mutable {
          d.broadcast(t, tensor, root);
        });
  }
  return submit(
      op,
      c10d::OpType::BROADCAST,
      "dummy:broadcast",
      tensors,
      tensors,
      issued(opts),
      [staged = HostStaging(tensor), root, isRoot](Transport& t) mutable {
        algorithms::broadcast(t, staged.acquire(/*copyIn=*/isRoot), root);
        staged.release(/*copyOut=*/!isRoot);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::barrier(const c10d::BarrierOptions& opts) {
  TORCH_CHECK(mode() == Mode::kReal, "dummy barrier", zeroModeUnsupported);
  OpDescriptor op;
  op.kind = CollectiveKind::kBarrier;
  return submit(
      op, c10d::OpType::BARRIER, "dummy:barrier", {}, {}, issued(opts), [](Transport& t) {
        algorithms::barrier(t);
      });
}

void DummyBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  requireReal("monitoredBarrier");
  // Tags of their own, negative: user code passes tags from 0 up.
  constexpr int kToRoot = -1001;
  constexpr int kFromRoot = -1002;
  const auto timeout = opts.timeout == c10d::kUnsetTimeout ? options_->timeout : opts.timeout;
  auto token = [] { return at::zeros({1}, at::kByte); }; // a fresh one per message (gloo's rule)
  if (getRank() != 0) {
    try {
      std::vector<at::Tensor> out{token()};
      send(out, 0, kToRoot)->wait(timeout);
      std::vector<at::Tensor> in{token()};
      recv(in, 0, kFromRoot)->wait(timeout);
    } catch (const std::exception& e) {
      TORCH_CHECK(
          false,
          "Rank ",
          getRank(),
          " successfully reached monitoredBarrier, but received errors while waiting for "
          "send/recv from rank 0. Please check rank 0 logs for faulty rank.\n",
          e.what());
    }
    return;
  }
  const auto start = Clock::now();
  std::vector<int> processed;
  std::vector<int> failed;
  for (int r = 1; r < getSize(); ++r) {
    auto remaining = timeout -
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (waitAllRanks) {
      remaining = timeout; // every rank gets the full timeout to be heard
    } else {
      TORCH_CHECK(
          remaining.count() > 0,
          "Rank 0 timed out in monitoredBarrier after ",
          timeout.count(),
          " ms. ",
          processed.empty()
              ? std::string("No ranks successfully processed in monitoredBarrier.")
              : c10::str("Successfully processed ranks: ", c10::Join(", ", processed)));
    }
    try {
      std::vector<at::Tensor> in{token()};
      recv(in, r, kToRoot)->wait(remaining);
      processed.push_back(r);
    } catch (const std::exception& e) {
      TORCH_CHECK(
          waitAllRanks,
          "[Rank 0]: Rank ",
          r,
          " failed to pass monitoredBarrier in ",
          timeout.count(),
          " ms\n Original exception: \n",
          e.what());
      failed.push_back(r);
    }
  }
  TORCH_CHECK(
      failed.empty(),
      "[Rank 0]: Ranks ",
      c10::Join(", ", failed),
      " failed to pass monitoredBarrier in ",
      timeout.count(),
      " ms");
  for (int r = 1; r < getSize(); ++r) {
    std::vector<at::Tensor> out{token()};
    send(out, r, kFromRoot)->wait(timeout);
  }
}

namespace {

int64_t totalNumel(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) {
    total += t.numel();
  }
  return total;
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& list : lists) {
    all.insert(all.end(), list.begin(), list.end());
  }
  return all;
}

} // namespace

c10::intrusive_ptr<c10d::Work> DummyBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  const Checker check("allreduce_coalesced", getRank(), getSize());
  check.sameDevice(tensors, "input");
  std::vector<ReduceSpec> specs;
  for (const auto& t : tensors) {
    specs.push_back(
        resolveReduce(opts.reduceOp, t.scalar_type(), getSize(), "allreduce_coalesced", getRank()));
  }
  requireReal("allreduce_coalesced");
  return submit(
      withLayout(
          describe(
              CollectiveKind::kAllreduceCoalesced,
              tensors[0],
              totalNumel(tensors),
              -1,
              opts.reduceOp.op_,
              static_cast<int>(tensors.size())),
          tensors),
      c10d::OpType::ALLREDUCE_COALESCED,
      "dummy:allreduce_coalesced",
      tensors,
      tensors,
      issued(opts),
      [staged = HostStagingList(tensors), specs, plan = allreducePlan(), workers = workers_](
          Transport& t) mutable {
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
  const Checker check("reduce", getRank(), getSize());
  check.single(tensors, "input");
  check.root(opts.rootRank);
  check.require(opts.rootTensor == 0, "rootTensor must be 0, got ", opts.rootTensor);
  const at::Tensor& tensor = tensors[0];
  const ReduceSpec spec =
      resolveReduce(opts.reduceOp, tensor.scalar_type(), getSize(), "reduce", getRank());
  requireReal("reduce");
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == getRank();
  return submit(
      describe(CollectiveKind::kReduce, tensor, tensor.numel(), root, opts.reduceOp.op_),
      c10d::OpType::REDUCE,
      "dummy:reduce",
      tensors,
      tensors,
      issued(opts),
      [staged = HostStaging(tensor),
       spec,
       root,
       isRoot,
       oneShot = options_->oneShotMaxBytes,
       workers = workers_](Transport& t) mutable {
        algorithms::reduce(t, staged.acquire(/*copyIn=*/true), spec, root, oneShot, *workers);
        staged.release(/*copyOut=*/isRoot);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const Checker check("allgather_coalesced", getRank(), getSize());
  check.sameDevice(inputTensors, "input");
  check.require(
      static_cast<int>(outputTensorLists.size()) == getSize(),
      "expected one output list per rank (",
      getSize(),
      "), got ",
      outputTensorLists.size());
  for (const auto& list : outputTensorLists) {
    check.require(
        list.size() == inputTensors.size(),
        "an output list has ",
        list.size(),
        " tensors; expected one per input (",
        inputTensors.size(),
        ")");
    for (size_t i = 0; i < list.size(); ++i) {
      check.like(list[i], inputTensors[i], inputTensors[i].numel(), "an output tensor");
    }
  }
  requireReal("allgather_coalesced");
  const int ws = getSize();
  const size_t count = inputTensors.size();
  const std::vector<at::Tensor> outputs = flatten(outputTensorLists); // by rank, then by input
  return submit(
      withLayout(
          describe(
              CollectiveKind::kAllgatherCoalesced,
              inputTensors[0],
              totalNumel(inputTensors),
              -1,
              -1,
              static_cast<int>(count)),
          inputTensors),
      c10d::OpType::ALLGATHER_COALESCED,
      "dummy:all_gather_coalesced",
      inputTensors,
      outputs,
      issued(opts),
      [in = HostStagingList(inputTensors),
       out = HostStagingList(outputs),
       ws,
       count,
       window = peerAccessWindow(),
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
  const Checker check("allgather_into_tensor_coalesced", getRank(), getSize());
  check.sameDevice(inputs, "input");
  check.require(
      outputs.size() == inputs.size(),
      "got ",
      outputs.size(),
      " outputs for ",
      inputs.size(),
      " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check.like(outputs[i], inputs[i], inputs[i].numel() * getSize(), "an output tensor");
  }
  requireReal("allgather_into_tensor_coalesced");
  return submit(
      withLayout(
          describe(
              CollectiveKind::kAllgatherIntoTensorCoalesced,
              inputs[0],
              totalNumel(inputs),
              -1,
              -1,
              static_cast<int>(inputs.size())),
          inputs),
      c10d::OpType::COALESCED,
      "dummy:all_gather_into_tensor_coalesced",
      inputs,
      outputs,
      issued(opts),
      [in = HostStagingList(inputs),
       out = HostStagingList(outputs),
       window = peerAccessWindow(),
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
  const Checker check("gather", getRank(), getSize());
  check.single(inputTensors, "input");
  check.root(opts.rootRank);
  const at::Tensor& input = inputTensors[0];
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == getRank();
  std::vector<at::Tensor> outputs =
      check.rootList(outputTensors, isRoot, root, input, "output", "the input");
  requireReal("gather");
  return submit(
      describe(CollectiveKind::kGather, input, input.numel(), root),
      c10d::OpType::GATHER,
      "dummy:gather",
      inputTensors,
      outputs,
      issued(opts),
      [in = HostStaging(input),
       out = HostStagingList(outputs),
       root,
       window = peerAccessWindow(),
       workers = workers_](Transport& t) mutable {
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
  const Checker check("scatter", getRank(), getSize());
  check.single(outputTensors, "output");
  check.root(opts.rootRank);
  const at::Tensor& output = outputTensors[0];
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == getRank();
  std::vector<at::Tensor> inputs =
      check.rootList(inputTensors, isRoot, root, output, "input", "the output");
  requireReal("scatter");
  return submit(
      describe(CollectiveKind::kScatter, output, output.numel(), root),
      c10d::OpType::SCATTER,
      "dummy:scatter",
      inputs,
      outputTensors,
      issued(opts),
      [in = HostStagingList(inputs), out = HostStaging(output), root](Transport& t) mutable {
        algorithms::scatter(t, in.acquire(/*copyIn=*/true), out.acquire(/*copyIn=*/false), root);
        in.release(/*copyOut=*/false);
        out.release(/*copyOut=*/true);
      });
}

c10::intrusive_ptr<c10d::Work> DummyBackend::reduce_scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  const Checker check("reduce_scatter", getRank(), getSize());
  check.single(outputTensors, "output");
  const at::Tensor& output = outputTensors[0];
  check.require(inputTensors.size() == 1, "expected 1 list of inputs, got ", inputTensors.size());
  check.list(inputTensors[0], getSize(), output, output.numel(), "input", "the output");
  const ReduceSpec spec =
      resolveReduce(opts.reduceOp, output.scalar_type(), getSize(), "reduce_scatter", getRank());
  requireReal("reduce_scatter");
  return submit(
      describe(CollectiveKind::kReduceScatter, output, output.numel(), -1, opts.reduceOp.op_),
      c10d::OpType::REDUCE_SCATTER,
      "dummy:reduce_scatter",
      inputTensors[0],
      outputTensors,
      issued(opts),
      [in = HostStagingList(inputTensors[0]), out = HostStaging(output), spec](
          Transport& t) mutable {
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
  return reduceScatterTensors(outputs, inputs, opts, "_reduce_scatter_base");
}

c10::intrusive_ptr<c10d::Work> DummyBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return reduceScatterTensors(outputs, inputs, opts, "reduce_scatter_tensor_coalesced");
}

c10::intrusive_ptr<c10d::Work> DummyBackend::reduceScatterTensors(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts,
    const char* collective) {
  const Checker check(collective, getRank(), getSize());
  check.sameDevice(outputs, "output");
  check.require(
      outputs.size() == inputs.size(),
      "got ",
      outputs.size(),
      " outputs for ",
      inputs.size(),
      " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check.like(
        inputs[i], outputs[i], outputs[i].numel() * getSize(), "an input tensor", "its output");
  }
  std::vector<ReduceSpec> specs;
  for (const auto& t : outputs) {
    specs.push_back(
        resolveReduce(opts.reduceOp, t.scalar_type(), getSize(), collective, getRank()));
  }
  requireReal(collective);
  const bool coalesced = std::strcmp(collective, "_reduce_scatter_base") != 0;
  if (!coalesced && onDevicePath({inputs[0], outputs[0]})) {
    return submitDevice(
        describe(
            CollectiveKind::kReduceScatterBase, outputs[0], outputs[0].numel(), -1,
            opts.reduceOp.op_),
        c10d::OpType::_REDUCE_SCATTER_BASE,
        "dummy:_reduce_scatter_base",
        inputs,
        outputs,
        issued(opts),
        [input = inputs[0], output = outputs[0], spec = specs[0]](
            DeviceCollectives& d, Transport& t) mutable {
          d.reduceScatterBase(t, output, input, spec);
        });
  }
  return submit(
      withLayout(
          describe(
              coalesced ? CollectiveKind::kReduceScatterTensorCoalesced
                        : CollectiveKind::kReduceScatterBase,
              outputs[0],
              totalNumel(outputs),
              -1,
              opts.reduceOp.op_,
              static_cast<int>(outputs.size())),
          outputs),
      coalesced ? c10d::OpType::COALESCED : c10d::OpType::_REDUCE_SCATTER_BASE,
      coalesced ? "dummy:reduce_scatter_tensor_coalesced" : "dummy:_reduce_scatter_base",
      inputs,
      outputs,
      issued(opts),
      [in = HostStagingList(inputs),
       out = HostStagingList(outputs),
       specs,
       window = peerAccessWindow(),
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
  const Checker check("alltoall_base", getRank(), getSize());
  check.tensor(inputBuffer, "input");
  check.like(outputBuffer, inputBuffer, outputBuffer.numel(), "the output tensor");
  const int ws = getSize();
  // Split sizes count rows (dim 0); none given means equal splits.
  auto rowsOf = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (splits.empty()) {
      check.require(
          rows % ws == 0, what, " has ", rows, " rows, which ", ws, " ranks cannot split evenly");
      return std::vector<int64_t>(ws, rows / ws);
    }
    check.require(
        static_cast<int>(splits.size()) == ws,
        what,
        " split sizes have ",
        splits.size(),
        " entries; expected ",
        ws);
    int64_t total = 0;
    for (int64_t s : splits) {
      check.require(s >= 0, what, " split sizes must not be negative");
      total += s;
    }
    check.require(
        total == rows, what, " split sizes add up to ", total, " but it has ", rows, " rows");
    return splits;
  };
  const std::vector<int64_t> sendRows = rowsOf(inputBuffer, inputSplitSizes, "the input");
  const std::vector<int64_t> recvRows = rowsOf(outputBuffer, outputSplitSizes, "the output");
  auto rowBytes = [](const at::Tensor& t) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    return rows == 0 ? size_t{0} : static_cast<size_t>(t.numel() / rows * t.element_size());
  };
  const size_t sendRowBytes = rowBytes(inputBuffer);
  const size_t recvRowBytes = rowBytes(outputBuffer);
  requireReal("alltoall_base");
  return submit(
      describe(CollectiveKind::kAlltoallBase, inputBuffer, 0),
      c10d::OpType::ALLTOALL_BASE,
      "dummy:all_to_all",
      {inputBuffer},
      {outputBuffer},
      issued(opts),
      [in = HostStaging(inputBuffer),
       out = HostStaging(outputBuffer),
       sendRows,
       recvRows,
       sendRowBytes,
       recvRowBytes](Transport& t) mutable {
        auto* src = static_cast<std::byte*>(in.acquire(/*copyIn=*/true).data_ptr());
        auto* dst = static_cast<std::byte*>(out.acquire(/*copyIn=*/false).data_ptr());
        std::vector<algorithms::Span> sends, receives;
        for (size_t r = 0; r < sendRows.size(); ++r) {
          sends.push_back({src, sendRows[r] * sendRowBytes});
          src += sendRows[r] * sendRowBytes;
          receives.push_back({dst, recvRows[r] * recvRowBytes});
          dst += recvRows[r] * recvRowBytes;
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
  const Checker check("alltoall", getRank(), getSize());
  check.uniform(inputTensors, "input");
  check.require(
      static_cast<int>(inputTensors.size()) == getSize(),
      "expected one input tensor per rank (",
      getSize(),
      "), got ",
      inputTensors.size());
  check.require(
      outputTensors.size() == inputTensors.size(),
      "expected one output tensor per rank (",
      getSize(),
      "), got ",
      outputTensors.size());
  for (const auto& output : outputTensors) {
    check.like(output, inputTensors[0], output.numel(), "an output tensor");
  }
  requireReal("alltoall");
  return submit(
      describe(CollectiveKind::kAlltoall, inputTensors[0], 0),
      c10d::OpType::ALLTOALL,
      "dummy:all_to_all",
      inputTensors,
      outputTensors,
      issued(opts),
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

c10::intrusive_ptr<c10d::Work> DummyBackend::send(
    std::vector<at::Tensor>& tensors,
    int dstRank,
    int tag) {
  const Checker check("send", getRank(), getSize());
  check.single(tensors, "input");
  check.require(
      dstRank >= 0 && dstRank < getSize() && dstRank != getRank(),
      "destination rank ",
      dstRank,
      " is not another rank of this group of ",
      getSize());
  requireReal("send");
  ++p2pSeq_;
  const bool observed = at::hasCallbacks(); // takes a lock: ask once
  if (observed) {
    recordParamComms(
        p2pSeq_, true, "send", dstRank, tensors[0].scalar_type(), tensors, tensors);
  }
  // Staged on the caller's thread: the sender's data is taken as it is at the call.
  auto staged = std::make_shared<HostStaging>(tensors[0]);
  const at::Tensor& host = staged->acquire(/*copyIn=*/true);
  auto work = c10::make_intrusive<DummyWork>(
      getRank(), c10d::OpType::SEND, observed ? "dummy:send" : nullptr, tensors,
      std::vector<at::Tensor>(), 0, nullptr, p2p_);
  p2p_->send(
      work, dstRank, tag, host.data_ptr(), host.numel() * host.element_size(),
      [staged] { staged->release(/*copyOut=*/false); });
  return work;
}

c10::intrusive_ptr<c10d::Work> DummyBackend::recv(
    std::vector<at::Tensor>& tensors,
    int srcRank,
    int tag) {
  const Checker check("recv", getRank(), getSize());
  check.require(
      srcRank >= 0 && srcRank < getSize() && srcRank != getRank(),
      "source rank ",
      srcRank,
      " is not another rank of this group of ",
      getSize());
  return receive(tensors, srcRank, tag, "recv");
}

c10::intrusive_ptr<c10d::Work> DummyBackend::recvAnysource(
    std::vector<at::Tensor>& tensors,
    int tag) {
  return receive(tensors, -1, tag, "recvAnysource");
}

c10::intrusive_ptr<c10d::Work> DummyBackend::receive(
    std::vector<at::Tensor>& tensors,
    int srcRank,
    int tag,
    const char* what) {
  const Checker check(what, getRank(), getSize());
  check.single(tensors, "output");
  requireReal(what);
  ++p2pSeq_;
  const bool observed = at::hasCallbacks(); // takes a lock: ask once
  if (observed) {
    recordParamComms(p2pSeq_, true, what, srcRank, tensors[0].scalar_type(), tensors, tensors);
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
  p2p_->recv(
      work, srcRank, tag, host.data_ptr(), host.numel() * host.element_size(),
      [staged] { staged->release(/*copyOut=*/true); });
  return work;
}

} // namespace dummy_collectives
