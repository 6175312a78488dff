#pragma once

#include <atomic>
#include <cstdint>
#include <condition_variable>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <dummy_collectives/op_descriptor.hpp>
#include "inter_host/store_requests.hpp"

namespace dummy_collectives::inter_host {

// Whether a group that spans hosts can still be used, and why not, agreed by every rank.
//
// Within a host the shared-memory level tells every rank at once when a peer dies, times out or
// aborts. Across hosts there is no shared memory: a rank blocked in the cross-host engine
// waiting for a peer on another host that has given up would wait for the whole group timeout.
// So the first rank to see a failure publishes its reason in the group's store (compare-and-set:
// the first reason wins, so every rank reports the same cause) and aborts its host's level,
// which wakes its host peers; a rank whose cross-host wait lasts polls the store, and a rank
// whose engine fails (a dead peer's connection closes at once) waits briefly for the reason the
// dead rank's host peers publish, which names the dead rank.
//
// One rank per host (its leader) watches the store in the background, as ProcessGroupNCCL's
// watchdog checks the store for other ranks' errors: once a reason is published it aborts its
// host's level, which every rank of the host sees at once (a shared flag), whether it is
// waiting in shared memory, waiting across hosts, or issuing its next collective. A failure
// thus reaches every rank of every host within a watch period (20 ms up to 20 hosts, then 1 ms
// per host: about a thousand store checks a second per group, at most 1 s). What the watch
// period leaves open -- a peer's last exchange, sent before it gave up, that completes a later
// collective of ours -- the agreement closes (agreement.hpp).
//
// The store may be out of reach: on the far side of a partition, or gone with its host. No
// request holds its caller past a deadline (StoreRequests): a wait asks without blocking, a
// rank at its deadline gives the store a moment (kStorePatience) to answer, and one that does
// not answer is silent, which the messages say. A store whose request raised is gone: nobody
// asks it again (a TCPStore client logs a warning with a C++ stack for every request to a store
// that is gone, and a job's store often lives in its rank 0, which may leave after its last
// collective while other ranks still hold their groups). The watcher asks only while its rank
// has a collective of the group in flight, or began one since it last asked: an idle group
// leaves the store alone.
class GroupHealth {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kMinWatchPeriod{20};
  static constexpr std::chrono::milliseconds kMaxWatchPeriod{1000};
  // How long a store that answers may take to answer one request (a round trip and its
  // queue): a store silent for longer is out of reach for now, and nobody waits on it.
  static constexpr std::chrono::milliseconds kStorePatience{400};

  // `abortHost` aborts this host's level with a reason (DummyBackend::abortWith), `hostBroken`
  // says why it was aborted (empty while it was not), `hostLosses` which group ranks of this
  // host this rank has seen die. `self` names this rank in messages: "rank 2 (host h1, pid
  // 1234)". `watch`: whether this rank watches the store; `hosts`: how many hosts the group
  // spans (the watch period grows with it).
  GroupHealth(
      const c10::intrusive_ptr<c10d::Store>& store,
      std::function<void(const std::string&)> abortHost,
      std::function<std::string()> hostBroken,
      std::function<std::vector<int>()> hostLosses,
      std::string self,
      bool watch,
      int hosts);
  ~GroupHealth();
  GroupHealth(const GroupHealth&) = delete;
  GroupHealth& operator=(const GroupHealth&) = delete;

  // Empty while the group is usable; otherwise the reason every rank reports. Cheap (an atomic
  // and the host level's shared flag): waits call it often.
  std::string brokenReason();
  // Raises the group's failure (DistBackendError, `context`: the collective) if it failed.
  void raiseIfBroken(const std::string& context);
  // The group failed here: publishes `reason` (unless another rank published first), aborts
  // this host's level, and raises DistBackendError with `context` and the reason that won.
  // `sayIfUntold`: where the store could not be told, the reason says so (false: it says so
  // already).
  [[noreturn]] void fail(
      const std::string& context, const std::string& reason, bool sayIfUntold = true);
  // Marks the group failed with `reason` without raising (ProcessGroup.abort, exit). Waits up
  // to kStorePatience for the store to say whose reason won, unless the store is silent.
  std::string markFailed(const std::string& reason, bool sayIfUntold = true);

