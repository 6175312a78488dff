#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <ATen/ThreadLocalState.h>

#include <dummy_collectives/arrival.hpp>
#include <dummy_collectives/debug_log.hpp>
#include <dummy_collectives/flight_recorder.hpp>
#include <dummy_collectives/lowering.hpp>
#include <dummy_collectives/op_descriptor.hpp>
#include <dummy_collectives/options.hpp>
#include <dummy_collectives/param_comms.hpp>

namespace dummy_collectives {

class Checker;
class DummyWork;
class Engine;
class ExitHandle;

// The c10d face, the one for every group: each collective checks its arguments on the caller's
// thread (bad input never reaches the wire), describes itself as an OpDescriptor, and hands its
// staged tensors to the group's lowering (lowering.hpp): shared memory on one host, two levels
// across hosts. One issue pipeline for all of them (backend_submission.hpp): numbering, the
// profiler's and the flight recorder's records, the debug log, running it inside the call or on
// the engine, the dump on failure.
class DummyBackend final : public c10d::Backend {
 public:
  // `lowering`: how the group moves data (null in zero mode, where nothing moves).
  // `globalRanks`: the group's ranks in the world, in group-rank order (empty: the world), as
  // the flight recorder's dumps name them.
  DummyBackend(
      int rank,
      int size,
      c10::intrusive_ptr<BackendOptions> options,
      std::shared_ptr<Lowering> lowering,
      std::vector<int64_t> globalRanks = {});
  ~DummyBackend() override;

  const std::string getBackendName() const override {
    return "dummy";
  }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override {
    return options_;
  }
  void setTimeout(std::chrono::milliseconds timeout) override;
  // ---- Failure and recovery (recovery.cpp) -------------------------------------------------
  // ProcessGroup.abort() / _abort_process_group: marks the group aborted for every rank, so
  // queued, blocked and later operations on it raise at once (here and on the peers). Safe from
  // any thread, while a collective waits; idempotent.
  void abort() override;
  // ProcessGroup.shutdown() / destroy_process_group: runs what is queued (a failed group's
  // operations raise at once), then releases the group's threads and shared memory. Later
  // calls raise. Idempotent.
  void shutdown() override;
  // SUCCESS while the group is usable; once it failed: TIMEOUT (a collective timed out),
  // COMM_ERROR (this rank failed or aborted it), REMOTE_ERROR (another rank did, or died).
  c10d::ErrorType getError() override;
  // The group ranks this rank knows to be gone (Lowering::deadRanks): what survivors exclude.
  std::vector<int> deadRanks() const;

  // torch.distributed.shrink_group: only the survivors call it, and get a new backend over
  // themselves, ranks renumbered in order, made through a fresh store prefix without the
  // excluded ranks. SHRINK_ABORT (kShrinkAbort) aborts this group first, so whatever is in
  // flight on it raises.
  static constexpr int kShrinkAbort = 0x01; // torch.distributed.SHRINK_ABORT
  // Makes a group of this group's ranks (or some of them) through `storePrefix` of this group's
  // store: dummy_collectives/_regroup.py, set at creation (a group made otherwise can neither
  // shrink nor reconfigure). `globalRanks`: its ranks in the world, by its rank.
  using GroupFactory = std::function<c10::intrusive_ptr<c10d::Backend>(
      const std::string& storePrefix,
      int rank,
      int size,
      const std::vector<int64_t>& globalRanks,
      const c10::intrusive_ptr<BackendOptions>& options)>;
  void setGroupFactory(GroupFactory factory) {
    groupFactory_ = std::move(factory);
  }
  bool supportsShrinking() const override {
    return static_cast<bool>(groupFactory_);
  }
  c10::intrusive_ptr<c10d::Backend> shrink(
      const std::vector<int64_t>& ranksToExclude,
      int shrinkFlags = 0,
      const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride = nullptr) override;
#ifdef C10D_BACKEND_HAS_RECONFIGURE
  // torch >= 2.15's reconfigure API, as ProcessGroupGloo's: peers exchange their handles out of
  // band, then every member calls reconfigure with the same fresh uuid and handles; this
  // backend becomes a group of those members (ranks by the handles' order; sorted for a set),
  // made through the store prefix of that uuid. Members of this group only (the
  // enable_reconfigure regime, joining from outside, is not supported: the flag is ignored).
  bool supportsReconfigure() const override {
    return static_cast<bool>(groupFactory_);
  }
  c10d::ReconfigureHandle get_reconfigure_handle() const override;
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
#endif
  // No abort hooks (torch >= 2.15's registerAbortHook), on purpose: torch attaches its own
  // flight-recorder hook (FlightRecorderHook::onAbort, a dump of torch's trace) to every
  // backend that takes them, and run on the thread that met the failure it holds every failure
  // back by seconds, where every rank must hear of it at once. This backend writes its own
  // flight recorder dump on failure.

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  // Sparse COO tensors (as gloo): every rank's indices and values are gathered and summed.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputTensorLists,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors,
      int dstRank,
      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors,
      int srcRank,
      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  // gloo's monitored barrier: rank 0 hears from every rank within the timeout (or names the
  // first, or with waitAllRanks every, rank that did not come), then releases them.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks = false) override;
  // Every rank numbers its collectives from zero in issue order, so the group is in sync by
  // construction (TORCH_DISTRIBUTED_DEBUG=DETAIL's wrapper compares these).
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override {
    return seq_;
  }

