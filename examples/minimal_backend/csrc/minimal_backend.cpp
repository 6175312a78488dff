// minimal_backend: the smallest c10d backend that really communicates. PyTorch's tutorial
// "Customize Process Group Backends Using Cpp Extensions" has a Backend whose collectives only
// zero their tensors; this keeps its shape (a Backend and a Work subclass, a creator registered
// from Python) and makes it real. The transport is the c10d Store the group was made with:
// nothing to connect, and every wait on it takes a timeout. One worker thread per group runs
// the collectives in issue order, so async_op=True returns at once while every rank counts the
// same sequence numbers. README.md says what is left out, and where dummy_collectives has it.
#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/python.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace minimal_backend {
namespace {

constexpr const char* kNotImplemented =
    ": not implemented; this backend has all_reduce (SUM only), all_gather, broadcast, barrier";

const char* reduceOpName(c10d::ReduceOp::RedOpType op) {
  static const char* const names[] = {
      "SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM", "UNUSED"};
  return op <= c10d::ReduceOp::UNUSED ? names[op] : "unknown";
}

// What a rank called, sent ahead of its bytes in every round: ranks that called different
// collectives (or broadcasts from different roots) raise on every rank instead of mixing data.
struct Call {
  int32_t kind; // c10d::OpType
  int32_t root; // -1: none
};

std::string describe(const Call& call) {
  return c10d::opTypeToString(static_cast<c10d::OpType>(call.kind)) +
      (call.root >= 0 ? c10::str(" from root ", call.root) : std::string());
}

// One collective as the worker runs it, fixed when it was issued.
struct Round {
  std::string what; // "minimal backend: all_reduce on rank 1 of 2 (group '0'), collective #3"
  uint64_t seq;
  c10d::OpType kind;
  std::chrono::milliseconds timeout;
};

} // namespace

