#pragma once

// What the two-level algorithms share: byte views, the reduction specs of each level, folds, and
// how a pipeline cuts a message into chunks.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <dummy_collectives/debug_log.hpp>
#include "hierarchy/agreement.hpp"
#include "hierarchy/levels.hpp"
#include "hierarchy/pipeline.hpp"
#include "hierarchy/two_level.hpp"
#include "kernels/reduce_kernel.hpp"

namespace dummy_collectives::hierarchy::two_level {

inline int64_t ceilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

inline int64_t roundUp(int64_t a, int64_t b) {
  return ceilDiv(a, b) * b;
}

inline std::byte* bytePtr(const at::Tensor& t) {
  return static_cast<std::byte*>(t.data_ptr());
}

// `data` (contiguous) zero-padded to `numel` elements. memcpy and memset, not ATen's zeros and
// copy_: ATen parallelizes large fills and copies with OpenMP, whose threads then spin for a
// while; where ranks share cores (torchrun leaves OMP_NUM_THREADS unset for one rank per host)
// that starved gloo's network thread (inter_host/engine.cpp, copiesOf).
inline at::Tensor paddedCopy(const at::Tensor& data, int64_t numel) {
  at::Tensor padded = at::empty({numel}, data.options());
  const size_t bytes = static_cast<size_t>(data.numel()) * data.element_size();
  auto* out = static_cast<std::byte*>(padded.data_ptr());
  if (bytes > 0) {
    std::memcpy(out, data.data_ptr(), bytes);
  }
  std::memset(out + bytes, 0, static_cast<size_t>(numel) * data.element_size() - bytes);
  return padded;
}

inline ByteView viewOf(const at::Tensor& t) {
  return {bytePtr(t), static_cast<size_t>(t.numel()) * t.element_size()};
}

// The in-host stage reduces with the collective's own operation, except AVG: the hosts' sums are
// added across hosts and divided once, by the whole group's size (crossSpec).
inline ReduceSpec hostSpec(ReduceSpec spec) {
  spec.divisor = 1;
  return spec;
}
// Across hosts the values are already premultiplied (PREMUL_SUM) by the in-host stage.
inline ReduceSpec crossSpec(ReduceSpec spec) {
  spec.premul = false;
  spec.factor = 1.0;
  return spec;
}

// Folds `count` sources of `numel` elements each (in source order) into `out`.
inline void fold(const ReduceSpec& spec, void* out, const std::vector<const void*>& srcs, int64_t numel) {
  reduceInto(spec, out, srcs.data(), static_cast<int>(srcs.size()), numel);
}

inline Bytes foldPayloads(const ReduceSpec& spec, const std::vector<ByteView>& payloads, size_t bytes,
                   int64_t numel) {
  Bytes out(bytes);
  std::vector<const void*> srcs;
  for (const auto& p : payloads) {
    TORCH_CHECK(p.size == bytes, "dummy_collectives: a payload of ", p.size, " bytes, not ", bytes);
    srcs.push_back(p.data);
  }
  fold(spec, out.data(), srcs, numel);
  return out;
}

// The payloads one after the other: an all-gather's combination (agreement.hpp, Combine).
inline Bytes concatenated(const std::vector<ByteView>& payloads) {
  Bytes all;
  for (const auto& p : payloads) {
    all.insert(all.end(), p.data, p.data + p.size);
  }
  return all;
}

inline Pending waitEngine(const InterHostEngine& engine, const OpContext& ctx,
                   c10::intrusive_ptr<c10d::Work> w) {
  return [&engine, &ctx, w = std::move(w)] { engine.wait(w, ctx); };
}

// How a message of `numel` elements is cut into pipeline chunks whose element counts are
// multiples of `granule` (every in-host and cross-host part is then whole). The last chunk may
// need padding up to a granule: it then works on a zeroed copy (the padding's results are
// never read back). `scale`: how many times the message a chunk moves (an all-gather's chunk of
// its input moves it from every rank), so the byte limits apply to what moves.
struct Chunking {
  int64_t numel;
  int64_t granule;
  int64_t chunk; // elements per chunk (a multiple of granule)
  int count;

