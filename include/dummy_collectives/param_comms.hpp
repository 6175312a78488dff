#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ThreadLocalState.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <dummy_collectives/arrival.hpp>

namespace dummy_collectives {

// What record_param_comms reports beyond the tensors: all-to-all's split sizes (in rows).
struct SplitSizes {
  std::vector<int64_t> in;
  std::vector<int64_t> out;
};

// What the built-in backends record for profilers and trace tools (record_param_comms), for a
// collective or point-to-point operation of `group`. `rank` is this rank for collectives and the
// peer for point-to-point, as NCCL records it. The caller checks that somebody listens
// (at::hasCallbacks()): the record allocates.
void recordParamComms(
    const c10d::Backend& group,
    uint64_t seq,
    bool p2p,
    const std::string& name,
    int rank,
    at::ScalarType dtype,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs,
    const SplitSizes& splits = {});

// Who made whom wait, for profilers: where a profiler listened when the collective was issued,
// its completion records an event "dummy.wait:<collective>" whose args hold `last_arrival` (group
// rank), `waited_us`, and the `Seq` and `Process Group Name` of the collective's own
// record_param_comms (so a trace tool can put them on the collective's event: trace.py does).
// torch.profiler exports a RecordFunction's keyword inputs as args only when it records shapes
// (profile(record_shapes=True)); without, the event shows with no args.
//
// `issuer` is the issuing thread's state (at::ThreadLocalState, taken when it was issued): the
// profiler's callbacks are thread-local, and the engine thread may complete the collective.
void recordArrival(
    const at::ThreadLocalState& issuer,
    const std::string& groupUid, // c10d::Backend::getGroupUid()
    uint64_t seq,
    const char* profilingTitle,
    const Arrival& arrival);

} // namespace dummy_collectives
