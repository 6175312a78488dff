#pragma once

#include <chrono>

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace dummy_collectives {

// gloo's monitored barrier over `group`'s own send and recv: rank 0 hears from every rank within
// the timeout (or names the first, or with waitAllRanks every, rank that did not come), then
// releases them. `defaultTimeout` applies where opts carries none.
void monitoredBarrier(
    c10d::Backend& group,
    const c10d::BarrierOptions& opts,
    bool waitAllRanks,
    std::chrono::milliseconds defaultTimeout);

} // namespace dummy_collectives