class MinimalWork : public c10d::Work {
 public:
  MinimalWork(int rank, c10d::OpType kind, std::string what, std::vector<at::Tensor> outputs)
      : Work(rank, kind),
        what_(std::move(what)),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())) {}

  // Called once, by the worker. The future first: whoever saw wait() return may read it at once.
  void complete(const std::exception_ptr& error) {
    error ? future_->setError(error) : future_->markCompleted(c10::IValue(outputs_));
    finish(error);
  }

  // c10d's Work::wait, except that an expired wait(timeout) names the collective and the rank,
  // and leaves the collective running: a later wait() still returns its result.
  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == kNoTimeout) {
      cv_.wait(lock, [this] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [this] { return completed_; })) {
      C10_THROW_ERROR(
          DistBackendError,
          c10::str(what_, ": Work.wait(timeout=", timeout.count(), " ms) expired before the "
                   "collective completed; it goes on, and a later wait() returns its result"));
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  const std::string what_;
  const std::vector<at::Tensor> outputs_; // the future's value, once it succeeded
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class MinimalBackend : public c10d::Backend {
 public:
  MinimalBackend(
      c10::intrusive_ptr<c10d::Store> store, int rank, int size,
      std::chrono::milliseconds timeout, std::string group)
      : Backend(rank, size), store_(std::move(store)), timeout_(timeout), group_(std::move(group)) {
    worker_ = std::thread([this] { loop(); }); // last: everything it uses exists by now
  }

  ~MinimalBackend() override { shutdown(); }
  const std::string getBackendName() const override { return "minimal"; }

  // Lets the collective that runs (if any) end, then stops the worker. What is still queued
  // fails: its Works must complete, and no peer will join it now.
  void shutdown() override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (std::exchange(stopping_, true)) return; // the destructor calls it again
    cv_.notify_all();
    lock.unlock();
    worker_.join();
    for (auto& op : queue_) {
      op.work->complete(std::make_exception_ptr(c10::DistBackendError(
          {__func__, __FILE__, __LINE__}, c10::str(op.round.what, ": the group was shut down"))));
    }
    queue_.clear(); // enqueue() refuses new ones once stopping_ is set
    // The data lives in the Store, which rank 0's process serves (env://, tcp://): if it left
    // at once, a peer still reading the last collective would fail. So each rank's last Store
    // call is a goodbye, and rank 0 waits for everyone's, up to the timeout (not after a failure:
    // peers may never come), then clears the group's keys. Errors are moot: all has ended.
    try {
      store_->set(c10::str("minimal/bye/", getRank()), std::vector<uint8_t>());
      if (getRank() != 0 || !failed_.empty()) return;
      std::vector<std::string> keys;
      for (int i = 0; i < getSize(); ++i) keys.push_back(c10::str("minimal/bye/", i));
      store_->wait(keys, timeout_);
      for (int i = 0; nextSeq_ > 0 && i < getSize(); ++i) keys.push_back(key(nextSeq_ - 1, i));
      for (const auto& k : keys) store_->deleteKey(k);
    } catch (const std::exception&) {
    }
  }

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    const at::Tensor t = single("all_reduce", tensors);
    TORCH_CHECK_NOT_IMPLEMENTED(
        opts.reduceOp.op_ == c10d::ReduceOp::SUM, where("all_reduce"), ": ReduceOp ",
        reduceOpName(opts.reduceOp.op_), " is not implemented; this backend reduces with SUM only");
    auto body = [this, t](const Round& r) {
      auto all = exchange(r, t, -1);
      // Every rank adds the same bytes in the same order (rank 0, 1, ...): the results are
      // bit-identical on every rank, in floating point too.
      at::Tensor sum = payload(all[0], t).clone();
      for (size_t i = 1; i < all.size(); ++i) sum.add_(payload(all[i], t));
      t.copy_(sum);
    };
    return enqueue(c10d::OpType::ALLREDUCE, "all_reduce", {t}, opts.timeout, body);
  }

  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    const at::Tensor in = single("all_gather", inputs);
    TORCH_CHECK_VALUE(
        outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(getSize()),
        where("all_gather"), ": takes one list of ", getSize(), " output tensors (one per rank)");
    for (const auto& out : outputs[0]) {
      check("all_gather", out, "an output tensor");
      TORCH_CHECK_VALUE(
          out.numel() == in.numel() && out.scalar_type() == in.scalar_type(), where("all_gather"),
          ": mismatched sizes: an output tensor is ", out.scalar_type(), out.sizes(),
          ", the input ", in.scalar_type(), in.sizes());
    }
    auto body = [this, in, outs = outputs[0]](const Round& r) {
      auto all = exchange(r, in, -1);
      for (size_t i = 0; i < all.size(); ++i) copyOut(all[i], outs[i]);
    };
    return enqueue(c10d::OpType::ALLGATHER, "all_gather", outputs[0], opts.timeout, body);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    const at::Tensor t = single("broadcast", tensors);
    const int64_t root = opts.rootRank;
    TORCH_CHECK_VALUE(
        root >= 0 && root < getSize(), where("broadcast"), ": root ", root,
        " is not a rank of this group of ", getSize());
    auto body = [this, t, root](const Round& r) {
      auto all = exchange(r, t, root);
      if (root != getRank()) copyOut(all[root], t);
    };
    return enqueue(c10d::OpType::BROADCAST, "broadcast", {t}, opts.timeout, body);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    // Every rank sets its key and waits for everyone's: nobody leaves before all have come.
    return enqueue(c10d::OpType::BARRIER, "barrier", {}, opts.timeout, [this](const Round& r) {
      exchange(r, at::Tensor(), -1);
    });
  }

  // c10d's defaults say "Backend minimal does not support reduce"; these (the calls people make)
  // name the rank, the group and what is implemented: one line of one rank's log is enough.
#define NOT_IMPLEMENTED(method, name, ...)                      \
  c10::intrusive_ptr<c10d::Work> method(__VA_ARGS__) override { \
    TORCH_CHECK_NOT_IMPLEMENTED(false, where(name), kNotImplemented); \
  }
  using T = at::Tensor&;
  using Ts = std::vector<at::Tensor>&;
  using TLs = std::vector<std::vector<at::Tensor>>&;
  NOT_IMPLEMENTED(reduce, "reduce", Ts, const c10d::ReduceOptions&)
  NOT_IMPLEMENTED(_allgather_base, "all_gather_into_tensor", T, T, const c10d::AllgatherOptions&)
  NOT_IMPLEMENTED(gather, "gather", TLs, Ts, const c10d::GatherOptions&)
  NOT_IMPLEMENTED(scatter, "scatter", Ts, TLs, const c10d::ScatterOptions&)
  NOT_IMPLEMENTED(reduce_scatter, "reduce_scatter", Ts, TLs, const c10d::ReduceScatterOptions&)
  NOT_IMPLEMENTED(_reduce_scatter_base, "reduce_scatter_tensor", T, T,
                  const c10d::ReduceScatterOptions&)
  NOT_IMPLEMENTED(alltoall_base, "all_to_all_single", T, T, std::vector<int64_t>&,
                  std::vector<int64_t>&, const c10d::AllToAllOptions&)
  NOT_IMPLEMENTED(alltoall, "all_to_all", Ts, Ts, const c10d::AllToAllOptions&)
  NOT_IMPLEMENTED(send, "send", Ts, int, int)
  NOT_IMPLEMENTED(recv, "recv", Ts, int, int)
  NOT_IMPLEMENTED(recvAnysource, "recv (any source)", Ts, int)
