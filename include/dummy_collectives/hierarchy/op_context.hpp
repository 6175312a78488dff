#pragma once

#include <chrono>
#include <string>

#include <dummy_collectives/op_descriptor.hpp>

namespace dummy_collectives::hierarchy {

// The collective a two-level algorithm runs: what messages name, and when it must be done.
struct OpContext {
  OpDescriptor op;
  int rank = 0; // group rank
  std::chrono::milliseconds timeout{0};
  std::chrono::steady_clock::time_point deadline;

  // "dummy allreduce #3 of 4 Float elements with SUM on rank 2": how every error starts.
  std::string describe() const {
    return "dummy " + op.describe() + " on rank " + std::to_string(rank);
  }
};

} // namespace dummy_collectives::hierarchy
