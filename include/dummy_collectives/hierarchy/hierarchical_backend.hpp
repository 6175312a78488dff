#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <dummy_collectives/arrival.hpp>
#include <dummy_collectives/fault_injection.hpp>
#include <dummy_collectives/flight_recorder.hpp>
#include <dummy_collectives/hierarchy/levels.hpp>
#include <dummy_collectives/op_descriptor.hpp>
#include <dummy_collectives/options.hpp>

namespace dummy_collectives {

class Checker;
class Engine;
class ExitHandle;
class DummyBackend;
struct SplitSizes;

namespace hierarchy {

class CrossHostP2P;

// The c10d face of a group whose ranks live on several hosts: the same collectives, checks and
// semantics as DummyBackend, each run as a two-level algorithm (two_level.hpp) over a
// DummyBackend of this host's ranks and cross-host engines made from Python (gloo; see
// dummy_collectives/_hierarchy.py). It numbers and orders collectives itself, with an Engine as
// DummyBackend does: a blocking collective with nothing queued runs inside the call.
class HierarchicalBackend final : public c10d::Backend {
 public:
  // `host`: this host's ranks (local ranks); `rail`: this rank's rail, one rank per host (null
  // for a non-leader where hosts differ in size); `everyone`: every rank of the group.
  HierarchicalBackend(
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      c10::intrusive_ptr<BackendOptions> options,
      Topology topology,
      c10::intrusive_ptr<DummyBackend> host,
      c10::intrusive_ptr<c10d::Backend> rail,
      c10::intrusive_ptr<c10d::Backend> everyone,
      std::vector<int64_t> globalRanks = {});
  ~HierarchicalBackend() override;

  const std::string getBackendName() const override {
    return "dummy";
  }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override {
    return options_;
  }
  void setTimeout(std::chrono::milliseconds timeout) override;
  // Fails the group on every rank of every host (the reason travels through the store).
  void abort() override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override {
    return seq_;
  }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
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
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks = false) override;

  const Topology& topology() const {
    return topology_;
  }
  // The DummyBackend of this host's ranks (its peer access and core sharing, for tests).
  const c10::intrusive_ptr<DummyBackend>& hostBackend() const {
    return hostBackend_;
  }
  // Why the group can no longer be used; empty while it can.
  std::string brokenReason() const;
  // Who made whom wait over the window (see DummyBackend::waitTotals): group ranks, this rank's
  // waits, counted for the collectives that begin with the agreement.
  WaitLedger::Totals waitTotals() const {
    return waits_->totals();
  }
  void resetWaits() {
    waits_->reset();
  }

 private:
  struct Issue {
    std::chrono::milliseconds timeout;
    bool blocking;
  };
  template <typename Options>
  static Issue issued(const Options& opts) {
    return {opts.timeout, !opts.asyncOp};
  }
  // Numbers, describes and runs a collective: `algorithm(const OpContext&)` runs on host
  // tensors (every input and output staged where it is not a contiguous CPU tensor), inside
  // the call when the caller blocks on it and nothing is queued, else on the engine thread.
  template <typename Algorithm>
  c10::intrusive_ptr<c10d::Work> submit(
      OpDescriptor op,
      c10d::OpType opType,
      const char* profilingTitle,
      const std::vector<at::Tensor>& inputs,
      std::vector<at::Tensor> outputs,
      Issue issue,
      Algorithm algorithm,
      const SplitSizes* splits = nullptr);
  Checker checker(const char* collective) const;
  // Point-to-point goes through the host's level to a rank on this host, else the engine over
  // every rank.
  bool sameHost(int peer) const;
  // What c10d backends record of a point-to-point operation (record_param_comms, the flight
  // recorder), here for the whole group whichever level carries it. Returns its flight recorder
  // entry (0: none).
  uint64_t recordPointToPoint(const char* name, int peer, const std::vector<at::Tensor>& tensors);
  // `work`, completing flight recorder entry `record` when it completes (record 0: `work`).
  c10::intrusive_ptr<c10d::Work> recorded(c10::intrusive_ptr<c10d::Work> work, uint64_t record);
  // A collective's flight recorder entry (0: none), "scheduled".
  uint64_t recordCollective(
      const OpDescriptor& op,
      const std::vector<at::Tensor>& inputs,
      const std::vector<at::Tensor>& outputs,
      std::chrono::milliseconds timeout);
  // DUMMY_COLLECTIVES_DEBUG=INFO: the group's hosts and cross-host settings, once, when made.
  void logCreation() const;

  c10::intrusive_ptr<BackendOptions> options_;
  Topology topology_;
  c10::intrusive_ptr<DummyBackend> hostBackend_;
  std::unique_ptr<GroupHealth> health_;
  std::unique_ptr<InHostLevel> host_;
  std::unique_ptr<InterHostEngine> rail_;     // null: see the constructor
  std::unique_ptr<InterHostEngine> everyone_;
  std::unique_ptr<CrossHostP2P> p2p_; // send/recv across hosts, over everyone_
  std::unique_ptr<Levels> levels_;
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<ExitHandle> exitHandle_;
  std::shared_ptr<flight_recorder::Group> fr_; // this group in the flight recorder (null: off)
  bool frDescTaken_ = false; // c10d sets the group's description after creation
  uint64_t seq_ = 0;
  std::unique_ptr<WaitLedger> waits_; // bodies hold it raw: the engine goes first (see submit)
  uint64_t p2pSeq_ = 0;
  int pid_;
  std::optional<fault_injection::Fault> fault_; // DUMMY_COLLECTIVES_FAULT_INJECT (tests)
};

} // namespace hierarchy
} // namespace dummy_collectives
