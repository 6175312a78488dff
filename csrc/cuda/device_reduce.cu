// The CUDA reduction kernels: one grid-stride kernel per (dtype, fold operation), the sources
// passed by value (a peer's buffer is just another pointer once CUDA IPC has mapped it).
#include "cuda/device_reduce.hpp"

#include <algorithm>
#include <cstdint>

#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

namespace dummy_collectives::cuda {
namespace {

using reduce_ops::Accumulator;
using reduce_ops::Post;

// One launchReduce() call's arguments, passed down the dispatch as one.
struct FoldCall {
  const ReduceSpec& spec;
  void* const* outs;
  int outCount;
  const void* const* srcs;
  int count;
  int64_t n;
  cudaStream_t stream;
};

template <typename T>
struct Sources {
  const T* ptr[kMaxDeviceSources];
};

template <typename T>
struct Outputs {
  T* ptr[kMaxDeviceSources];
};

// V elements moved as one 16-byte access when every pointer allows it (V == 1 otherwise).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Folds U packs of V elements, at i, i + stride, ..., i + (U - 1) * stride: each source's U
// loads are issued together, so a thread keeps U accesses in flight (one is not enough to
// reach the memory bandwidth of an H100).
template <typename T, typename Op, Post kPost, int V, int U>
__device__ __forceinline__ void foldPacks(
    const Sources<T>& srcs,
    int count,
    const Outputs<T>& outs,
    int outCount,
    int64_t i,
    int64_t stride,
    typename Accumulator<T>::type factor,
    typename Accumulator<T>::type divisor) {
  using A = typename Accumulator<T>::type;
  using P = Pack<T, V>;
  const Op op;
  A acc[U][V];
  P in[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    in[u] = reinterpret_cast<const P*>(srcs.ptr[0])[i + u * stride];
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      acc[u][j] = static_cast<A>(in[u].v[j]);
      if constexpr (kPost == Post::kPremul) {
        acc[u][j] = acc[u][j] * factor;
      }
    }
  }
  for (int k = 1; k < count; ++k) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      in[u] = reinterpret_cast<const P*>(srcs.ptr[k])[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        A value = static_cast<A>(in[u].v[j]);
        if constexpr (kPost == Post::kPremul) {
          value = value * factor;
        }
        acc[u][j] = op(acc[u][j], value);
      }
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    P result;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if constexpr (kPost == Post::kDivide) {
        acc[u][j] = acc[u][j] / divisor;
      }
      result.v[j] = static_cast<T>(acc[u][j]);
    }
    for (int o = 0; o < outCount; ++o) {
      reinterpret_cast<P*>(outs.ptr[o])[i + u * stride] = result;
    }
  }
}

// Grid-stride over packs of V elements, kUnroll packs per thread per pass while whole passes
// fit, then single packs, then the tail element by element.
constexpr int kUnroll = 4;

template <typename T, typename Op, Post kPost, int V>
__global__ void foldKernel(
    Sources<T> srcs,
    int count,
    Outputs<T> outs,
    int outCount,
    int64_t n,
    typename Accumulator<T>::type factor,
    typename Accumulator<T>::type divisor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / V;
  int64_t i = first;
  for (; i + (kUnroll - 1) * stride < packs; i += kUnroll * stride) {
    foldPacks<T, Op, kPost, V, kUnroll>(srcs, count, outs, outCount, i, stride, factor, divisor);
  }
  for (; i < packs; i += stride) {
    foldPacks<T, Op, kPost, V, 1>(srcs, count, outs, outCount, i, stride, factor, divisor);
  }
  if constexpr (V > 1) {
    for (int64_t e = packs * V + first; e < n; e += stride) {
      foldPacks<T, Op, kPost, 1, 1>(srcs, count, outs, outCount, e, stride, factor, divisor);
    }
  }
}