  // What the store says of the group's failure.
  struct Heard {
    enum class What { kNothing, kReason, kSilent, kGone } what = What::kNothing;
    std::string reason; // kReason: the published reason; kGone: the store's error
  };
  // Asks the store whether a failure was published; waits up to kStorePatience for the answer
  // (a store that was silent already is not waited for).
  Heard published() const;
  // Asks until a reason appears, the store turns out silent or gone, or `until` passes (the
  // last question may take its kStorePatience beyond).
  Heard awaitPublished(Clock::time_point until) const;
  // A question in flight, for a wait loop that must not block on the store: ask() posts one
  // where none is in flight, heard() reads its answer once it came (then the next ask()
  // posts again).
  class Poll {
   public:
    explicit Poll(const GroupHealth& health) : health_(health) {}
    void ask();
    std::optional<Heard> heard();

   private:
    const GroupHealth& health_;
    std::optional<StoreRequests::Reply<std::optional<std::string>>> reply_;
  };

  // Ranks this rank lost: dead, or their cross-host connection closed. Told to the other ranks
  // through the store (a key per rank, posted without waiting), so that every survivor can
  // name them, even one that only heard of the failure (dead_ranks(), then shrink_group).
  void noteLost(const std::vector<int>& ranks);
  // The group's ranks (of `size`) lost as far as this rank knows: what it saw itself
  // (noteLost, hostLosses) and what other ranks told the store, asked until `until`. One
  // store request per rank not already known: call it when recovering, not on a hot path.
  std::vector<int> lostRanks(int size, Clock::time_point until) const;

  // The collective a rank is waiting in, told to the ranks it may wait for. Between the hosts'
  // leaders a collective does not always begin with the same engine call (a broadcast's is the
  // root's host's one-way record: agreement.hpp, agreeOneWay), so leaders that called different
  // collectives may meet nobody and wait; a wait that lasts tells its call (one key per rank,
  // overwritten, posted without waiting) and reads its peers' (InterHostEngine::wait).
  void tellCall(int rank, const OpDescriptor& op);
  // The calls `ranks` told (none where a rank told nothing), asked in one request.
  using ToldCalls = std::vector<std::optional<OpDescriptor>>;
  StoreRequests::Reply<ToldCalls> toldCalls(const std::vector<int>& ranks) const;

  // Whether the store is gone (a request raised: its host left or died).
  bool storeGone() const {
    return requests_.gone();
  }
  // Whether the store has left a request unanswered for longer than kStorePatience.
  bool storeSilent() const {
    return requests_.silentFor() > kStorePatience;
  }

  const std::string& self() const {
    return self_;
  }

  // A collective of the group begins / ends on this rank (the watcher asks the store meanwhile).
  void collectiveBegins() {
    begun_.fetch_add(1, std::memory_order_relaxed);
    inFlight_.fetch_add(1, std::memory_order_relaxed);
  }
  void collectiveEnds() {
    inFlight_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  void watchLoop();
  StoreRequests::Reply<std::optional<std::string>> askPublished() const;

  mutable StoreRequests requests_;
  std::function<void(const std::string&)> abortHost_;
  std::function<std::string()> hostBroken_;
  std::function<std::vector<int>()> hostLosses_;
  std::string self_;
  mutable std::mutex mu_;
  std::string reason_; // guarded by mu_
  // The failure's compare-and-set while the store had not answered it: once it does (the
  // network returned), reason_ becomes the reason that won, the one every other rank reports.
  std::optional<StoreRequests::Reply<std::vector<uint8_t>>> untold_; // guarded by mu_
  std::set<int> lost_; // guarded by mu_: ranks noteLost() was told of
  std::atomic<bool> broken_{false};
  std::atomic<uint64_t> begun_{0};
  std::atomic<int> inFlight_{0};
  std::chrono::milliseconds watchPeriod_;
  std::mutex watchMu_;
  std::condition_variable watchCv_;
  bool stopWatching_ = false; // guarded by watchMu_
  std::thread watcher_;
};

// An exception's message for an error that names it: its first line, without the C++ stack
// c10 errors carry ("Exception raised from ...", "frame #0: ...") or the source locations gloo
// prefixes to its messages ("[.../gloo/transport/tcp/pair.cc:534] ").
std::string errorText(const std::exception& e);

} // namespace dummy_collectives::inter_host
