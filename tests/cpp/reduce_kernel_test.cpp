// reduceInto against a scalar reference written here, for every dtype and operation it takes,
// at lengths around the vector widths; resolveReduce's refusals. CTest runs this binary once per
// instruction set (DUMMY_COLLECTIVES_CPU_CAPABILITY), so every variant of the loops is checked.

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <c10/util/complex.h>
#include <gtest/gtest.h>

#include "kernels/reduce_kernel.hpp"

namespace dummy_collectives {
namespace {

using c10d::ReduceOp;

// Lengths around every vector width (64-byte registers hold 64 bytes, 8 doubles, ...).
const std::vector<int64_t> kLengths = {0, 1, 7, 8, 15, 16, 31, 33, 63, 64, 65, 130, 1000, 4099};
const std::vector<int> kSources = {1, 2, 3, 5};

template <typename T>
T sample(std::mt19937& gen) {
  if constexpr (std::is_same_v<T, bool>) {
    return gen() % 2 == 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(gen()); // wraps: integer sums overflow as they do in torch
  } else if constexpr (std::is_same_v<T, c10::complex<float>> ||
                       std::is_same_v<T, c10::complex<double>>) {
    std::uniform_real_distribution<double> d(-4, 4);
    return T(d(gen), d(gen));
  } else {
    std::uniform_real_distribution<float> d(-4, 4);
    return static_cast<T>(d(gen));
  }
}

// A product as written, each part rounded on its own (no fused multiply-add) on every host.
template <typename A>
A times(A x, A y) {
  if constexpr (c10::is_complex<A>::value) {
    volatile auto ac = x.real() * y.real(), bd = x.imag() * y.imag();
    volatile auto ad = x.real() * y.imag(), bc = x.imag() * y.real();
    return A(ac - bd, ad + bc);
  } else {
    return x * y;
  }
}

// What one element folds to, in the order every rank folds: source 0 first.
template <typename T, typename A>
A fold(ReduceKind kind, A acc, A x) {
  switch (kind) {
    case ReduceKind::kSum:
      if constexpr (std::is_same_v<A, bool>) {
        return acc || x;
      } else {
        return acc + x;
      }
    case ReduceKind::kProduct:
      if constexpr (std::is_same_v<A, bool>) {
        return acc && x;
      } else if constexpr (c10::is_complex<A>::value) {
        return times(acc, x);
      } else {
        return acc * x;
      }
    case ReduceKind::kMin:
    case ReduceKind::kMax:
      if constexpr (std::is_floating_point_v<A>) {
        if (std::isnan(acc) || std::isnan(x)) { // torch.minimum/maximum propagate NaN
          return std::isnan(x) ? x : acc;
        }
      }
      if constexpr (!std::is_same_v<A, c10::complex<float>> &&
                    !std::is_same_v<A, c10::complex<double>>) {
        return kind == ReduceKind::kMin ? (x < acc ? x : acc) : (acc < x ? x : acc);
      }
      break;
    case ReduceKind::kBand:
    case ReduceKind::kBor:
    case ReduceKind::kBxor:
      if constexpr (std::is_integral_v<A>) {
        return kind == ReduceKind::kBand ? A(acc & x) : kind == ReduceKind::kBor ? A(acc | x)
                                                                                  : A(acc ^ x);
      }
      break;
  }
  ADD_FAILURE() << "no reference for this operation";
  return acc;
}

template <typename T>
bool sameBits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T>
void checkAgainstReference(const ReduceOp& op, c10::ScalarType dtype, bool withNaN = false) {
  using A = typename reduce_ops::Accumulator<T>::type;
  std::mt19937 gen(1234);
  for (const int count : kSources) {
    const ReduceSpec spec = resolveReduce(op, dtype, count, "allreduce", 0);
    for (const int64_t n : kLengths) {
      // Arrays, not std::vector: std::vector<bool> packs its bits.
      std::vector<std::unique_ptr<T[]>> sources;
      for (int j = 0; j < count; ++j) {
        sources.push_back(std::make_unique<T[]>(n));
        for (int64_t i = 0; i < n; ++i) {
          sources[j][i] = sample<T>(gen);
        }
      }
      if constexpr (std::is_floating_point_v<A>) {
        if (withNaN && n > 0) {
          sources[count - 1][n / 2] = static_cast<T>(std::numeric_limits<float>::quiet_NaN());
        }
      }
      std::vector<const void*> srcs;
      for (const auto& source : sources) {
        srcs.push_back(source.get());
      }
      auto out = std::make_unique<T[]>(n);
      auto copy = std::make_unique<T[]>(n);
      reduceInto(spec, out.get(), srcs.data(), count, n, copy.get());
      const A scale = static_cast<A>(spec.factor);
      auto term = [&](const T& x) { // PREMUL_SUM scales each source, rounding once
        return spec.premul ? times(static_cast<A>(x), scale) : static_cast<A>(x);
      };
      for (int64_t i = 0; i < n; ++i) {
        A acc = term(sources[0][i]);
        for (int j = 1; j < count; ++j) {
          acc = fold<T>(spec.kind, acc, term(sources[j][i]));
        }
        if (spec.divisor != 1) {
          if constexpr (std::is_integral_v<A> && !std::is_same_v<A, bool>) {
            acc = static_cast<A>(acc / spec.divisor);
          } else if constexpr (!std::is_same_v<A, bool>) {
            using R = typename reduce_ops::RealOf<A>::type;
            acc = acc / static_cast<R>(spec.divisor); // a complex one part by part
          }
        }
        const T expected = static_cast<T>(acc);
        const bool bothNaN = std::is_floating_point_v<A> &&
            static_cast<A>(out[i]) != static_cast<A>(out[i]) && acc != acc;
        ASSERT_TRUE(sameBits(out[i], expected) || bothNaN)
            << reduceCapability() << " " << c10::toString(dtype) << " op "
            << static_cast<int>(op.op_) << ", " << count << " sources of " << n << ", element "
            << i;
        ASSERT_TRUE(sameBits(out[i], copy[i])) << "the copy differs at " << i;
      }
    }
  }
}

ReduceOp premulSum(double factor) {
  ReduceOp op; // field by field: torch's two-argument constructor drops the supplement
  op.op_ = ReduceOp::PREMUL_SUM;
  op.supplement_ = c10::make_intrusive<c10d::NCCLPreMulSumSupplement>(factor);
  return op;
}

#define DC_CHECK_ALL_OPS(T, dtype)                                  \
  checkAgainstReference<T>(ReduceOp::SUM, dtype);                   \
  checkAgainstReference<T>(ReduceOp::PRODUCT, dtype);               \
  if (!c10::isComplexType(dtype)) {                                  \
    checkAgainstReference<T>(ReduceOp::MIN, dtype, /*withNaN=*/true); \
    checkAgainstReference<T>(ReduceOp::MAX, dtype, /*withNaN=*/true); \
  }

TEST(ReduceKernel, FloatingTypesMatchTheReference) {
  DC_CHECK_ALL_OPS(float, c10::ScalarType::Float);
  DC_CHECK_ALL_OPS(double, c10::ScalarType::Double);
  DC_CHECK_ALL_OPS(c10::Half, c10::ScalarType::Half);
  DC_CHECK_ALL_OPS(c10::BFloat16, c10::ScalarType::BFloat16);
  checkAgainstReference<float>(ReduceOp::AVG, c10::ScalarType::Float);
  checkAgainstReference<double>(ReduceOp::AVG, c10::ScalarType::Double);
  checkAgainstReference<float>(premulSum(0.3), c10::ScalarType::Float);
  checkAgainstReference<double>(premulSum(0.3), c10::ScalarType::Double);
  checkAgainstReference<c10::Half>(premulSum(0.3), c10::ScalarType::Half);
  checkAgainstReference<c10::BFloat16>(premulSum(0.3), c10::ScalarType::BFloat16);
}

TEST(ReduceKernel, ComplexTypesMatchTheReference) {
  DC_CHECK_ALL_OPS(c10::complex<float>, c10::ScalarType::ComplexFloat);
  DC_CHECK_ALL_OPS(c10::complex<double>, c10::ScalarType::ComplexDouble);
  checkAgainstReference<c10::complex<float>>(premulSum(0.3), c10::ScalarType::ComplexFloat);
  checkAgainstReference<c10::complex<double>>(ReduceOp::AVG, c10::ScalarType::ComplexDouble);
  checkAgainstReference<c10::complex<float>>(ReduceOp::AVG, c10::ScalarType::ComplexFloat);
}

template <typename T>
void checkIntegerOps(c10::ScalarType dtype) {
  DC_CHECK_ALL_OPS(T, dtype);
  checkAgainstReference<T>(ReduceOp::BAND, dtype);
  checkAgainstReference<T>(ReduceOp::BOR, dtype);
  checkAgainstReference<T>(ReduceOp::BXOR, dtype);
  checkAgainstReference<T>(ReduceOp::AVG, dtype); // truncating, as NCCL does
}

TEST(ReduceKernel, IntegerTypesMatchTheReference) {
  checkIntegerOps<uint8_t>(c10::ScalarType::Byte);
  checkIntegerOps<int8_t>(c10::ScalarType::Char);
  checkIntegerOps<int16_t>(c10::ScalarType::Short);
  checkIntegerOps<int32_t>(c10::ScalarType::Int);
  checkIntegerOps<int64_t>(c10::ScalarType::Long);
}

TEST(ReduceKernel, BoolMatchesTheReference) {
  DC_CHECK_ALL_OPS(bool, c10::ScalarType::Bool);
}

TEST(ReduceKernel, ANaNOnAnySourceSurvivesMinAndMax) {
  for (const auto& op : {ReduceOp::MIN, ReduceOp::MAX}) {
    for (int holder = 0; holder < 3; ++holder) {
      std::vector<std::vector<float>> sources(3, std::vector<float>(40, 1.0f));
      sources[holder][17] = std::numeric_limits<float>::quiet_NaN();
      const void* srcs[] = {sources[0].data(), sources[1].data(), sources[2].data()};
      std::vector<float> out(40);
      reduceInto(resolveReduce(op, c10::ScalarType::Float, 3, "allreduce", 0), out.data(), srcs,
                 3, 40);
      EXPECT_TRUE(std::isnan(out[17])) << "source " << holder << "'s NaN was lost";
      EXPECT_EQ(out[16], 1.0f);
    }
  }
}

TEST(ReduceKernel, OutputMayAliasASource) {
  std::vector<float> a(100, 2.0f), b(100, 3.0f);
  const void* srcs[] = {a.data(), b.data()};
  reduceInto(resolveReduce(ReduceOp::SUM, c10::ScalarType::Float, 2, "allreduce", 0), a.data(),
             srcs, 2, 100);
  for (float x : a) {
    ASSERT_EQ(x, 5.0f);
  }
}

TEST(ReduceKernel, PremulSumMultipliesEverySource) {
  const ReduceOp op = premulSum(0.5);
  const ReduceSpec spec = resolveReduce(op, c10::ScalarType::Double, 2, "allreduce", 0);
  EXPECT_TRUE(spec.premul);
  std::vector<double> a = {2, 4, 6}, b = {8, 10, 12}, out(3);
  const void* srcs[] = {a.data(), b.data()};
  reduceInto(spec, out.data(), srcs, 2, 3);
  EXPECT_EQ(out, (std::vector<double>{5, 7, 9}));
}

// Each refusal names the collective, the rank and what was wrong, as a ValueError.
void expectRefused(const ReduceOp& op, c10::ScalarType dtype, const char* words) {
  try {
    resolveReduce(op, dtype, 2, "reduce_scatter", 3);
    ADD_FAILURE() << "accepted " << c10::toString(dtype);
  } catch (const c10::ValueError& e) {
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("reduce_scatter"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 3"), std::string::npos) << what;
    EXPECT_NE(what.find(words), std::string::npos) << what;
  }
}

TEST(ReduceKernel, MeaninglessPairsAreRefusedByName) {
  expectRefused(ReduceOp::MAX, c10::ScalarType::ComplexFloat, "ComplexFloat");
  expectRefused(ReduceOp::BAND, c10::ScalarType::Float, "Float");
  expectRefused(ReduceOp::BXOR, c10::ScalarType::Half, "Half");
  expectRefused(ReduceOp::AVG, c10::ScalarType::Bool, "Bool");
}

TEST(ReduceKernel, NamesItsInstructionSet) {
  const std::string name = reduceCapability();
  EXPECT_TRUE(name == "generic" || name == "avx2" || name == "avx512") << name;
  if (const char* forced = std::getenv("DUMMY_COLLECTIVES_CPU_CAPABILITY")) {
    // A forced set caps the choice; the CPU may not have it.
    if (std::string(forced) == "generic") {
      EXPECT_EQ(name, "generic");
    }
  }
}

} // namespace
} // namespace dummy_collectives
