#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <dummy_collectives/arrival.hpp>
#include <dummy_collectives/fault_injection.hpp>
#include "hierarchy/levels.hpp"
#include "inter_host/links_choice.hpp"
#include <dummy_collectives/lowering.hpp>
#include <dummy_collectives/options.hpp>

namespace dummy_collectives::hierarchy {

class CrossHostDevice;
class CrossHostP2P;

// The lowering of a group whose ranks live on several hosts: each collective is a two-level
// algorithm (two_level.hpp) over the shared-memory lowering of this host's ranks (driven step by
// step, in_host.hpp) and cross-host engines made from Python (gloo; torch's wheel ships no gloo
// headers, see dummy_collectives/_hierarchy.py). Point-to-point takes shared memory to a rank on
// this host, the engine over every rank otherwise.
class TwoLevelLowering final : public Lowering {
 public:
  // `hostStore`: a store prefix of this host's own; `rail`: this rank's rail, one rank per host
  // (null for a non-leader where hosts differ in size); `everyone`: every rank of the group;
  // `ranksOnMachine`: the group's ranks on this machine (hosts made of namespaces share one).
  // Every rank of the group makes it at the same time: the constructor waits for its host's.
  TwoLevelLowering(
      const c10::intrusive_ptr<c10d::Store>& store,
      const c10::intrusive_ptr<c10d::Store>& hostStore,
      c10::intrusive_ptr<BackendOptions> options,
      Topology topology,
      int ranksOnMachine,
      c10::intrusive_ptr<c10d::Backend> rail,
      c10::intrusive_ptr<c10d::Backend> everyone,
      // The leaders' own gloo group for inter_host/link_probe.hpp (a leader's, where a host runs
      // several ranks; else null), dropped once it has measured.
      c10::intrusive_ptr<c10d::Backend> linkProbe);
  ~TwoLevelLowering() override;

  const char* name() const override {
    return "two_level";
  }
  std::vector<std::vector<int>> hosts() const override;
  std::string peerAccess() const override;
  std::vector<std::string> algorithms() const override;
  std::optional<bool> sharesCores() const override;
  std::string brokenReason() const override;
  void abort(const std::string& reason) override;
  std::vector<int> deadRanks() const override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  WaitLedger::Totals waitTotals() const override {
    return waits_->totals();
  }
  void resetWaits() override {
    waits_->reset();
  }
  void finishForExit() override;
  void awaitJoined(std::chrono::milliseconds limit) override;
  void logCreation(int me) const override;
  std::string rankPlacement() const override;

  void run(OpContext& call, const std::function<void()>& collective) override;

  DC_LOWERING_COLLECTIVES(DC_LOWERING_OVERRIDE)

  // CUDA tensors stay in CUDA memory where every host's UCX moves it (cross_host_device.hpp);
  // else they are staged through host memory.
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
  bool sameHost(int peer) const {
    return topology_.hostOf(peer) == topology_.host();
  }
  // Whether the hosts' leaders carry the agreement's records on links of their own
  // (inter_host/links_choice.hpp).
  bool linksBetweenHosts() const;
  // The group ranks this rank can see to have died: its host's (shared memory). Another
  // host's ranks are for that host's ranks to see.
  std::vector<int> seenDead() const;
  // `work`, completing the flight recorder entry of `p2p` when it completes.
  static c10::intrusive_ptr<c10d::Work> recorded(
      c10::intrusive_ptr<c10d::Work> work, const PointToPoint& p2p);

  c10::intrusive_ptr<BackendOptions> options_;
  Topology topology_;
  std::shared_ptr<ShmLowering> hostShm_;
  std::unique_ptr<GroupHealth> health_;
  std::unique_ptr<InHostLevel> host_;
  inter_host::LinksChoice links_;
  std::string linksText_; // what this rank's links run on, where it has some
  std::unique_ptr<InterHostEngine> rail_;     // null: see the constructor
  std::unique_ptr<InterHostEngine> everyone_;
  std::unique_ptr<CrossHostP2P> p2p_; // send/recv across hosts, over everyone_
  std::unique_ptr<Levels> levels_;
  std::unique_ptr<WaitLedger> waits_;
  std::unique_ptr<CrossHostDevice> device_;
  std::optional<fault_injection::Fault> fault_; // DUMMY_COLLECTIVES_FAULT_INJECT (tests)
};

} // namespace dummy_collectives::hierarchy
