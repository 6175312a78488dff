#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

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

} // namespace dummy_collectives
