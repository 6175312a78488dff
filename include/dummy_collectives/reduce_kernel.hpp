#pragma once

#include <cstdint>

#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace dummy_collectives {

// The element-wise operation a reduction folds with.
enum class ReduceKind : uint8_t { kSum, kProduct, kMin, kMax, kBand, kBor, kBxor };

// A c10d ReduceOp resolved for one dtype: AVG is SUM then divide by the world size (truncating
// for integers, as NCCL does), PREMUL_SUM is SUM of factor * x.
struct ReduceSpec {
  ReduceKind kind = ReduceKind::kSum;
  c10::ScalarType dtype = c10::ScalarType::Float;
  int64_t divisor = 1;   // AVG: the world size; otherwise 1
  bool premul = false;   // PREMUL_SUM
  double factor = 1.0;   // PREMUL_SUM's factor
};

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
