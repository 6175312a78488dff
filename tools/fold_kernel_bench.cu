// Times variants of the shared-GPU allreduce's fold (csrc/cuda/device_reduce.cu: every rank's
// tensor read, the sum written to every rank's tensor) against the copy bound: n ranks' fold
// moves what n device-to-device copies of the message move. A tool for choosing the kernel's
// shape on a GPU machine, not part of the build.
//   nvcc -O3 -std=c++17 -arch=sm_90 tools/fold_kernel_bench.cu -o /tmp/fold && /tmp/fold
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));         \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

constexpr int kMax = 8;
struct Ptrs {
  float4* p[kMax];
};

enum Cache { kDefault, kStreaming };

template <Cache C>
__device__ __forceinline__ float4 load(const float4* p) {
  if constexpr (C == kStreaming) {
    return __ldcs(p);
  } else {
    return *p;
  }
}

template <Cache C>
__device__ __forceinline__ void store(float4* p, float4 v) {
  if constexpr (C == kStreaming) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

// Grid-stride, U packs of 16 bytes in flight per thread per source (the shipped kernel's shape).
template <int U, Cache C>
__global__ void gridStride(Ptrs srcs, Ptrs outs, int count, long long packs) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < packs; i += U * stride) {
    float4 acc[U];
#pragma unroll
    for (int u = 0; u < U; ++u) acc[u] = load<C>(srcs.p[0] + i + u * stride);
    for (int k = 1; k < count; ++k) {
      float4 in[U];
#pragma unroll
      for (int u = 0; u < U; ++u) in[u] = load<C>(srcs.p[k] + i + u * stride);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        acc[u].x += in[u].x; acc[u].y += in[u].y; acc[u].z += in[u].z; acc[u].w += in[u].w;
      }
    }
    for (int o = 0; o < count; ++o) {
#pragma unroll
      for (int u = 0; u < U; ++u) store<C>(outs.p[o] + i + u * stride, acc[u]);
    }
  }
  for (; i < packs; i += stride) {
    float4 acc = load<C>(srcs.p[0] + i);
    for (int k = 1; k < count; ++k) {
      float4 in = load<C>(srcs.p[k] + i);
      acc.x += in.x; acc.y += in.y; acc.z += in.z; acc.w += in.w;
    }
    for (int o = 0; o < count; ++o) store<C>(outs.p[o] + i, acc);
  }
}

// Every source's loads issued before any add: count * U loads in flight (count known at compile
// time).
template <int N, int U, Cache C>
__global__ void allLoadsFirst(Ptrs srcs, Ptrs outs, long long packs) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < packs; i += U * stride) {
    float4 in[N][U];
#pragma unroll
    for (int k = 0; k < N; ++k)
#pragma unroll
      for (int u = 0; u < U; ++u) in[k][u] = load<C>(srcs.p[k] + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float4 acc = in[0][u];
#pragma unroll
      for (int k = 1; k < N; ++k) {
        acc.x += in[k][u].x; acc.y += in[k][u].y; acc.z += in[k][u].z; acc.w += in[k][u].w;
      }
#pragma unroll
      for (int o = 0; o < N; ++o) store<C>(outs.p[o] + i + u * stride, acc);
    }
  }
  for (; i < packs; i += stride) {
    float4 acc = load<C>(srcs.p[0] + i);
    for (int k = 1; k < N; ++k) {
      float4 in = load<C>(srcs.p[k] + i);
      acc.x += in.x; acc.y += in.y; acc.z += in.z; acc.w += in.w;
    }
    for (int o = 0; o < N; ++o) store<C>(outs.p[o] + i, acc);
  }
}

float timeIt(cudaStream_t s, int iters, const std::function<void()>& f) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i) f();
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaGetLastError());
  return ms * 1000.f / iters;  // us per call
}