template <typename T, typename Op, Post kPost>
void launch(const FoldCall& call) {
  const auto& [spec, outs, outCount, srcs, count, n, stream] = call;
  using A = typename Accumulator<T>::type;
  constexpr int kVector = sizeof(T) <= 16 ? static_cast<int>(16 / sizeof(T)) : 1;
  Sources<T> sources{};
  Outputs<T> outputs{};
  bool aligned = true;
  for (int o = 0; o < outCount; ++o) {
    outputs.ptr[o] = static_cast<T*>(outs[o]);
    aligned = aligned && reinterpret_cast<uintptr_t>(outs[o]) % 16 == 0;
  }
  for (int k = 0; k < count; ++k) {
    sources.ptr[k] = static_cast<const T*>(srcs[k]);
    aligned = aligned && reinterpret_cast<uintptr_t>(srcs[k]) % 16 == 0;
  }
  A factor{};
  A divisor{};
  if constexpr (kPost == Post::kPremul) {
    factor = static_cast<A>(spec.factor);
  }
  if constexpr (kPost == Post::kDivide) {
    divisor = static_cast<A>(spec.divisor);
  }
  constexpr int kThreads = 512;
  const int vector = aligned ? kVector : 1;
  // One wave of blocks (2048 resident threads per SM), each thread folding kUnroll packs per
  // pass; the loop strides past that.
  const int64_t perBlock = static_cast<int64_t>(kThreads) * kUnroll * vector;
  int device = 0;
  int processors = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device));
  const int64_t wave = static_cast<int64_t>(processors) * 4;
  const int64_t blocks = std::max<int64_t>(1, std::min((n + perBlock - 1) / perBlock, wave));
  if (aligned) {
    foldKernel<T, Op, kPost, kVector><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        sources, count, outputs, outCount, n, factor, divisor);
  } else {
    foldKernel<T, Op, kPost, 1><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        sources, count, outputs, outCount, n, factor, divisor);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The CPU kernel's dispatch (reduce_loops.inc: reduceTyped), for the device.
template <typename T>
void launchTyped(const FoldCall& call) {
  using namespace reduce_ops;
  const ReduceSpec& spec = call.spec;
  constexpr bool kComplex = c10::is_complex<T>::value;
  constexpr bool kBitwise = std::is_integral_v<T>; // includes bool
  constexpr bool kBool = std::is_same_v<T, bool>;
  switch (spec.kind) {
    case ReduceKind::kSum:
      if (spec.premul) {
        if constexpr (!kBool) {
          return launch<T, Sum, Post::kPremul>(call);
        }
      } else if (spec.divisor != 1) {
        if constexpr (!kBool) {
          return launch<T, Sum, Post::kDivide>(call);
        }
      } else {
        return launch<T, Sum, Post::kNone>(call);
      }
      break;
    case ReduceKind::kProduct:
      return launch<T, Product, Post::kNone>(call);
    case ReduceKind::kMin:
      if constexpr (!kComplex) {
        return launch<T, Min, Post::kNone>(call);
      }
      break;
    case ReduceKind::kMax:
      if constexpr (!kComplex) {
        return launch<T, Max, Post::kNone>(call);
      }
      break;
    case ReduceKind::kBand:
      if constexpr (kBitwise) {
        return launch<T, BitAnd, Post::kNone>(call);
      }
      break;
    case ReduceKind::kBor:
      if constexpr (kBitwise) {
        return launch<T, BitOr, Post::kNone>(call);
      }
      break;
    case ReduceKind::kBxor:
      if constexpr (kBitwise) {
        return launch<T, BitXor, Post::kNone>(call);
      }
      break;
  }
  TORCH_CHECK(false, "dummy: no CUDA reduction for this operation and dtype");
}

} // namespace

void launchReduce(
    const ReduceSpec& spec,
    void* out,
    void* copy,
    const void* const* srcs,
    int count,
    int64_t numel,
    cudaStream_t stream) {
  void* outs[2] = {out, copy};
  launchReduceInto(spec, outs, copy == nullptr ? 1 : 2, srcs, count, numel, stream);
}

void launchReduceInto(
    const ReduceSpec& spec,
    void* const* outs,
    int outCount,
    const void* const* srcs,
    int count,
    int64_t numel,
    cudaStream_t stream) {
  TORCH_CHECK(count >= 1 && count <= kMaxDeviceSources, "dummy: bad CUDA reduction fan-in");
  TORCH_CHECK(
      outCount >= 1 && outCount <= kMaxDeviceSources, "dummy: bad CUDA reduction fan-out");
  if (numel == 0) {
    return;
  }
  switch (spec.dtype) {
#define DC_DEVICE_CASE(ctype, name)                                        \
  case c10::ScalarType::name:                                              \
    return launchTyped<ctype>(FoldCall{spec, outs, outCount, srcs, count, numel, stream});
    DC_FOR_EACH_REDUCIBLE_TYPE(DC_DEVICE_CASE)
#undef DC_DEVICE_CASE
    default:
      TORCH_CHECK(false, "dummy: no CUDA reduction for dtype ", spec.dtype);
  }
}

} // namespace dummy_collectives::cuda
