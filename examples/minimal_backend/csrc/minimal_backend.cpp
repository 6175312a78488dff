// minimal_backend: the smallest c10d backend that really communicates.
//
// PyTorch's tutorial "Customize Process Group Backends Using Cpp Extensions" shows a Backend
// whose collectives only zero their tensors. This file keeps the tutorial's shape (a Backend
// subclass, a Work subclass, a Python module that registers a creator) and makes it real:
//  - The transport is the c10d Store the group was created with: in each collective every rank
//    sets its bytes under a key of its own and reads its peers' keys. No sockets or shared memory
//    to set up, and every wait is a Store wait, which takes a timeout.
//  - One worker thread per group runs the collectives in the order they were issued, so
//    async_op=True returns at once while every rank still counts the same sequence numbers.
//  - A Work's future completes with the outputs, or with the error.
// README.md says what is left out and where the full backend (dummy_collectives) has it.
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

namespace minimal_backend {
namespace {

constexpr const char* kImplemented = "all_reduce (SUM only), all_gather, broadcast and barrier";

const char* reduceOpName(c10d::ReduceOp::RedOpType op) {
  static const char* const names[] = {
      "SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM", "UNUSED"};
  return op <= c10d::ReduceOp::UNUSED ? names[op] : "unknown";
}

// Sent ahead of every rank's bytes, so each rank can check that all ranks are in the same
// collective with the same tensor: a mismatch then raises on every rank instead of reducing
// unrelated bytes. 32 bytes keep the payload behind it 16-byte aligned (complex128).
struct Header {
  int64_t kind; // c10d::OpType
  int64_t dtype; // c10::ScalarType, -1 for none (barrier)
  int64_t numel;
  int64_t root; // broadcast's root, -1 otherwise
  bool operator==(const Header& o) const {
    return kind == o.kind && dtype == o.dtype && numel == o.numel && root == o.root;
  }
};
static_assert(sizeof(Header) == 32, "the payload must stay 16-byte aligned");

std::string describe(const Header& h) {
  std::string dtype = h.dtype < 0 ? "none" : c10::toString(static_cast<c10::ScalarType>(h.dtype));
  return c10::str(
      c10d::opTypeToString(static_cast<c10d::OpType>(h.kind)), " of ", h.numel, " ", dtype,
      h.root >= 0 ? c10::str(" from root ", h.root) : "");
}

// What the worker needs to run one collective, fixed when it was issued.
struct Round {
  std::string what; // "minimal backend: all_reduce #3 on rank 1 of 2 (group '0')", for errors
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

  // Called once, by the worker. The future first: whoever saw wait() return may read the
  // future's value at once.
  void complete(const std::exception_ptr& error) {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    finish(error);
  }

  // c10d's Work::wait, but an expired wait(timeout) names the collective and the rank, and
  // leaves the collective running: a later wait() still returns its result.
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
    if (exception_) {
      std::rethrow_exception(exception_);
    }
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }

 private:
  const std::string what_;
  const std::vector<at::Tensor> outputs_;
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

