#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <dummy_collectives/arrival.hpp>
#include <dummy_collectives/fault_injection.hpp>
#include "shm/peer_access.hpp"
#include "shm/shm_segment.hpp"
#include <dummy_collectives/transport.hpp>
#include "shm/wait_policy.hpp"

namespace dummy_collectives {

struct ControlBlock;
struct RankControl;
struct ChannelControl;

// A one-way byte ring between two ranks (point-to-point). The sender advances `written`, the
// receiver `consumed`; both count bytes since the group began, so `written - consumed` is the
// fill level and positions are taken modulo `bytes`.
struct P2pChannel {
  std::atomic<uint64_t>* written;
  std::atomic<uint64_t>* consumed;
  std::byte* ring;
  size_t bytes;
};

// A value every rank of a group must share, such as a threshold that picks the algorithm (ranks
// that picked different algorithms would exchange different steps). Checked at connect: a rank
// whose value differs from rank 0's raises a ValueError naming `what`.
struct GroupSetting {
  std::string what;
  uint64_t value;
};

// Where this transport's ranks stand: how its messages name them, and how many ranks share this
// machine's CPUs. Empty (the default) for a group of its own, whose ranks are named by their
// rank in it; set where the transport carries one host of a group that spans hosts (the
// two-level lowering, hierarchy/two_level_lowering.hpp).
struct Placement {
  // The whole group's rank of each rank of this transport: what messages call it (empty: its own
  // ranks).
  std::vector<int> groupRanks;
  // Ranks of the whole group on this machine (hosts made of namespaces share one): when they
  // outnumber the CPUs, waits hand their core over rather than poll, as when this group's own
  // ranks outnumber them (see WaitPolicy). 0: only this transport's ranks.
  int ranksOnMachine = 0;

  // Whether the transport is a host level of a group across hosts (it names its ranks by their
  // group ranks), whose waits follow their own policy (WaitPolicy::make).
  bool hostLevel() const {
    return !groupRanks.empty();
  }
};

// What a rank knows of the group's ranks before they map its segment.
struct GroupJoin {
  // How long a rank waits for rank 0 to publish the segment (the group's timeout).
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // Every rank's pid as the group's discovery found it, in this pid namespace (0: unknown, or
  // another namespace). A rank that dies before it maps the segment is known dead by it.
  std::vector<int32_t> pids;
};

// The CPU transport: one shared-memory segment per process group. Rank 0 creates it and
// publishes its name through the group's Store; once every rank has mapped it, the last one
// to map removes the name.
//
// By concern: the segment and the step protocol are in shm_transport.cpp, the segment's layout
// in shm_layout.hpp, liveness and the group's abort in shm_liveness.cpp, how waits spend
// their time in wait_policy.hpp, and the group's vote on peer access in peer_access.hpp.
class ShmTransport final : public Transport {
 public:
  ShmTransport(
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      size_t slotBytes,
      long spinMicros, // BackendOptions::spinMicros
      bool peerAccess, // BackendOptions::peerAccess
      double peerAccessMinSpeed, // BackendOptions::peerAccessMinSpeed
      std::vector<GroupSetting> settings,
      GroupJoin join = {},
      Placement placement = {});
  ~ShmTransport() override;

  int rank() const override {
    return rank_;
  }
  int size() const override {
    return size_;
  }
  size_t slotBytes() const override {
    return slotBytes_;
  }

  void beginOp(const OpDescriptor& op, std::chrono::milliseconds timeout) override;
  void* writeSlot() override;
  void exchange() override;
  const void* readSlot(int r) const override;
  bool sharePointers(const void* mine, const void** all) override;
  void readPeer(int r, void* local, const void* remote, size_t bytes) override;
  void writePeer(int r, void* remote, const void* local, size_t bytes) override;
  void waitUntil(const std::function<bool()>& ready, const std::string& what) override;
  void abort(const std::string& reason) override;
  // This rank alone failed part way through the current collective (out of memory, a bug): its
  // peers would wait for steps it never takes, or read its next collective's steps as this
  // one's. Aborts the group naming this rank and `error`, and raises that (DistBackendError).
  [[noreturn]] void failOnThisRank(const std::string& error);

  // The ring carrying point-to-point messages from rank `src` to rank `dst`.
  P2pChannel channel(int src, int dst) const;
  // "on", "off" or "undecided" (see sharePointers); any thread may ask.
  std::string peerAccessState() const;
  // Whether the group's ranks outnumber the CPUs they may run on; empty until the group's first
  // exchange (until then a wait goes by this rank's own CPUs). Any thread may ask.
  std::optional<bool> sharesCores() const;
  // Why rank r can no longer take part (it died, or the group was aborted); empty if it can.
  std::string peerProblem(int r) const;
  // Why the group can no longer be used (it was aborted); empty while it can. Any thread.
  std::string brokenReason() const;
  // Waits until every rank has mapped the segment, the group is aborted, a rank that has not
  // mapped it died, or `deadline` passes.
  void awaitEveryRankMapped(std::chrono::steady_clock::time_point deadline) const;
  // The ranks (as label() names them) whose process has ended, where this rank can see their
  // pid (the same pid namespace); ascending. Any thread.
  std::vector<int> deadRanks() const;
  // The rank messages name for rank r: its rank in the whole group where this transport serves
  // one host of a group that spans several (Placement), else r.
  int label(int r) const {
    return placement_.groupRanks.empty() ? r : placement_.groupRanks[r];
  }