  Mode mode() const {
    return options_->mode;
  }
  // How the group moves data (null in zero mode): see lowering.hpp.
  const Lowering* lowering() const {
    return lowering_.get();
  }
  // Why the group can no longer be used (a dead peer, a timeout, an abort); empty while it can.
  // A failed collective that leaves this empty was a mismatch: the group stays usable.
  std::string brokenReason() const;
  // Who made whom wait, over the window since the group was made or since the last resetWaits()
  // (see arrival.hpp): per rank, how often it arrived last and how long this rank waited for it.
  // All zeros in zero mode (nothing waits there). Any thread.
  WaitLedger::Totals waitTotals() const;
  void resetWaits();

 private:
  // How a collective was issued: its timeout, and whether the caller waits for it at once
  // (c10d's asyncOp=false, which the blocking Python calls pass).
  struct Issue {
    std::chrono::milliseconds timeout;
    bool blocking;
  };
  template <typename Options>
  static Issue issued(const Options& opts) {
    return {opts.timeout, !opts.asyncOp};
  }
  // Issues a collective (its names are op.kind's); `body(Lowering&, const OpContext&)` runs
  // inside Lowering::run(), on the engine thread, or right here when the caller blocks on it and
  // nothing is queued ahead.
  template <typename Body>
  c10::intrusive_ptr<c10d::Work> submit(
      OpDescriptor op,
      const std::vector<at::Tensor>& inputs,
      std::vector<at::Tensor> outputs,
      Issue issue,
      Body body,
      const SplitSizes& splits = {});
  // Issues a collective on device tensors that takes the device path (Lowering::deviceFor);
  // `body(DeviceCollectives&, Transport&)` runs on the engine thread inside runOnDevice().
  template <typename Body>
  c10::intrusive_ptr<c10d::Work> submitDevice(
      DeviceCollectives& device,
      OpDescriptor op,
      const std::vector<at::Tensor>& inputs,
      std::vector<at::Tensor> outputs,
      Issue issue,
      Body body);
  // Refuses outputs whose elements share memory (Checker::writable), before the collective's
  // number is taken (the group stays usable).
  void requireWritable(const OpDescriptor& op, const std::vector<at::Tensor>& outputs) const;
  // What stamp() found out about a collective.
  struct Stamp {
    OpContext call; // the collective as its lowering runs it (numbered, with its time limit)
    bool observed; // a profiler (or another RecordFunction observer) listens
    uint64_t record; // its flight recorder entry (0: none)
  };
  // Numbers the collective, tells the profiler and records it in the flight recorder. (Asking
  // whether anyone listens takes a lock in PyTorch: ask once per collective.)
  Stamp stamp(
      OpDescriptor& op,
      const std::vector<at::Tensor>& inputs,
      const std::vector<at::Tensor>& outputs,
      std::chrono::milliseconds timeout,
      const SplitSizes& splits = {});
  // What a collective issued under a profiler needs to record who made whom wait when it
  // completes (recordArrival); null where nobody listened.
  struct WaitRecord {
    at::ThreadLocalState issuer;
    std::string groupUid;
    const char* title;
  };
  std::shared_ptr<const WaitRecord> waitRecord(bool observed, CollectiveKind kind) const;
  // Everything a queued collective's run needs of the group, by value or by pointer to what
  // outlives the engine that runs it.
  struct Running {
    Lowering* lowering;
    debug_log::Site site;
    flight_recorder::Group* recorded;
  };
  Running running() const {
    return {lowering_.get(), traceSite_, fr_.get()};
  }
  // Runs one collective: `start(OpContext&)` is Lowering::run or runOnDevice with its body.
  template <typename Start>
  static void runCollective(
      const Running& group,
      OpContext call,
      std::chrono::steady_clock::time_point issuedAt,
      uint64_t record,
      const WaitRecord* waits,
      Start&& start);
  c10::intrusive_ptr<c10d::Work> enqueue(
      const OpDescriptor& op,
      const std::vector<at::Tensor>& inputs,
      std::vector<at::Tensor> outputs,
      std::function<void(DummyWork&)> body);
  // The device path for `tensors` (null: staged through host memory, or zero mode).
  DeviceCollectives* deviceFor(const std::vector<at::Tensor>& tensors) const;
  // Also refuses a forked child and a shut-down group (requireUsable).
  Checker checker(const char* collective) const;
  Checker checker(CollectiveKind collective) const;
  void requireReal(const char* collective) const;
  void requireReal(CollectiveKind collective) const;
  // Raises in a process that did not create the group: a child forked after the group was made
  // shares the parent's segment and would take the parent's place in its collectives (NCCL
  // refuses a communicator in a forked child too). A cached compare, not a syscall. Raises too
  // once the group was shut down (its lowering is gone).
  void requireUsable(const char* collective) const;
  [[noreturn]] void refuseShutDown(const char* collective) const;
  // The lowering, read under lifecycleMu_ (abort() and getError() may race with shutdown()).
  std::shared_ptr<Lowering> currentLowering() const;
  // _reduce_scatter_base and reduce_scatter_tensor_coalesced: outputs[i] receives part rank()
  // of the reduction of every rank's inputs[i].
  c10::intrusive_ptr<c10d::Work> reduceScatterTensors(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts,
      bool coalesced);
  // Zero mode: the tutorial's semantics, done on the spot.
  c10::intrusive_ptr<c10d::Work> zeroed(CollectiveKind kind, std::vector<at::Tensor> outputs);
  // Numbers a point-to-point operation and records it (record_param_comms, the flight
  // recorder), whichever level carries it.
  PointToPoint pointToPoint(
      const char* what,
      const char* title,
      int peer,
      int tag,
      const std::vector<at::Tensor>& tensors);
  c10::intrusive_ptr<c10d::Work> receive(
      std::vector<at::Tensor>& tensors,
      int srcRank,
      int tag,
      const char* what);
  // DUMMY_COLLECTIVES_DEBUG=INFO: what the group found and chose, once, when it is made.
  void logCreation() const;