  // Stops the worker once the collective it runs (if any) ends. Collectives still queued fail:
  // their Works must complete, and no peer will join them now.
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) {
      worker_.join();
    }
    std::deque<Op> left;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      left.swap(queue_);
    }
    for (auto& op : left) {
      try {
        C10_THROW_ERROR(
            DistBackendError,
            c10::str(op.round.what, ": the group was shut down before this collective ran"));
      } catch (...) {
        op.work->complete(std::current_exception());
      }
    }
  }

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    const at::Tensor t = single("all_reduce", tensors);
    TORCH_CHECK_NOT_IMPLEMENTED(
        opts.reduceOp.op_ == c10d::ReduceOp::SUM, where("all_reduce"), ": ReduceOp ",
        reduceOpName(opts.reduceOp.op_), " is not implemented; this backend reduces with SUM only");
    return enqueue(c10d::OpType::ALLREDUCE, "all_reduce", {t}, opts.timeout, [this, t](auto& r) {
      auto all = exchange(r, t, -1);
      // Every rank adds the same bytes in the same order (rank 0, 1, ...), so every rank gets a
      // bit-identical result, also in floating point.
      at::Tensor sum = payload(all[0], t).clone();
      for (size_t i = 1; i < all.size(); ++i) {
        sum.add_(payload(all[i], t));
      }
      t.copy_(sum);
    });
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
          " but the input is ", in.scalar_type(), in.sizes());
    }
    const auto outs = outputs[0];
    auto body = [this, in, outs](auto& r) {
      auto all = exchange(r, in, -1);
      for (size_t i = 0; i < all.size(); ++i) {
        copyOut(all[i], outs[i]);
      }
    };
    return enqueue(c10d::OpType::ALLGATHER, "all_gather", outs, opts.timeout, body);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    const at::Tensor t = single("broadcast", tensors);
    const int64_t root = opts.rootRank;
    TORCH_CHECK_VALUE(
        root >= 0 && root < getSize(), where("broadcast"), ": root ", root,
        " is not a rank of this group of ", getSize());
    return enqueue(c10d::OpType::BROADCAST, "broadcast", {t}, opts.timeout, [this, t, root](auto& r) {
      auto all = exchange(r, t, root);
      if (root != getRank()) {
        copyOut(all[root], t);
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    // Every rank publishes a header and waits for everyone's: nobody leaves before all came.
    return enqueue(c10d::OpType::BARRIER, "barrier", {}, opts.timeout, [this](auto& r) {
      exchange(r, at::Tensor(), -1);
    });
  }

  // c10d's defaults say "Backend minimal does not support reduce"; these also name the rank and
  // the group and say what is implemented, so one line of one rank's log is enough to act on.
#define MINIMAL_NOT_IMPLEMENTED(method, name, ...)                                   \
  c10::intrusive_ptr<c10d::Work> method(__VA_ARGS__) override {                      \
    TORCH_CHECK_NOT_IMPLEMENTED(                                                     \
        false, where(name), ": not implemented; this backend implements ", kImplemented); \
  }
  using Tensors = std::vector<at::Tensor>;
  using TensorLists = std::vector<std::vector<at::Tensor>>;
  MINIMAL_NOT_IMPLEMENTED(allreduce_sparse, "all_reduce (sparse)", Tensors&, const c10d::AllreduceOptions&)
  MINIMAL_NOT_IMPLEMENTED(allreduce_coalesced, "all_reduce_coalesced", Tensors&, const c10d::AllreduceCoalescedOptions&)
  MINIMAL_NOT_IMPLEMENTED(reduce, "reduce", Tensors&, const c10d::ReduceOptions&)
  MINIMAL_NOT_IMPLEMENTED(_allgather_base, "all_gather_into_tensor", at::Tensor&, at::Tensor&, const c10d::AllgatherOptions&)
  MINIMAL_NOT_IMPLEMENTED(allgather_coalesced, "all_gather_coalesced", TensorLists&, Tensors&, const c10d::AllgatherOptions&)
  MINIMAL_NOT_IMPLEMENTED(allgather_into_tensor_coalesced, "all_gather_into_tensor (coalesced)", Tensors&, Tensors&, const c10d::AllgatherOptions&)
  MINIMAL_NOT_IMPLEMENTED(gather, "gather", TensorLists&, Tensors&, const c10d::GatherOptions&)
  MINIMAL_NOT_IMPLEMENTED(scatter, "scatter", Tensors&, TensorLists&, const c10d::ScatterOptions&)
  MINIMAL_NOT_IMPLEMENTED(reduce_scatter, "reduce_scatter", Tensors&, TensorLists&, const c10d::ReduceScatterOptions&)
  MINIMAL_NOT_IMPLEMENTED(_reduce_scatter_base, "reduce_scatter_tensor", at::Tensor&, at::Tensor&, const c10d::ReduceScatterOptions&)
  MINIMAL_NOT_IMPLEMENTED(reduce_scatter_tensor_coalesced, "reduce_scatter_tensor (coalesced)", Tensors&, Tensors&, const c10d::ReduceScatterOptions&)
  MINIMAL_NOT_IMPLEMENTED(alltoall_base, "all_to_all_single", at::Tensor&, at::Tensor&, std::vector<int64_t>&, std::vector<int64_t>&, const c10d::AllToAllOptions&)
  MINIMAL_NOT_IMPLEMENTED(alltoall, "all_to_all", Tensors&, Tensors&, const c10d::AllToAllOptions&)
  MINIMAL_NOT_IMPLEMENTED(send, "send", Tensors&, int, int)
  MINIMAL_NOT_IMPLEMENTED(recv, "recv", Tensors&, int, int)
  MINIMAL_NOT_IMPLEMENTED(recvAnysource, "recv (any source)", Tensors&, int)
#undef MINIMAL_NOT_IMPLEMENTED

 private:
  struct Op {
    c10::intrusive_ptr<MinimalWork> work;
    Round round;
    std::function<void(const Round&)> body;
  };

  std::string where(const char* op) const {
    return c10::str(
        "minimal backend: ", op, " on rank ", getRank(), " of ", getSize(), " (group '", group_,
        "')");
  }

  // Arguments are checked on the caller's thread, before anything is sent, so a bad call raises
  // at once. (If only some ranks pass bad arguments, the others time out naming them.)
  void check(const char* op, const at::Tensor& t, const char* role) const {
    TORCH_CHECK_VALUE(
        t.device().is_cpu(), where(op), ": ", role, " is on ", t.device(),
        "; this backend is CPU-only (its transport copies bytes through the Store)");
    TORCH_CHECK_VALUE(
        t.layout() == at::kStrided, where(op), ": ", role, " has layout ", t.layout(),
        "; only dense tensors are supported");
    TORCH_CHECK_VALUE(
        t.is_contiguous(), where(op), ": ", role, " is not contiguous; this backend sends "
        "raw bytes: pass t.contiguous() and copy the result back");
  }

  at::Tensor single(const char* op, const std::vector<at::Tensor>& tensors) const {
    TORCH_CHECK_VALUE(
        tensors.size() == 1, where(op), ": takes exactly one tensor, got ", tensors.size());
    check(op, tensors[0], "the tensor");
    return tensors[0];
  }

  static at::Tensor payload(const std::vector<uint8_t>& bytes, const at::Tensor& like) {
    return at::from_blob(
        const_cast<uint8_t*>(bytes.data()) + sizeof(Header), like.sizes(), like.options());
  }

  static void copyOut(const std::vector<uint8_t>& bytes, const at::Tensor& out) {
    if (out.nbytes() > 0) { // memcpy from or to a null pointer is undefined, even for 0 bytes
      std::memcpy(out.data_ptr(), bytes.data() + sizeof(Header), out.nbytes());
    }
  }

  c10::intrusive_ptr<c10d::Work> enqueue(
      c10d::OpType kind, const char* name, std::vector<at::Tensor> outputs,
      std::chrono::milliseconds timeout, std::function<void(const Round&)> body) {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopping_, where(name), ": the group was shut down");
    const uint64_t seq = nextSeq_++;
    // c10d passes kUnsetTimeout unless the caller gave this one call a timeout of its own.
    Round round{
        c10::str(where(name), ", collective #", seq), seq, kind,
        timeout == c10d::kUnsetTimeout ? timeout_ : timeout};
    auto work = c10::make_intrusive<MinimalWork>(getRank(), kind, round.what, std::move(outputs));
    queue_.push_back(Op{work, std::move(round), std::move(body)});
    cv_.notify_one();
    return work;
  }

  void loop() {
    for (;;) {
      Op op;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) {
          return; // shutdown() fails what is still queued
        }
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        // After a timeout the peers are out of step with this rank: refuse rather than pair this
        // rank's next collective with their late one.
        TORCH_CHECK(failed_.empty(), op.round.what, ": this group failed earlier (", failed_,
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

  std::string key(uint64_t seq, int rank) const { return c10::str("minimal/", seq, "/", rank); }

  // One round over the Store, the transport of every collective. Keys need no group name: c10d
  // hands each group a Store prefixed with its own. This rank sets "minimal/<seq>/<rank>" to its
  // header and bytes (with a root, only the root sends bytes), waits up to the timeout for every
  // rank's key, reads them all and checks that they describe the same collective.
  std::vector<std::vector<uint8_t>> exchange(const Round& r, const at::Tensor& t, int64_t root) {
    const Header mine{
        static_cast<int64_t>(r.kind), t.defined() ? static_cast<int64_t>(t.scalar_type()) : -1,
        t.defined() ? t.numel() : 0, root};
    const size_t n = t.defined() && (root < 0 || root == getRank()) ? t.nbytes() : 0;
    std::vector<uint8_t> bytes(sizeof(Header) + n);
    std::memcpy(bytes.data(), &mine, sizeof(Header));
    if (n > 0) {
      std::memcpy(bytes.data() + sizeof(Header), t.data_ptr(), n);
    }
    std::vector<std::string> keys;
    for (int i = 0; i < getSize(); ++i) {
      keys.push_back(key(r.seq, i));
    }
    store_->set(keys[getRank()], bytes);
    try {
      store_->wait(keys, r.timeout);
    } catch (const c10::Error& e) {
      std::string missing;
      for (int i = 0; i < getSize(); ++i) {
        if (!store_->check({keys[i]})) {
          missing += c10::str(missing.empty() ? "" : ", ", i);
        }
      }
      // Take this round's key back, so that a peer arriving late times out too instead of
      // completing with this rank's bytes while this rank reports a failure.
      store_->deleteKey(keys[getRank()]);
      C10_THROW_ERROR(
          DistBackendError,
          c10::str(r.what, ": timed out after ", r.timeout.count(), " ms waiting for rank(s) ",
                   missing, " to join it (the group's timeout; the Store said: ",
                   e.what_without_backtrace(), ")"));
    }
    auto all = store_->multiGet(keys);
    // Every peer has set this round's key, so it has finished reading the previous round: ours
    // of that round can go, and the Store holds at most one key per rank and group.
    if (r.seq > 0) {
      store_->deleteKey(key(r.seq - 1, getRank()));
    }
    for (int i = 0; i < getSize(); ++i) {
      Header theirs{};
      TORCH_CHECK(all[i].size() >= sizeof(Header), r.what, ": rank ", i, " sent a short message");
      std::memcpy(&theirs, all[i].data(), sizeof(Header));
      TORCH_CHECK_VALUE(
          theirs == mine, r.what, ": mismatched collectives: this rank called ", describe(mine),
          ", rank ", i, " called ", describe(theirs));
      const size_t sent = t.defined() && (root < 0 || root == i) ? t.nbytes() : 0;
      TORCH_CHECK(all[i].size() == sizeof(Header) + sent, r.what, ": rank ", i, " sent ",
                  all[i].size() - sizeof(Header), " bytes, expected ", sent);
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
  std::string failed_; // the worker's own: why the group failed, empty while it works
  std::thread worker_;
};

} // namespace minimal_backend

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  m.doc() = "minimal_backend: a c10d backend over the c10d Store";
  py::module_::import("torch.distributed"); // registers torch's Store and Backend pybind types
  py::class_<
      minimal_backend::MinimalBackend, c10d::Backend,
      c10::intrusive_ptr<minimal_backend::MinimalBackend>>(m, "MinimalBackend")
      .def(
          py::init<c10::intrusive_ptr<c10d::Store>, int, int, std::chrono::milliseconds,
                   std::string>(),
          py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
          py::arg("group_name") = std::string(), py::call_guard<py::gil_scoped_release>());
}
