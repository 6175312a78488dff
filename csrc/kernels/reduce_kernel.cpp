#include "kernels/reduce_kernel.hpp"
#include <dummy_collectives/reduce_ops.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <c10/util/complex.h>

// One copy of the loops per instruction set. Portable binaries: no -march flag; the best copy
// the running CPU supports is picked once at load time.
#define DC_KERNEL_NS generic
#include "kernels/reduce_loops.inc"
#undef DC_KERNEL_NS

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DC_HAVE_X86_VARIANTS 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define DC_KERNEL_NS avx2
#include "kernels/reduce_loops.inc"
#undef DC_KERNEL_NS
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#define DC_KERNEL_NS avx512
#include "kernels/reduce_loops.inc"
#undef DC_KERNEL_NS
#pragma GCC pop_options
#endif

namespace dummy_collectives {
namespace {

using ReduceFn = void (*)(const ReduceSpec&, void*, void*, const void* const*, int, int64_t);

struct Variant {
  ReduceFn fn;
  const char* name;
};

Variant chooseVariant() {
  const char* forced = std::getenv("DUMMY_COLLECTIVES_CPU_CAPABILITY");
  auto allowed = [&](const char* name) {
    if (forced == nullptr || *forced == '\0') {
      return true;
    }
    // A forced capability caps the choice: "avx2" allows avx2 and generic.
    const char* order[] = {"generic", "avx2", "avx512"};
    int cap = -1, want = -1;
    for (int i = 0; i < 3; ++i) {
      cap = std::strcmp(order[i], forced) == 0 ? i : cap;
      want = std::strcmp(order[i], name) == 0 ? i : want;
    }
    return cap < 0 || want <= cap;
  };
#ifdef DC_HAVE_X86_VARIANTS
  __builtin_cpu_init();
  if (allowed("avx512") && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    return {&avx512::reduce, "avx512"};
  }
  if (allowed("avx2") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return {&avx2::reduce, "avx2"};
  }
#endif
  (void)allowed;
  return {&generic::reduce, "generic"};
}

const Variant& variant() {
  static const Variant chosen = chooseVariant();
  return chosen;
}

bool isReducible(c10::ScalarType dtype) {
  switch (dtype) {
#define DC_REDUCIBLE_CASE(ctype, name) case c10::ScalarType::name:
    DC_FOR_EACH_REDUCIBLE_TYPE(DC_REDUCIBLE_CASE)
#undef DC_REDUCIBLE_CASE
    return true;
    default:
      return false;
  }
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

} // namespace

ReduceSpec resolveReduce(
    const c10d::ReduceOp& op,
    c10::ScalarType dtype,
    int worldSize,
    const char* collective,
    int rank) {
  TORCH_CHECK_VALUE(
      isReducible(dtype),
      "dummy ",
      collective,
      " (rank ",
      rank,
      "): dtype ",
      dtype,
      " is not supported");
  const bool isBool = dtype == c10::ScalarType::Bool;
  const bool isComplex = c10::isComplexType(dtype);
  const bool isFloat = c10::isFloatingType(dtype);
  const bool isInteger = !isBool && !isComplex && !isFloat;
  const auto type = op.op_;
  auto reject = [&](const char* why) {
    TORCH_CHECK_VALUE(
        false,
        "dummy ",
        collective,
        " (rank ",
        rank,
        "): ReduceOp.",
        opName(type),
        " is not defined for ",
        dtype,
        " tensors (",
        why,
        ")");
  };
  ReduceSpec spec;
  spec.dtype = dtype;
  switch (type) {
    case c10d::ReduceOp::SUM:
      spec.kind = ReduceKind::kSum;
      break;
    case c10d::ReduceOp::AVG:
      if (isBool) {
        reject("an average of booleans is not a boolean");
      }
      spec.kind = ReduceKind::kSum;
      spec.divisor = worldSize;
      break;
    case c10d::ReduceOp::PRODUCT:
      spec.kind = ReduceKind::kProduct;
      break;
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      if (isComplex) {
        reject("complex numbers are not ordered");
      }
      spec.kind = type == c10d::ReduceOp::MIN ? ReduceKind::kMin : ReduceKind::kMax;
      break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (!isInteger && !isBool) {
        reject("bitwise operations need integer or bool tensors");
      }
      spec.kind = type == c10d::ReduceOp::BAND
          ? ReduceKind::kBand
          : (type == c10d::ReduceOp::BOR ? ReduceKind::kBor : ReduceKind::kBxor);
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      if (!isFloat && !isComplex) {
        reject("the pre-multiplication factor is a floating-point scalar");
      }
      // torch 2.11 names it NCCLPreMulSumSupplement; 2.13+ renamed it and kept this alias.
      const auto* supplement =
          dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK_VALUE(
          supplement != nullptr,
          "dummy ",
          collective,
          " (rank ",
          rank,
          "): ReduceOp.PREMUL_SUM needs a factor; make it with "
          "torch.distributed._make_nccl_premul_sum(factor)");
      spec.kind = ReduceKind::kSum;
      spec.premul = true;
      spec.factor = supplement->tensor_factor.defined()
          ? supplement->tensor_factor.item<double>()
          : supplement->double_factor;
      break;
    }
    default:
      reject("unknown reduce op");
  }
  return spec;
}

void reduceInto(
    const ReduceSpec& spec,
    void* out,
    const void* const* srcs,
    int count,
    int64_t numel,
    void* copy) {
  if (numel > 0) {
    variant().fn(spec, out, copy, srcs, count, numel);
  }
}

const char* reduceCapability() {
  return variant().name;
}

} // namespace dummy_collectives