  c10::intrusive_ptr<BackendOptions> options_;
  std::shared_ptr<Lowering> lowering_;        // null in zero mode and once shut down
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<ExitHandle> exitHandle_;    // the exit flush's weak reference points here
  // How the debug log names this group's operations.
  debug_log::Site traceSite_;
  // This group in the flight recorder; null when it is off and in zero mode.
  std::shared_ptr<flight_recorder::Group> fr_;
  bool frDescTaken_ = false; // c10d sets the group's description after creation: read it once
  uint64_t seq_ = 0; // collectives issued so far; every rank counts the same
  uint64_t p2pSeq_ = 0; // point-to-point operations issued (for the profiler's records)
  int pid_;          // the process that made the backend (its threads exist only there)
  // Recovery (recovery.cpp).
  std::vector<int64_t> globalRanks_;        // the group's ranks in the world (empty: the world)
  GroupFactory groupFactory_;
  uint64_t shrinks_ = 0;                    // shrink() calls so far: each meets under its prefix
#ifdef C10D_BACKEND_HAS_RECONFIGURE
  int64_t reconfigured_ = -1;               // the uuid of the last reconfigure (-1: none)
  // Takes over `fresh`'s group (reconfigure): its lowering, engine, ranks, options and
  // recorder; `fresh` keeps this group's old ones and releases them when it goes.
  void adopt(DummyBackend& fresh);
#endif
  mutable std::mutex lifecycleMu_;          // guards lowering_ and engine_ against shutdown()
  std::atomic<bool> shutDown_{false};
  std::string failureAtShutdown_;           // brokenReason() when shut down (getError)
};

} // namespace dummy_collectives
