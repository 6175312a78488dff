#pragma once

// The group's vote on peer access: whether its ranks read and write each other's memory
// (cross_memory.hpp) for large transfers instead of going through the shared-memory slots. Kept
// apart from the step protocol, which only carries the vote (ShmTransport::sharePointers): what a
// rank votes depends on the host (its permissions, how fast its kernel copies), not on the
// collectives.
//
// Whether the host allows it is for the host to say (same user, Yama's ptrace_scope 0, no
// seccomp filter refusing the calls, one pid namespace), so the group decides on its first
// collective that could use it: each rank reads every peer's probe word and writes it back, then
// votes; one more exchange, and the group uses peer access on every rank or on none. A rank whose
// kernel copies slowly against memcpy (peer_access_min_speed) votes against it too.

#include <atomic>
#include <cstdint>
#include <string>

namespace dummy_collectives {

struct RankControl;

class PeerAccessVote {
 public:
  enum class State : uint8_t { kUndecided, kYes, kNo };

  // `wanted`: BackendOptions::peerAccess on this rank; `minSpeed`:
  // BackendOptions::peerAccessMinSpeed (the least cross-memory copy speed, as a fraction of
  // memcpy's, at which this rank votes for it; 0: any).
  PeerAccessVote(bool wanted, double minSpeed) : wanted_(wanted), minSpeed_(minSpeed) {}

  State state() const {
    return state_;
  }
  // This rank's vote: asked for, fast enough here, and every peer reachable. `ranks`: the
  // group's `size` rank records, every one connected (its pid and probe word published); `self`:
  // this rank.
  bool vote(const RankControl* ranks, int size, int self) const;
  // Records the group's decision, on where `everyone` voted for it, and logs why, as `logRank`'s
  // after `logPrefix` (`mine`: this rank's vote).
  void decide(bool mine, bool everyone, int logRank, const char* logPrefix);
  // "on", "off" or "undecided"; any thread may ask.
  std::string describe() const;

 private:
  // Whether this rank can read and write every peer's memory.
  static bool canReachAll(const RankControl* ranks, int size, int self);

  bool wanted_;
  double minSpeed_;
  std::atomic<State> state_{State::kUndecided};
};

} // namespace dummy_collectives
