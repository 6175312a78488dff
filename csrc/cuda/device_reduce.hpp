#pragma once

// CUDA reduction kernels (CUDA builds only): the device twin of reduceInto().

#include <cstdint>

#include <cuda_runtime_api.h>

#include <dummy_collectives/reduce_ops.hpp>

namespace dummy_collectives::cuda {

// Sources one kernel folds at most; larger groups take the host-staged path.
constexpr int kMaxDeviceSources = 16;

// Queues on `stream`: out[i] = srcs[0][i] op ... op srcs[count-1][i] (folded in that order, the
// CPU kernel's arithmetic, so every rank gets bit-identical results), then AVG/PREMUL_SUM as
// `spec` says; `copy`, if not null, receives the result too. Pointers may be mapped from peer
// processes (CUDA IPC); `out` may alias a source at the same positions.
void launchReduce(
    const ReduceSpec& spec,
    void* out,
    void* copy,
    const void* const* srcs,
    int count,
    int64_t numel,
    cudaStream_t stream);

// The same fold, its result written to each of outs[0..outCount) (each may alias a source at
// the same positions: every element is read from all sources before it is written).
void launchReduceInto(
    const ReduceSpec& spec,
    void* const* outs,
    int outCount,
    const void* const* srcs,
    int count,
    int64_t numel,
    cudaStream_t stream);

} // namespace dummy_collectives::cuda