#undef NOT_IMPLEMENTED

 private:
  struct Op {
    c10::intrusive_ptr<MinimalWork> work;
    Round round;
    std::function<void(const Round&)> body;
  };

  std::string where(const char* op) const {
    return c10::str("minimal backend: ", op, " on rank ", getRank(), " of ", getSize(),
                    " (group '", group_, "')");
  }

  // Arguments are checked on the caller's thread before anything is sent, so a bad call raises
  // at once. (Where only some ranks pass bad arguments, the others time out, naming them.)
  void check(const char* op, const at::Tensor& t, const char* role) const {
    TORCH_CHECK_VALUE(t.device().is_cpu(), where(op), ": ", role, " is on ", t.device(),
                      "; this backend is CPU-only (its transport copies bytes through the Store)");
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, where(op), ": ", role, " has layout ",
                      t.layout(), "; only dense tensors are supported");
    TORCH_CHECK_VALUE(t.is_contiguous(), where(op), ": ", role, " is not contiguous; this "
                      "backend sends raw bytes: pass t.contiguous() and copy the result back");
  }

  at::Tensor single(const char* op, const std::vector<at::Tensor>& tensors) const {
    TORCH_CHECK_VALUE(
        tensors.size() == 1, where(op), ": takes exactly one tensor, got ", tensors.size());
    check(op, tensors[0], "the tensor");
    return tensors[0];
  }

  static at::Tensor payload(const std::vector<uint8_t>& bytes, const at::Tensor& like) {
    return at::from_blob(const_cast<uint8_t*>(bytes.data()), like.sizes(), like.options());
  }

  static void copyOut(const std::vector<uint8_t>& bytes, const at::Tensor& out) {
    // memcpy to a null pointer (an empty tensor's) is undefined, even for 0 bytes.
    if (out.nbytes() > 0) std::memcpy(out.data_ptr(), bytes.data(), out.nbytes());
  }

  c10::intrusive_ptr<c10d::Work> enqueue(
      c10d::OpType kind, const char* name, std::vector<at::Tensor> outputs,
      std::chrono::milliseconds timeout, std::function<void(const Round&)> body) {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopping_, where(name), ": the group was shut down");
    const uint64_t seq = nextSeq_++;
    // c10d passes kUnsetTimeout unless the caller gave this one call a timeout of its own.
    Round round{c10::str(where(name), ", collective #", seq), seq, kind,
                timeout == c10d::kUnsetTimeout ? timeout_ : timeout};
    auto work = c10::make_intrusive<MinimalWork>(getRank(), kind, round.what, std::move(outputs));
    queue_.push_back(Op{work, std::move(round), std::move(body)});
    cv_.notify_one();
    return work;
  }

  void loop() {
    for (;;) {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return; // shutdown() fails what is still queued
      Op op = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      std::exception_ptr error;
      try {
        // After a timeout this rank is out of step with its peers: refuse, rather than pair its
        // next collective with their late one.
        TORCH_CHECK(failed_.empty(), op.round.what, ": the group failed earlier (", failed_,
                    "); destroy it and create a new one");
        op.body(op.round);
      } catch (const c10::DistError& e) { // a timeout, or the Store failed
        failed_ = e.what_without_backtrace();
        error = std::current_exception();
      } catch (...) {
        error = std::current_exception();
      }
      op.work->complete(error);
    }
  }

  static std::string key(uint64_t seq, int rank) { return c10::str("minimal/", seq, "/", rank); }

  // One round over the Store, the transport of every collective: this rank sets
  // "minimal/<seq>/<rank>" to its tensor's bytes (with a root, only the root sends any; the
  // others set an empty value), waits up to the timeout for every rank's key and reads them all.
  // No group name in the key: c10d gives each group a Store prefixed with its own.
  std::vector<std::vector<uint8_t>> exchange(const Round& r, const at::Tensor& t, int64_t root) {
    auto sent = [&](int64_t i) { return t.defined() && (root < 0 || root == i) ? t.nbytes() : 0; };
    const auto* data = sent(getRank()) > 0 ? static_cast<const uint8_t*>(t.data_ptr()) : nullptr;
    const Call mine{static_cast<int32_t>(r.kind), static_cast<int32_t>(root)};
    std::vector<uint8_t> bytes(sizeof(Call));
    std::memcpy(bytes.data(), &mine, sizeof(Call));
    bytes.insert(bytes.end(), data, data + sent(getRank()));
    std::vector<std::string> keys;
    for (int i = 0; i < getSize(); ++i) keys.push_back(key(r.seq, i));
    store_->set(keys[getRank()], bytes);
    try {
      store_->wait(keys, r.timeout);
    } catch (const c10::Error& e) {
      std::string missing;
      for (int i = 0; i < getSize(); ++i) {
        if (!store_->check({keys[i]})) missing += c10::str(missing.empty() ? "" : ", ", i);
      }
      // Take this round's key back: a peer that comes late then times out too, instead of
      // completing with this rank's bytes while this rank reports a failure.
      store_->deleteKey(keys[getRank()]);
      C10_THROW_ERROR(DistBackendError,
                      c10::str(r.what, ": timed out after ", r.timeout.count(),
                               " ms (the group's timeout) waiting for rank(s) ", missing,
                               " to join it; the Store said: ", e.what_without_backtrace()));
    }
    auto all = store_->multiGet(keys);
    // Every peer has set its key of this round, so it has finished reading the previous one:
    // this rank's key of that round can go. The Store holds at most one key per rank and group.
    if (r.seq > 0) store_->deleteKey(key(r.seq - 1, getRank()));
    // Every rank reads every rank's call: all raise alike and stay in step, so the group stays
    // usable.
    std::string calls;
    bool same = true;
    for (int i = 0; i < getSize(); ++i) {
      Call theirs{};
      std::memcpy(&theirs, all[i].data(), sizeof(Call));
      same = same && theirs.kind == mine.kind && theirs.root == mine.root;
      calls += c10::str("; rank ", i, ": ", describe(theirs));
      all[i].erase(all[i].begin(), all[i].begin() + sizeof(Call));
    }
    TORCH_CHECK(same, r.what, ": ranks called different collectives", calls);
    // Copying a peer's bytes into a tensor of another size would write past it: every rank
    // checks the sizes, and raises if the ranks called the collective with different tensors.
    for (int i = 0; i < getSize(); ++i) {
      TORCH_CHECK_VALUE(all[i].size() == sent(i), r.what, ": mismatched sizes: rank ", i,
                        " sent ", all[i].size(), " bytes, this rank expects ", sent(i));
    }
    return all;
  }

  const c10::intrusive_ptr<c10d::Store> store_;
  const std::chrono::milliseconds timeout_;
  const std::string group_;
  std::mutex mutex_; // guards queue_, nextSeq_ and stopping_
  std::condition_variable cv_;
  std::deque<Op> queue_;
  uint64_t nextSeq_ = 0;
  bool stopping_ = false;
  std::string failed_; // the worker's alone: why the group failed; empty while it works
  std::thread worker_;
};

} // namespace minimal_backend

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  using minimal_backend::MinimalBackend;
  m.doc() = "minimal_backend: a c10d backend over the c10d Store";
  py::module_::import("torch.distributed"); // registers torch's Store and Backend pybind types
  py::class_<MinimalBackend, c10d::Backend, c10::intrusive_ptr<MinimalBackend>>(m, "MinimalBackend")
      .def(py::init<c10::intrusive_ptr<c10d::Store>, int, int, std::chrono::milliseconds,
                    std::string>(),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("group_name") = std::string(), py::call_guard<py::gil_scoped_release>());
}