  Chunking(
      int64_t numel_,
      int64_t granule_,
      const HierarchySettings& settings,
      size_t elementSize,
      size_t scale = 1,
      bool wholeChunks = false)
      : numel(numel_), granule(granule_) {
    const size_t most = std::max<size_t>(1, settings.chunkBytes / scale);
    // wholeChunks: chunks of the most bytes, however few (a stage cheap beside the link's has
    // nothing to hide, and each chunk costs the engine an operation).
    const size_t least =
        wholeChunks ? most : std::min(most, std::max<size_t>(1, settings.minChunkBytes / scale));
    const size_t bytes = static_cast<size_t>(numel) * elementSize;
    const size_t wanted = std::clamp(bytes / kMinChunks, least, most);
    const auto elements = static_cast<int64_t>(wanted / std::max<size_t>(1, elementSize));
    chunk = std::max(granule, elements / granule * granule);
    count = static_cast<int>(std::max<int64_t>(1, ceilDiv(numel, chunk)));
    debug_log::note("pipelined, chunks ", count);
  }
  int64_t begin(int c) const {
    return std::min(numel, c * chunk);
  }
  int64_t length(int c) const {
    return std::min(numel, begin(c) + chunk) - begin(c);
  }
  int64_t padded(int c) const {
    return std::max(granule, roundUp(length(c), granule));
  }
};

// Chunk c of flat `data` as a pipeline works on it: a view where the chunk is whole granules,
// else a zero-padded copy that finish() copies back.
struct ChunkBuffer {
  at::Tensor data; // the user's chunk (a view)
  at::Tensor work; // what the stages read and write
  ChunkBuffer() = default;
  ChunkBuffer(const at::Tensor& flat, const Chunking& plan, int c, bool copyIn) {
    data = flat.narrow(0, plan.begin(c), plan.length(c));
    if (plan.padded(c) == plan.length(c)) {
      work = data;
    } else {
      work = paddedCopy(copyIn ? data : data.narrow(0, 0, 0), plan.padded(c));
    }
  }
  void finish() const {
    if (!work.is_same(data)) {
      std::memcpy(data.data_ptr(), work.data_ptr(), data.numel() * data.element_size());
    }
  }
};

// 64 bytes of elements: parts cut on cache-line boundaries fold at full speed.
inline int64_t lineElements(size_t elementSize) {
  return std::max<int64_t>(1, 64 / static_cast<int64_t>(elementSize));
}

// `hostOrdered` holds every rank's `bytes`, host by host, each host's in local rank order;
// rank r's go to block r of `out`.
inline void placeByRank(
    const Topology& topology, const std::byte* hostOrdered, at::Tensor& out, int64_t bytes) {
  if (bytes == 0) {
    return;
  }
  for (int h = 0; h < topology.hostCount(); ++h) {
    for (const int rank : topology.ranksOn(h)) {
      std::memcpy(bytePtr(out) + rank * bytes, hostOrdered, static_cast<size_t>(bytes));
      hostOrdered += bytes;
    }
  }
}

// The same from a tensor in any memory: memcpy for host memory, copies queued on the current
// stream for device memory.
inline void placeByRank(
    const Topology& topology, const at::Tensor& hostOrdered, at::Tensor& out, int64_t bytes) {
  if (hostOrdered.is_cpu()) {
    placeByRank(topology, bytePtr(hostOrdered), out, bytes);
    return;
  }
  at::Tensor outBytes = bytesOf(out);
  int64_t at = 0;
  for (int h = 0; h < topology.hostCount(); ++h) {
    for (const int rank : topology.ranksOn(h)) {
      outBytes.narrow(0, rank * bytes, bytes).copy_(hostOrdered.narrow(0, at, bytes));
      at += bytes;
    }
  }
}

// Whether ranks are numbered host by host (each host's ranks in a row, hosts in order): every
// host's inputs are then one block of the output, in place.
inline bool hostOrderIsRankOrder(const Topology& topology) {
  int next = 0;
  for (int h = 0; h < topology.hostCount(); ++h) {
    for (const int rank : topology.ranksOn(h)) {
      if (rank != next++) {
        return false;
      }
    }
  }
  return true;
}

} // namespace dummy_collectives::hierarchy::two_level
