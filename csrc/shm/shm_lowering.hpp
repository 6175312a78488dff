#pragma once

#include <memory>
#include <optional>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "shm/algorithms.hpp"
#include <dummy_collectives/debug_log.hpp>
#include <dummy_collectives/lowering.hpp>
#include <dummy_collectives/options.hpp>
#include "shm/shm_transport.hpp"
#include "shm/worker_pool.hpp"

namespace dummy_collectives {

class P2pEngine;

// The lowering of a group whose ranks share one host: every collective runs the shared-memory
// algorithms (algorithms.hpp) over one ShmTransport, CUDA tensors the CUDA IPC path where the
// group can take it, point-to-point the P2pEngine. A group spanning hosts holds one of these for
// its host's ranks and drives it step by step (hierarchy/in_host.hpp).
class ShmLowering final : public Lowering {
 public:
  // `placement`: how messages name the ranks and how many share the machine (Placement);
  // `join`: the ranks' pids from the group's discovery; `site`: how the debug log names ranks.
  ShmLowering(
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      c10::intrusive_ptr<BackendOptions> options,
      GroupJoin join,
      Placement placement,
      debug_log::Site site);
  ~ShmLowering() override;

  int rank() const {
    return transport_->rank();
  }
  int size() const {
    return transport_->size();
  }
  ShmTransport& transport() {
    return *transport_;
  }
  const char* name() const override {
    return "shm";
  }
  std::vector<std::vector<int>> hosts() const override;
  std::string peerAccess() const override;
  std::vector<std::string> algorithms() const override {
    return {};
  }
  std::optional<bool> sharesCores() const override;

  std::string brokenReason() const override;
  void abort(const std::string& reason) override;
  std::vector<int> deadRanks() const override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  WaitLedger::Totals waitTotals() const override;
  void resetWaits() override;
  void finishForExit() override;
  void awaitJoined(std::chrono::milliseconds limit) override;
  void logCreation(int me) const override;

  void run(OpContext& call, const std::function<void()>& collective) override;

  DC_LOWERING_COLLECTIVES(DC_LOWERING_OVERRIDE)

  DeviceCollectives* deviceFor(const std::vector<at::Tensor>& tensors) override;
  void runOnDevice(
      OpContext& call,
      DeviceCollectives::Ticket& ticket,
      DummyWork& work,
      const std::function<void(DeviceCollectives&, Transport&)>& body) override;

  c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors, const PointToPoint& p2p) override;
  c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors, const PointToPoint& p2p) override;

 private:
  algorithms::PeerAccessWindow peerAccessWindow() const;
  algorithms::AllreducePlan allreducePlan() const;

  c10::intrusive_ptr<BackendOptions> options_; // the group's (shared with the face)
  debug_log::Site site_;
  std::string logPrefix_; // "host level: " where it carries one host of a larger group
  // Declared first of the four: destroyed last, after everything that reads it (p2p_'s thread).
  std::shared_ptr<ShmTransport> transport_;
  std::shared_ptr<WorkerPool> workers_;
  std::shared_ptr<P2pEngine> p2p_;
  std::shared_ptr<DeviceCollectives> device_; // null in CPU-only builds
};

} // namespace dummy_collectives
