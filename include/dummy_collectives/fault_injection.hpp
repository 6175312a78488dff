#pragma once

// A switch for tests: DUMMY_COLLECTIVES_FAULT_INJECT="rank:collective:step:action" makes the
// rank of that group rank fail at that step of that collective, the way a rank alone fails in
// real jobs (out of memory part way through, a bug, the OOM killer), so "one rank fails at step
// k" can be tested for every collective and step instead of being provoked with memory limits.
//
//   rank        the rank in the group (every dummy group the process makes reads the switch)
//   collective  the group's collective number, 1-based, as errors and the flight recorder
//               number them; 0: the group's creation, before the rank maps its shared memory
//   step        the collective's k-th step (1-based) on that rank: its k-th exchange with the
//               other ranks (on one host); across hosts, its k-th in-host exchange (the fault
//               fires before the rank joins it) or wait on the cross-host engine, in the order
//               the rank reaches them; with collective 0 it is ignored
//   action      raise: a RuntimeError-like C++ exception (not a DistBackendError), as a failed
//               allocation throws; die: SIGKILL to the rank itself
//
// Read when a group is made. Not for production: it exists to test what the backend does.
#include <cstdint>
#include <optional>
#include <string>

namespace dummy_collectives::fault_injection {

enum class Action : uint8_t { kRaise, kDie };

struct Fault {
  int rank = -1;
  uint64_t collective = 0;
  int step = 0;
  Action action = Action::kRaise;

  // The step of collective `seq` at which rank `rank` fails (0: none). One compare per
  // collective, so the hot path pays a member read per step.
  int stepFor(int groupRank, uint64_t seq) const {
    return groupRank == rank && seq == collective ? step : 0;
  }
};

constexpr const char* kVariable = "DUMMY_COLLECTIVES_FAULT_INJECT";

// The fault the environment asks for, if any; a malformed value raises a ValueError naming it.
std::optional<Fault> fromEnv();

// Fails as `fault` says: throws std::runtime_error (raise) or kills this process (die).
// `where` says where it fired, for the message.
[[noreturn]] void fire(const Fault& fault, const std::string& where);

} // namespace dummy_collectives::fault_injection
