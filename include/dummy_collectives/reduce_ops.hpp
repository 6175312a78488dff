#pragma once

// The element-wise folding operations, shared by the CPU reduction loops (reduce_loops.inc) and
// the CUDA reduction kernels (csrc/cuda/device_reduce.cu), so both compute bit-identical results.
// That also needs the builds' -ffp-contract=off / --fmad=false: a fused multiply-add (in a
// complex product, in PREMUL_SUM) rounds once where the plain instructions round twice, so
// without them an AVX2 host, an AVX-512 host and a GPU would fold to different bits.

#include <cstdint>
#include <type_traits>

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/complex.h>

#if defined(__CUDACC__)
#define DC_HOST_DEVICE __host__ __device__
#else
#define DC_HOST_DEVICE
#endif

// Every dtype the reductions support (gloo's, plus half precision, bool and complex).
#define DC_FOR_EACH_REDUCIBLE_TYPE(_)    \
  _(uint8_t, Byte)                       \
  _(int8_t, Char)                        \
  _(int16_t, Short)                      \
  _(int32_t, Int)                        \
  _(int64_t, Long)                       \
  _(c10::Half, Half)                     \
  _(float, Float)                        \
  _(double, Double)                      \
  _(c10::complex<float>, ComplexFloat)   \
  _(c10::complex<double>, ComplexDouble) \
  _(bool, Bool)                          \
  _(c10::BFloat16, BFloat16)

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

namespace reduce_ops {

// Half and BFloat16 accumulate in float: one rounding per output instead of one per source.
template <typename T>
struct Accumulator {
  using type = T;
};
template <>
struct Accumulator<c10::Half> {
  using type = float;
};
template <>
struct Accumulator<c10::BFloat16> {
  using type = float;
};

// The real type of a complex one; itself for the others.
template <typename T>
struct RealOf {
  using type = T;
};
template <typename R>
struct RealOf<c10::complex<R>> {
  using type = R;
};

struct Sum {
  template <typename A>
  DC_HOST_DEVICE A operator()(A a, A b) const {
    return a + b;
  }
};
// A complex product rounded as written, (ac - bd) + (ad + bc)i, each product rounded on its
// own. GCC's vectorizer turns c10::complex's product into fused multiply-add/subtract
// instructions even under -ffp-contract=off, which round differently on AVX2 and AVX-512 hosts
// than on others; the volatile products keep it from vectorizing this rare case at all.
template <typename A>
DC_HOST_DEVICE A complexProduct(A x, A y) {
#if defined(__CUDA_ARCH__)
  return x * y; // nvcc fuses nothing under --fmad=false
#else
  using R = typename A::value_type;
  volatile R ac = x.real() * y.real();
  volatile R bd = x.imag() * y.imag();
  volatile R ad = x.real() * y.imag();
  volatile R bc = x.imag() * y.real();
  return A(ac - bd, ad + bc);
#endif
}

struct Product {
  template <typename A>
  DC_HOST_DEVICE A operator()(A a, A b) const {
    if constexpr (std::is_same_v<A, bool>) {
      return a && b;
    } else if constexpr (c10::is_complex<A>::value) {
      return complexProduct(a, b);
    } else {
      return a * b;
    }
  }
};
// MIN and MAX propagate NaN, as torch.minimum / torch.maximum do, whichever rank holds it (a
// plain compare keeps a NaN only where it is the first operand, so only rank 0's would survive;
// people detect divergence with all_reduce(MAX)). `b != b` is false for every integer, so those
// compile to the plain compare. Every rank folds in the same order, so every rank gets the same
// NaN.
struct Min {
  template <typename A>
  DC_HOST_DEVICE A operator()(A a, A b) const {
    return (b < a || b != b) ? b : a;
  }
};
struct Max {
  template <typename A>
  DC_HOST_DEVICE A operator()(A a, A b) const {
    return (a < b || b != b) ? b : a;
  }
};
struct BitAnd {
  template <typename A>
  DC_HOST_DEVICE A operator()(A a, A b) const {
    return a & b;
  }
};
struct BitOr {
  template <typename A>
  DC_HOST_DEVICE A operator()(A a, A b) const {
    return a | b;
  }
};
struct BitXor {
  template <typename A>
  DC_HOST_DEVICE A operator()(A a, A b) const {
    return a ^ b;
  }
};

// What happens to the folded value: nothing, each source pre-multiplied by a factor
// (PREMUL_SUM), or the result divided by the world size (AVG).
enum class Post { kNone, kPremul, kDivide };

} // namespace reduce_ops
} // namespace dummy_collectives
