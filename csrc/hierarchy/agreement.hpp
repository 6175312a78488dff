#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "hierarchy/levels.hpp"

namespace dummy_collectives::hierarchy {

// Bytes in flight, and a view of them.
using Bytes = std::vector<std::byte>;
struct ByteView {
  const std::byte* data = nullptr;
  size_t size = 0;
};

// What the collective combines on the way (small messages: their data rides along). combineHost
// turns the payloads of a host's ranks (local rank order) into what the host sends; combineAll
// turns every host's contribution (host order) into the result. Both run only on the hosts'
// leaders, once every rank concerned called the same collective. Each result must fit in
// settings.inlineBytes (the leader broadcasts it inside its host).
struct Combine {
  std::function<Bytes(const std::vector<ByteView>& localPayloads)> host;
  std::function<Bytes(const std::vector<ByteView>& hostPayloads)> all;
};

// The first step of every collective of a group that spans hosts: every rank learns that every
// rank of the group called the same collective, or every rank raises the same mismatch error
// (DistBackendError) before any data moved, and the group stays usable -- as on one host.
//
// Every record has room for one fixed size (a header plus inlineBytes), whatever the collective,
// so ranks that called different collectives never overrun each other's buffers (across hosts
// only the header and the payload travel: InterHostEngine::exchangeRecords):
//   1. an all-gather of every rank's header (and payload) inside each host: each host knows
//      whether its ranks agree;
//   2. an all-gather of each host's header and combined payload among the hosts' leaders (their
//      local rank 0): every leader knows every host's verdict;
//   3. a broadcast inside each host from its leader: the verdict and the result.
// One rank per host crosses hosts: a small collective costs one cross-host exchange between
// leaders, not one per rank (the other ranks wait in shared memory, which costs no network and,
// on a shared machine, no CPU).
// Returns the combined result (empty without `combine`).
//
// On the way it finds who made whom wait (ctx.arrival, where set): every rank's record carries
// when it arrived (ctx.arrivedNs, its host's steady clock), so after step 1 every rank knows its
// host's last rank and its own in-host wait; each leader's record names its host's last rank,
// and the host whose leader sent its record longest after the previous exchange completed
// (sinceSyncNs, each on its own steady clock) is the last host.
// A rank's wait: its in-host wait, plus its leader's wait in the cross-host exchange (on the
// leader's steady clock) unless its host came last. See docs/design.md, "Who made whom wait".
Bytes agree(
    const Levels& levels,
    const OpContext& ctx,
    ByteView payload = {},
    const Combine* combine = nullptr);

// The one-way form of the agreement, for broadcasts. The exchange above costs every leader a
// send and a receive from every other; gloo's own broadcast is one message from the root, and
// a small broadcast has nothing else to hide the difference behind (docs/benchmarks.md, "One-way
// broadcasts"). So, after step 1 inside each host, the leader of the root's host announces its
// host's record (the verdict of step 1, the root's call, and the root's data where it fits a
// record) one way, through the engine's broadcast, into receives of a whole record (never
// overrun, whatever the root called); every other leader checks the root's call against its
// host's, and tells its host (step 3). The root's host has nothing to wait for.
//
// The price: the root's host does not learn what the others found. Where a receiving host's
// call differs, that host raises at once and fails the group (the root's host, already done,
// raises it at its next collective): nobody is left a way to agree on what to do next. Where
// the ranks of the root's host disagree among themselves, it says so in its record and every
// rank raises, the group staying usable, as after an exchange. A leader that called a
// collective of another form meets nobody: its peers wait, and the leaders' engine waits
// compare the calls in the store (InterHostEngine::wait).
struct OneWayAgreement {
  // The root's payload: a view of the group's kept buffers (Levels), valid until its next
  // collective (on the root's host, of what rootsHostData returned, where given). On a
  // receiving host's other ranks, only a payload that fits settings.inlineBytes (they receive
  // it in shared memory, in step 3); a larger one stays with the leader.
  ByteView payload;
  // The root's host's leader: its record, in flight (wait for it: InterHostEngine::wait).
  c10::intrusive_ptr<c10d::Work> announced;
};
// `payload`: the root's data, where it fits the in-host records (settings.inlineBytes, or
// settings.oneWayBytes alone on its host); `root`: the group rank of the broadcast's root.
// `rootsHostData`, where given, runs on every rank of the root's host once its ranks agree
// (it may run in-host steps) and returns what its leader announces (up to oneWayBytes).
OneWayAgreement agreeOneWay(
    const Levels& levels,
    const OpContext& ctx,
    ByteView payload,
    int root,
    const std::function<ByteView()>& rootsHostData = nullptr);

// The agreement in two halves, so that a large collective's first in-host stage overlaps the
// leaders' exchange: the constructor runs step 1 and issues step 2, finish() completes steps 2
// and 3 (and raises a mismatch). Between the two the caller may issue in-host collectives only
// (every rank of the host the same ones, and only where hostAgrees()), never cross-host ones.
class Agreement {
 public:
  Agreement(
      const Levels& levels,
      const OpContext& ctx,
      ByteView payload = {},
      const Combine* combine = nullptr);
  // Whether this host's ranks all called the same collective (known after step 1).
  bool hostAgrees() const {
    return hostAgrees_;
  }
  Bytes finish();

  // What every record starts with (a fixed-size record: agreement.cpp).
  struct Header {
    OpDescriptor op;
    int32_t verdict = 0;       // agreement.cpp's Verdict
    int32_t writer = -1;       // group rank
    uint64_t payloadBytes = 0;
    // How long after its last exchange completed (Levels::lastExchangeDoneNs) the leader sent
    // it, on its own steady clock: which host came last, without comparing hosts' clocks.
    int64_t sinceSyncNs = 0;
    // Who made whom wait (arrival.hpp). In a rank's own record: when it arrived, on its host's
    // steady clock. In a leader's record: the host's last rank (group rank) and when it
    // arrived. In the leader's verdict to its host: the group's last rank, and how long the
    // leader waited for the other hosts (0 where this host came last).
    int64_t arrivedNs = 0;
    int64_t crossHostWaitNs = 0;
    int32_t lastRank = -1;
  };

 private:

  const Levels& levels_;
  const OpContext& ctx_;
  const Combine* combine_;
  Header mine_;
  at::Tensor hostRecords_;
  bool hostAgrees_ = true;
  c10::intrusive_ptr<c10d::Work> exchange_; // the leaders' exchange (leaders only)
  at::Tensor leaderRecords_;
  // Who made whom wait (see agree()): this host's last rank and this rank's wait for it, then
  // the group's last rank and the wait counted across hosts (the leader's, told to its host).
  int32_t hostLastRank_ = -1;
  int64_t inHostWaitNs_ = 0;
  int64_t exchangeIssuedNs_ = 0; // steady clock, when the leaders' exchange was issued
  int32_t lastRank_ = -1;
  int64_t crossHostWaitNs_ = 0;
  bool finished_ = false;
};

} // namespace dummy_collectives::hierarchy
