#include <dummy_collectives/algorithms.hpp>

#include <algorithm>
#include <cstring>

#include <c10/util/SmallVector.h>

namespace dummy_collectives::algorithms {
namespace {

using Pointers = c10::SmallVector<const void*, 16>;

std::byte* bytesOf(const at::Tensor& tensor) {
  return static_cast<std::byte*>(tensor.data_ptr());
}

int64_t ceilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Part r of a chunk of m elements split among `parts` ranks, cut on 64-byte boundaries so no
// two ranks write the same cache line.
std::pair<int64_t, int64_t> partOf(int r, int parts, int64_t m, size_t elementSize) {
  const int64_t align = std::max<int64_t>(1, 64 / static_cast<int64_t>(elementSize));
  const int64_t per = ceilDiv(ceilDiv(m, parts), align) * align;
  const int64_t lo = std::min(m, r * per);
  return {lo, std::min(m, lo + per)};
}

// Streams `bytes` of this rank's data through the slots, chunk by chunk; after each exchange
// `consume(r, offset, from, length)` reads rank r's chunk. At least one exchange even for 0 bytes.
template <typename Produce, typename Consume>
void streamChunks(Transport& t, size_t bytes, size_t granule, Produce produce, Consume consume) {
  const size_t chunk = std::max(granule, t.slotBytes() / granule * granule);
  size_t offset = 0;
  do {
    const size_t length = std::min(chunk, bytes - offset);
    produce(t.writeSlot(), offset, length);
    t.exchange();
    for (int r = 0; r < t.size(); ++r) {
      consume(r, offset, t.readSlot(r), length);
    }
    offset += length;
  } while (offset < bytes);
}

} // namespace

void allreduce(Transport& t, at::Tensor& data, const ReduceSpec& spec, size_t oneShotMaxBytes) {
  const size_t es = data.element_size();
  const int64_t n = data.numel();
  const size_t bytes = static_cast<size_t>(n) * es;
  const int ws = t.size();
  std::byte* base = bytesOf(data);
  Pointers srcs(ws);

  if (bytes <= oneShotMaxBytes && bytes <= t.slotBytes()) {
    if (bytes > 0) {
      std::memcpy(t.writeSlot(), base, bytes);
    }
    t.exchange();
    for (int r = 0; r < ws; ++r) {
      srcs[r] = t.readSlot(r);
    }
    reduceInto(spec, base, srcs.data(), ws, n);
    return;
  }

  const int64_t chunkElems = static_cast<int64_t>(t.slotBytes() / es);
  for (int64_t off = 0; off < n; off += chunkElems) {
    const int64_t m = std::min(chunkElems, n - off);
    std::byte* chunk = base + off * es;
    std::memcpy(t.writeSlot(), chunk, m * es);
    t.exchange();
    // Reduce-scatter: this rank folds its part of every rank's chunk into its next slot...
    const auto [lo, hi] = partOf(t.rank(), ws, m, es);
    for (int r = 0; r < ws; ++r) {
      srcs[r] = static_cast<const std::byte*>(t.readSlot(r)) + lo * es;
    }
    reduceInto(spec, static_cast<std::byte*>(t.writeSlot()) + lo * es, srcs.data(), ws, hi - lo);
    t.exchange();
    // ...all-gather: every rank copies every reduced part out.
    for (int r = 0; r < ws; ++r) {
      const auto [plo, phi] = partOf(r, ws, m, es);
      if (phi > plo) {
        std::memcpy(
            chunk + plo * es,
            static_cast<const std::byte*>(t.readSlot(r)) + plo * es,
            (phi - plo) * es);
      }
    }
  }
}

namespace {

template <typename Destination>
void gatherInto(Transport& t, const at::Tensor& input, Destination destination) {
  const size_t es = input.element_size();
  const size_t bytes = static_cast<size_t>(input.numel()) * es;
  const std::byte* in = bytesOf(input);
  streamChunks(
      t,
      bytes,
      es,
      [&](void* slot, size_t offset, size_t length) {
        if (length > 0) {
          std::memcpy(slot, in + offset, length);
        }
      },
      [&](int r, size_t offset, const void* from, size_t length) {
        if (length > 0) {
          // Our own part comes from our input: it is already in cache.
          std::memcpy(destination(r) + offset, r == t.rank() ? in + offset : from, length);
        }
      });
}

} // namespace

void allgather(Transport& t, const at::Tensor& input, std::vector<at::Tensor>& outputs) {
  gatherInto(t, input, [&](int r) { return bytesOf(outputs[r]); });
}

void allgatherInto(Transport& t, const at::Tensor& input, at::Tensor& output) {
  const size_t bytes = static_cast<size_t>(input.numel()) * input.element_size();
  std::byte* out = bytesOf(output);
  gatherInto(t, input, [&](int r) { return out + static_cast<size_t>(r) * bytes; });
}

void broadcast(Transport& t, at::Tensor& data, int root) {
  const bool isRoot = t.rank() == root;
  std::byte* base = bytesOf(data);
  streamChunks(
      t,
      static_cast<size_t>(data.numel()) * data.element_size(),
      data.element_size(),
      [&](void* slot, size_t offset, size_t length) {
        if (isRoot && length > 0) {
          std::memcpy(slot, base + offset, length);
        }
      },
      [&](int r, size_t offset, const void* from, size_t length) {
        if (r == root && !isRoot && length > 0) {
          std::memcpy(base + offset, from, length);
        }
      });
}

void barrier(Transport& t) {
  t.exchange();
}

} // namespace dummy_collectives::algorithms
