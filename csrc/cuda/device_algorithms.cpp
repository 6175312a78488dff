#include "cuda/device_algorithms.hpp"

#include <algorithm>

#include <c10/cuda/CUDAException.h>
#include <c10/util/StringUtil.h>

#include "cuda/device_reduce.hpp"
#include "cuda/peer_memory.hpp"

namespace dummy_collectives::cuda {
namespace {

void copyAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes != 0 && dst != src) {
    // cudaMemcpyDefault: a peer's buffer may live on another GPU (unified addressing).
    C10_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  }
}

char* bytes(const at::Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

} // namespace

void allreduce(CudaIpcTransport& dev, Transport& host, at::Tensor& tensor, const ReduceSpec& spec) {
  const int ws = dev.size();
  const int64_t n = tensor.numel();
  const size_t es = tensor.element_size();
  char* data = bytes(tensor);
  if (ws == 1) {
    // Nothing to exchange; PREMUL_SUM still scales (AVG divides by one).
    if (spec.premul) {
      const void* src = data;
      launchReduce(spec, data, nullptr, &src, 1, n, dev.stream());
    }
    return;
  }
  const bool oneShot = ws <= 2 || static_cast<size_t>(n) * es <= kDeviceOneShotMaxBytes;
  const int64_t chunk = static_cast<int64_t>(dev.bufferBytes() / es);
  const void* srcs[kMaxDeviceSources];
  for (int64_t off = 0; off < n; off += chunk) {
    const int64_t m = std::min(chunk, n - off);
    const int b = dev.nextBuffer();
    copyAsync(dev.buffer(dev.rank(), b), data + off * es, m * es, dev.stream());
    dev.step(host);
    if (oneShot) {
      // Every rank folds all chunks in rank order: bit-identical results everywhere.
      for (int r = 0; r < ws; ++r) {
        srcs[r] = dev.buffer(r, b);
      }
      launchReduce(spec, data + off * es, nullptr, srcs, ws, m, dev.stream());
      continue;
    }
    // Reduce-scatter: rank r folds part r of the chunk, into its output and its own buffer...
    // Parts of whole 16-element groups keep every part 16-byte aligned (vector loads).
    const int64_t part = ((m + ws - 1) / ws + 15) / 16 * 16;
    auto lo = [&](int r) { return std::min<int64_t>(r * part, m); };
    auto hi = [&](int r) { return std::min<int64_t>((r + 1) * part, m); };
    const int me = dev.rank();
    for (int r = 0; r < ws; ++r) {
      srcs[r] = dev.buffer(r, b) + lo(me) * es;
    }
    launchReduce(
        spec, data + (off + lo(me)) * es, dev.buffer(me, b) + lo(me) * es, srcs, ws,
        hi(me) - lo(me), dev.stream());
    dev.step(host);
    // ...then all-gather: every other part from the rank that folded it.
    for (int r = 0; r < ws; ++r) {
      if (r != me) {
        copyAsync(
            data + (off + lo(r)) * es, dev.buffer(r, b) + lo(r) * es, (hi(r) - lo(r)) * es,
            dev.stream());
      }
    }
  }
}

bool allreduceOnSharedGpu(
    CudaIpcTransport& dev,
    Transport& host,
    at::Tensor& tensor,
    const ReduceSpec& spec) {
  const int ws = dev.size();
  const int me = dev.rank();
  static_assert(sizeof(MemoryExport) <= 4096, "a MemoryExport travels in one host slot");
  auto* mine = static_cast<MemoryExport*>(host.writeSlot());
  if (me == kSharedGpuLeader) {
    *mine = MemoryExport{};
    mine->exported = 1; // its own tensor: nothing to export
  } else {
    *mine = exportMemory(tensor);
  }
  host.exchange();
  for (int r = 0; r < ws; ++r) {
    if (static_cast<const MemoryExport*>(host.readSlot(r))->exported == 0) {
      return false; // every rank reads the same slots: all fall back together
    }
  }
  if (me == kSharedGpuLeader) {
    try {
      void* tensors[kMaxDeviceSources];
      for (int r = 0; r < ws; ++r) {
        tensors[r] = r == me
            ? bytes(tensor)
            : dev.peerMemory().open(*static_cast<const MemoryExport*>(host.readSlot(r)));
      }
      // Rank order, as everywhere: every rank's result is the same bits.
      launchReduceInto(spec, tensors, ws, tensors, ws, tensor.numel(), dev.stream());
    } catch (const std::exception& e) {
      // The others wait for our signal: fail them now, with our reason, not at their timeout.
      host.abort(c10::str("rank ", me, " could not run the shared-GPU allreduce: ", e.what()));
      throw;
    }
  }
  dev.signal(kSharedGpuLeader, host);
  return true;
}