// The host-side calls a shared-GPU allreduce makes per call on a rank that is not the leader,
// each timed alone (us per call, mean of 2000): what the gap between two folds is made of.
void hostCalls(cudaStream_t s) {
  void* buffer = nullptr;
  CHECK(cudaMalloc(&buffer, 64 << 20));
  cudaEvent_t event;
  CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess));
  CHECK(cudaEventRecord(event, s));
  CHECK(cudaStreamSynchronize(s));
  auto each = [](const char* name, const std::function<void()>& f) {
    constexpr int kCalls = 2000;
    f();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) f();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    std::printf("  %-40s %7.2f us\n", name, took.count() / kCalls);
  };
  std::printf("\nhost calls\n");
  each("cudaIpcGetMemHandle", [&] {
    cudaIpcMemHandle_t handle;
    CHECK(cudaIpcGetMemHandle(&handle, buffer));
  });
  each("cudaStreamSynchronize (idle stream)", [&] { CHECK(cudaStreamSynchronize(s)); });
  each("cudaEventQuery (completed)", [&] { CHECK(cudaEventQuery(event)); });
  each("cudaEventRecord", [&] { CHECK(cudaEventRecord(event, s)); });
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaEventDestroy(event));
  CHECK(cudaFree(buffer));
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  for (size_t bytes : {16ull << 20, 64ull << 20, 256ull << 20}) {
    for (int n : {2, 4}) {
      std::vector<float4*> bufs(n);
      for (auto& p : bufs) {
        CHECK(cudaMalloc(&p, bytes));
        CHECK(cudaMemset(p, 0, bytes));
      }
      float4* dst;
      CHECK(cudaMalloc(&dst, bytes));
      Ptrs ptrs{};
      for (int k = 0; k < n; ++k) ptrs.p[k] = bufs[k];
      const long long packs = bytes / 16;
      const int iters = bytes >= (256ull << 20) ? 10 : 30;
      const float copy = timeIt(s, iters, [&] {
        CHECK(cudaMemcpyAsync(dst, bufs[0], bytes, cudaMemcpyDeviceToDevice, s));
      });
      const float bound = n * copy;
      std::printf("\n%zu MiB, %d ranks: copy %.1f us (%.0f GB/s r+w), bound %.1f us\n",
                  bytes >> 20, n, copy, 2.0 * bytes / copy / 1e3, bound);
      auto report = [&](const char* name, int threads, long long blocks, float us) {
        std::printf("  %-34s threads %4d blocks %6lld  %7.1f us  %.2fx bound\n", name, threads,
                    blocks, us, us / bound);
      };
      for (int threads : {256, 512, 1024}) {
        for (int waves : {1, 2, 4, 8, 16}) {
          const long long perSm = 2048 / threads;
          const long long wave = (long long)sms * perSm * waves / 4;  // in quarters of a full wave
          const long long blocks = std::max(1LL, wave);
          float us = timeIt(s, iters, [&] {
            gridStride<4, kDefault><<<blocks, threads, 0, s>>>(ptrs, ptrs, n, packs);
          });
          char name[64];
          std::snprintf(name, sizeof name, "gridStride U4 waves/4=%d", waves);
          report(name, threads, blocks, us);
        }
      }
      const long long shipped = (long long)sms * 4;
      report("shipped U4 default", 512, shipped, timeIt(s, iters, [&] {
               gridStride<4, kDefault><<<shipped, 512, 0, s>>>(ptrs, ptrs, n, packs);
             }));
      report("U2 default", 512, shipped, timeIt(s, iters, [&] {
               gridStride<2, kDefault><<<shipped, 512, 0, s>>>(ptrs, ptrs, n, packs);
             }));
      report("U8 default", 512, shipped, timeIt(s, iters, [&] {
               gridStride<8, kDefault><<<shipped, 512, 0, s>>>(ptrs, ptrs, n, packs);
             }));
      report("U4 streaming", 512, shipped, timeIt(s, iters, [&] {
               gridStride<4, kStreaming><<<shipped, 512, 0, s>>>(ptrs, ptrs, n, packs);
             }));
      for (long long blocks : {shipped, shipped * 2, (long long)sms * 16}) {
        if (n == 2) {
          report("allLoadsFirst N2 U4 default", 512, blocks, timeIt(s, iters, [&] {
                   allLoadsFirst<2, 4, kDefault><<<blocks, 512, 0, s>>>(ptrs, ptrs, packs);
                 }));
          report("allLoadsFirst N2 U4 streaming", 512, blocks, timeIt(s, iters, [&] {
                   allLoadsFirst<2, 4, kStreaming><<<blocks, 512, 0, s>>>(ptrs, ptrs, packs);
                 }));
          report("allLoadsFirst N2 U2 default", 512, blocks, timeIt(s, iters, [&] {
                   allLoadsFirst<2, 2, kDefault><<<blocks, 512, 0, s>>>(ptrs, ptrs, packs);
                 }));
        } else {
          report("allLoadsFirst N4 U2 default", 512, blocks, timeIt(s, iters, [&] {
                   allLoadsFirst<4, 2, kDefault><<<blocks, 512, 0, s>>>(ptrs, ptrs, packs);
                 }));
          report("allLoadsFirst N4 U2 streaming", 512, blocks, timeIt(s, iters, [&] {
                   allLoadsFirst<4, 2, kStreaming><<<blocks, 512, 0, s>>>(ptrs, ptrs, packs);
                 }));
          report("allLoadsFirst N4 U4 default", 512, blocks, timeIt(s, iters, [&] {
                   allLoadsFirst<4, 4, kDefault><<<blocks, 512, 0, s>>>(ptrs, ptrs, packs);
                 }));
        }
      }
      for (auto p : bufs) CHECK(cudaFree(p));
      CHECK(cudaFree(dst));
    }
  }
  hostCalls(s);
  return 0;
}
