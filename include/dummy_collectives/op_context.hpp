#pragma once

#include <chrono>
#include <string>

#include <dummy_collectives/arrival.hpp>
#include <dummy_collectives/fault_injection.hpp>
#include <dummy_collectives/op_descriptor.hpp>

namespace dummy_collectives {

// One collective as a lowering runs it (lowering.hpp): what messages name, when it must be done,
// and who the group waited for.
struct OpContext {
  // Who timed out first decides what every rank reports, and only the first step of a
  // collective -- where ranks come straight from the caller -- can name the rank that never
  // came. Every later step waits for ranks that are known to have come; if one is late, it
  // waits on another host. So the cross-host waits give the ranks that can name the cause
  // kReasonPatience past the deadline to publish it (their deadlines differ by how far apart
  // they began; the store answers within a round trip), and in-host steps after the agreement
  // wait a grace beyond that, by which time the reason has reached them through the store. A
  // rank raises within a second of its deadline whatever the network does: the patience and a
  // store that answers (GroupHealth::kStorePatience) fit in it.
  static constexpr std::chrono::milliseconds kReasonPatience{500};
  static constexpr std::chrono::milliseconds kFollowingStepGrace{2500};

  OpDescriptor op;
  int rank = 0; // group rank
  std::chrono::milliseconds timeout{0};
  std::chrono::steady_clock::time_point deadline;
  // When this rank began the collective, and (the agreement fills it in, where the collective
  // has one) who the group waited for: see agreement.hpp. Null where nobody asks.
  int64_t arrivedNs = 0;
  Arrival* arrival = nullptr;

  // DUMMY_COLLECTIVES_FAULT_INJECT (tests): the fault this rank injects into this collective,
  // and at which of its steps (0: none), counted in `steps`: a step is an in-host exchange,
  // counted when the rank issues it (so a fault there leaves it out), or a wait on the
  // cross-host engine.
  const fault_injection::Fault* fault = nullptr;
  int faultStep = 0;
  mutable int steps = 0;
  // Each in-host exchange, as it is issued, and each wait on the cross-host engine begin with
  // this.
  void step() const {
    if (faultStep != 0 && ++steps == faultStep) {
      fault_injection::fire(*fault, "in " + describe() + ", at its step " + std::to_string(steps));
    }
  }

  // The timeout of an in-host step after the collective's first.
  std::chrono::milliseconds followingStepTimeout() const {
    return timeout + kFollowingStepGrace;
  }

  // "dummy allreduce #3 of 4 Float elements with SUM on rank 2": how every error starts.
  std::string describe() const {
    return "dummy " + op.describe() + " on rank " + std::to_string(rank);
  }
};

} // namespace dummy_collectives