void broadcast(CudaIpcTransport& dev, Transport& host, at::Tensor& tensor, int root) {
  if (dev.size() == 1) {
    return;
  }
  const int64_t n = tensor.numel();
  const size_t es = tensor.element_size();
  const int64_t chunk = static_cast<int64_t>(dev.bufferBytes() / es);
  char* data = bytes(tensor);
  for (int64_t off = 0; off < n; off += chunk) {
    const int64_t m = std::min(chunk, n - off);
    const int b = dev.nextBuffer();
    if (dev.rank() == root) {
      copyAsync(dev.buffer(root, b), data + off * es, m * es, dev.stream());
    }
    dev.step(host);
    if (dev.rank() != root) {
      copyAsync(data + off * es, dev.buffer(root, b), m * es, dev.stream());
    }
  }
}

void allgatherBase(
    CudaIpcTransport& dev,
    Transport& host,
    at::Tensor& output,
    const at::Tensor& input) {
  const int ws = dev.size();
  const int64_t n = input.numel();
  const size_t es = input.element_size();
  const int64_t chunk = static_cast<int64_t>(dev.bufferBytes() / es);
  const char* in = bytes(input);
  char* out = bytes(output);
  copyAsync(out + dev.rank() * n * es, in, n * es, dev.stream());
  if (ws == 1) {
    return;
  }
  for (int64_t off = 0; off < n; off += chunk) {
    const int64_t m = std::min(chunk, n - off);
    const int b = dev.nextBuffer();
    copyAsync(dev.buffer(dev.rank(), b), in + off * es, m * es, dev.stream());
    dev.step(host);
    for (int r = 0; r < ws; ++r) {
      if (r != dev.rank()) {
        copyAsync(out + (r * n + off) * es, dev.buffer(r, b), m * es, dev.stream());
      }
    }
  }
}

void reduceScatterBase(
    CudaIpcTransport& dev,
    Transport& host,
    at::Tensor& output,
    const at::Tensor& input,
    const ReduceSpec& spec) {
  const int ws = dev.size();
  const int64_t n = output.numel();
  const size_t es = output.element_size();
  const char* in = bytes(input);
  char* out = bytes(output);
  if (ws == 1) {
    const void* src = in;
    launchReduce(spec, out, nullptr, &src, 1, n, dev.stream());
    return;
  }
  // A chunk holds the same stretch of every rank's part, so each rank folds its part from ws
  // peers' buffers at one offset.
  const int64_t chunk = static_cast<int64_t>(dev.bufferBytes() / (es * ws));
  TORCH_CHECK(chunk > 0, "dummy: CUDA staging buffer too small for ", ws, " ranks");
  const void* srcs[kMaxDeviceSources];
  for (int64_t off = 0; off < n; off += chunk) {
    const int64_t m = std::min(chunk, n - off);
    const int b = dev.nextBuffer();
    // ws rows of m elements, from rows of n: one strided copy.
    C10_CUDA_CHECK(cudaMemcpy2DAsync(
        dev.buffer(dev.rank(), b), m * es, in + off * es, n * es, m * es, ws,
        cudaMemcpyDefault, dev.stream()));
    dev.step(host);
    for (int r = 0; r < ws; ++r) {
      srcs[r] = dev.buffer(r, b) + dev.rank() * m * es;
    }
    launchReduce(spec, out + off * es, nullptr, srcs, ws, m, dev.stream());
  }
}

} // namespace dummy_collectives::cuda
