#pragma once

#include <cstdint>

#include <c10/core/ScalarType.h>
#include <dummy_collectives/reduce_ops.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace dummy_collectives {

// Validates the (ReduceOp, dtype) pair and resolves it; a pair that makes no sense (MAX on
// complex, BAND on float, AVG on bool...) raises a ValueError naming the collective and rank.
ReduceSpec resolveReduce(
    const c10d::ReduceOp& op,
    c10::ScalarType dtype,
    int worldSize,
    const char* collective,
    int rank);

// out[i] = f(srcs[0][i]) op f(srcs[1][i]) op ... op f(srcs[count-1][i]), folded left to right so
// every rank computes bit-identical results; then divided by spec.divisor. `out` may alias any
// source at the same positions. `copy`, if given, receives the result too. Vectorised, with the
// instruction set chosen once at run time (AVX-512, AVX2, generic).
void reduceInto(
    const ReduceSpec& spec,
    void* out,
    const void* const* srcs,
    int count,
    int64_t numel,
    void* copy = nullptr);

// The instruction set reduceInto dispatches to ("avx512", "avx2" or "generic"). The environment
// variable DUMMY_COLLECTIVES_CPU_CAPABILITY can force a lower one, e.g. to test every variant.
const char* reduceCapability();

} // namespace dummy_collectives
