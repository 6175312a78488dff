// The CUDA reduction kernels: one grid-stride kernel per (dtype, fold operation), the sources
// passed by value (a peer's buffer is just another pointer once CUDA IPC has mapped it).
#include <dummy_collectives/cuda/device_reduce.hpp>

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
  void* out;
  void* copy;
  const void* const* srcs;
  int count;
  int64_t n;
  cudaStream_t stream;
};

template <typename T>
struct Sources {
  const T* ptr[kMaxDeviceSources];
};

// V elements moved as one 16-byte access when every pointer allows it (V == 1 otherwise).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, typename Op, Post kPost, int V>
__device__ __forceinline__ void foldPack(
    const Sources<T>& srcs,
    int count,
    T* out,
    T* copy,
    int64_t i, // index of the pack
    typename Accumulator<T>::type factor,
    typename Accumulator<T>::type divisor) {
  using A = typename Accumulator<T>::type;
  const Op op;
  A acc[V];
  Pack<T, V> in = reinterpret_cast<const Pack<T, V>*>(srcs.ptr[0])[i];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    acc[j] = static_cast<A>(in.v[j]);
    if constexpr (kPost == Post::kPremul) {
      acc[j] = acc[j] * factor;
    }
  }
  for (int k = 1; k < count; ++k) {
    in = reinterpret_cast<const Pack<T, V>*>(srcs.ptr[k])[i];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      A value = static_cast<A>(in.v[j]);
      if constexpr (kPost == Post::kPremul) {
        value = value * factor;
      }
      acc[j] = op(acc[j], value);
    }
  }
  Pack<T, V> result;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if constexpr (kPost == Post::kDivide) {
      acc[j] = acc[j] / divisor;
    }
    result.v[j] = static_cast<T>(acc[j]);
  }
  reinterpret_cast<Pack<T, V>*>(out)[i] = result;
  if (copy != nullptr) {
    reinterpret_cast<Pack<T, V>*>(copy)[i] = result;
  }
}

// Grid-stride over packs of V elements, then the tail element by element.
template <typename T, typename Op, Post kPost, int V>
__global__ void foldKernel(
    Sources<T> srcs,
    int count,
    T* out,
    T* copy,
    int64_t n,
    typename Accumulator<T>::type factor,
    typename Accumulator<T>::type divisor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / V;
  for (int64_t i = first; i < packs; i += stride) {
    foldPack<T, Op, kPost, V>(srcs, count, out, copy, i, factor, divisor);
  }
  if constexpr (V > 1) {
    for (int64_t i = packs * V + first; i < n; i += stride) {
      foldPack<T, Op, kPost, 1>(srcs, count, out, copy, i, factor, divisor);
    }
  }
}

template <typename T, typename Op, Post kPost>
void launch(const FoldCall& call) {
  const auto& [spec, out, copy, srcs, count, n, stream] = call;
  using A = typename Accumulator<T>::type;
  constexpr int kVector = sizeof(T) <= 16 ? static_cast<int>(16 / sizeof(T)) : 1;
  Sources<T> sources{};
  bool aligned = reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(copy) % 16 == 0;
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
  // Enough blocks to fill an H100 several times over; the loop strides past that.
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>((n / vector + kThreads - 1) / kThreads, 4096));
  auto* o = static_cast<T*>(out);
  auto* c = static_cast<T*>(copy);
  if (aligned) {
    foldKernel<T, Op, kPost, kVector><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        sources, count, o, c, n, factor, divisor);
  } else {
    foldKernel<T, Op, kPost, 1><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        sources, count, o, c, n, factor, divisor);
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
  TORCH_CHECK(count >= 1 && count <= kMaxDeviceSources, "dummy: bad CUDA reduction fan-in");
  if (numel == 0) {
    return;
  }
  switch (spec.dtype) {
#define DC_DEVICE_CASE(ctype, name)                                        \
  case c10::ScalarType::name:                                              \
    return launchTyped<ctype>(FoldCall{spec, out, copy, srcs, count, numel, stream});
    DC_FOR_EACH_REDUCIBLE_TYPE(DC_DEVICE_CASE)
#undef DC_DEVICE_CASE
    default:
      TORCH_CHECK(false, "dummy: no CUDA reduction for dtype ", spec.dtype);
  }
}

} // namespace dummy_collectives::cuda
