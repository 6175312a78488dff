// The group's vote on peer access (peer_access.hpp): this rank's vote, the probe of every peer's
// memory behind it, and the decision the transport's vote exchange brings back.

#include "shm/peer_access.hpp"

#include <iomanip>

#include <c10/util/StringUtil.h>

#include "shm/cross_memory.hpp"
#include <dummy_collectives/debug_log.hpp>

#include "shm/shm_layout.hpp"

namespace dummy_collectives {

bool PeerAccessVote::vote(const RankControl* ranks, int size, int self) const {
  // Where the kernel copies slowly the slots win at every size (docs/benchmarks.md, "Peer
  // access"). Measuring costs little, once per process, and only when asked for.
  return wanted_ && (minSpeed_ <= 0.0 || cross_memory::copySpeed() >= minSpeed_) &&
      canReachAll(ranks, size, self);
}

bool PeerAccessVote::canReachAll(const RankControl* ranks, int size, int self) {
  const RankControl& mine = ranks[self];
  for (int r = 0; r < size; ++r) {
    const RankControl& peer = ranks[r];
    if (r == self) {
      continue;
    }
    // A pid from another pid namespace names some other process here, or none.
    if (peer.pid <= 0 || peer.pidNamespace == 0 || peer.pidNamespace != mine.pidNamespace) {
      return false;
    }
    auto* word = reinterpret_cast<void*>(peer.probeAddress);
    uint64_t value = 0;
    if (cross_memory::read(peer.pid, &value, word, sizeof(value)) != 0 ||
        value != peer.probeValue ||
        cross_memory::write(peer.pid, word, &value, sizeof(value)) != 0) {
      return false;
    }
  }
  return true;
}

void PeerAccessVote::decide(bool mine, bool everyone, int logRank, const char* logPrefix) {
  state_ = everyone ? State::kYes : State::kNo;
  if (!DC_LOG_ENABLED(kInfo)) {
    return;
  }
  std::string why = "every rank reaches every other's memory";
  if (!mine) {
    why = !wanted_ ? "peer_access is 0 on this rank"
        : minSpeed_ > 0.0 && cross_memory::copySpeed() < minSpeed_
        ? c10::str("this rank's cross-memory copy runs at ", std::setprecision(2),
                   cross_memory::copySpeed(), " of memcpy's speed, below "
                   "peer_access_min_speed ", minSpeed_)
        : std::string("this rank cannot reach every peer's memory");
  } else if (!everyone) {
    why = "another rank voted against it";
  }
  DC_LOG(kInfo, logRank, logPrefix, "peer access ", everyone ? "on" : "off", " (", why, ")");
}

std::string PeerAccessVote::describe() const {
  switch (state_.load(std::memory_order_relaxed)) {
    case State::kYes:
      return "on";
    case State::kNo:
      return "off";
    default:
      return "undecided";
  }
}

} // namespace dummy_collectives