  // Who made whom wait in the collective this thread ran last (see arrival.hpp): complete once its
  // first exchange is done, until the next beginOp(). Read it on the thread that ran the op.
  const Arrival& arrival() const {
    return arrival_;
  }
  // The window of arrivals of this group's collectives (one entry per collective whose first
  // exchange completed), indexed by this group's ranks.
  WaitLedger& waits() {
    return waits_;
  }

  // Bytes of shared memory a group of `size` ranks maps.
  static size_t segmentBytes(int size, size_t slotBytes);
  // The smallest slot rank 0 falls back to where /dev/shm cannot hold the asked-for one.
  static constexpr size_t kMinFallbackSlotBytes = size_t{64} << 10;

 private:
  // The segment and the step protocol (shm_transport.cpp).
  //
  // Rank 0: creates the segment, with smaller slots where /dev/shm cannot hold the asked-for
  // ones (and says so in the debug log); raises, telling every rank, where even the smallest
  // does not fit. Returns the slot size it used.
  size_t createSegment(const c10::intrusive_ptr<c10d::Store>& store, std::string settings);
  // Ranks other than 0: rank 0's published segment name, settings and slot size; raises if rank
  // 0 dies (or failed to create it) before, or the group's timeout passes.
  std::string awaitSegment(const c10::intrusive_ptr<c10d::Store>& store) const;
  RankControl& control(int r) const;
  std::byte* slot(int r, uint64_t step) const;
  // Waits until every rank has published `step`; raises on abort, timeout or a dead peer.
  void waitAll(uint64_t step);
  // When a wait began (read lazily: a wait that succeeds at once never reads the clock).
  struct WaitClock {
    bool started = false;
    Clock::time_point start;
    Clock::time_point nextCheck;
  };
  // The loop every wait shares: polls `ready` until it holds -- spinning, then yielding, then
  // calling `sleep`, as the policy says for the time since the wait began (CoreSharing::idle)
  // -- raising if the group is aborted, and calling `check` (which raises when waiting is
  // pointless) every liveness period. The op's own clock (its deadline) starts with its first
  // such wait.
  template <typename Ready, typename CoreWanted, typename Check, typename Sleep>
  void waitFor(
      WaitClock& clock, Ready&& ready, CoreWanted&& coreWanted, Check&& check, Sleep&& sleep);
  // After the group's first exchange: whether its ranks outnumber the union of their CPUs.
  void decideCoreSharing();
  // Whether a rank from `from` on that has not yet published `target` last ran on our CPU.
  bool awaitedRankSharesCore(uint64_t target, int from) const;
  void checkDescriptors(uint64_t step) const;
  // After a collective's first exchange: who arrived last, from every rank's arrival stamp.
  void noteArrivals(uint64_t step);
  std::string opContext() const;
  // What log lines of this transport start with after the rank: whose level it is.
  const char* logPrefix() const {
    return placement_.groupRanks.empty() ? "" : "host level: ";
  }

  // Liveness and the group's abort (shm_liveness.cpp).
  //
  // Rank r's pid: from its control block once it has mapped the segment, else from discovery.
  int32_t pidOf(int r) const;
  // Rank r's pid where it tells this rank whether r lives: its control block's once it mapped
  // the segment (0 in another pid namespace, where a pid tells nothing), else the one its
  // discovery published (0: unknown). peerProblem, deadRanks and awaitEveryRankMapped ask it.
  int32_t checkablePid(int r) const;
  std::string abortReason() const;
  std::vector<int> labels(const std::vector<int>& ranks) const;
  // Raises (aborting the group) where a rank that has not yet published step `step + 1` died, or
  // the op's deadline passed.
  void checkPeers(uint64_t step);
  // Raises (aborting the group) for a failed read or write of a peer's memory.
  [[noreturn]] void failPeerAccess(int r, const char* what, size_t bytes, int error);
  [[noreturn]] void fail(const std::string& what);
  [[noreturn]] void failTimedOut(const std::string& waitingFor);

  int rank_;
  int size_;
  size_t slotBytes_;
  // How this rank's waits spend their time, as the group's sharing of cores has it.
  CoreSharing cores_;
  ShmSegment segment_;
  ControlBlock* ctl_ = nullptr;
  std::byte* data_ = nullptr;

  // Whether the ranks read each other's memory for large transfers: asked for (by the option,
  // on this rank), then decided by the group on first use, alike on every rank.
  PeerAccessVote peerAccess_;

  Placement placement_;
  GroupJoin join_;
  // DUMMY_COLLECTIVES_FAULT_INJECT (tests): the fault this rank injects, and the step of the
  // current collective at which it fires (0: none). Never set for a host level, whose
  // collectives are steps of its group's (the two-level lowering injects those).
  std::optional<fault_injection::Fault> fault_;
  int faultStep_ = 0;
  uint64_t nextStep_ = 0; // the step writeSlot() fills; all ranks count the same steps
  uint64_t opFirstStep_ = 0;
  OpDescriptor op_;
  std::chrono::milliseconds timeout_{0};
  bool opClockStarted_ = false; // opStart_ and deadline_ hold for the current op
  Clock::time_point opStart_;
  Clock::time_point deadline_;
  Arrival arrival_;
  WaitLedger waits_;
};

} // namespace dummy_collectives
