#include "shm/algorithms.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <c10/util/StringUtil.h>

#include <dummy_collectives/debug_log.hpp>

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

// Splits `count` elements into up to min(pool.threads(), maxPieces) pieces (64-byte aligned, at
// least kMinBytesPerThread each) and runs fn(piece, lo, hi) for each on the pool; small ranges
// and single-thread pools run fn(0, 0, count) on the caller. An exception in any piece is raised
// on the caller once all pieces are done.
constexpr size_t kMinBytesPerThread = size_t{64} << 10;

template <typename Fn>
void parallelRange(
    WorkerPool& pool,
    int64_t count,
    size_t es,
    Fn&& fn,
    int maxPieces = std::numeric_limits<int>::max()) {
  const auto bytes = static_cast<size_t>(count) * es;
  const int pieces = static_cast<int>(std::min<size_t>(
      std::min(pool.threads(), maxPieces), std::max<size_t>(1, bytes / kMinBytesPerThread)));
  if (pieces <= 1) {
    fn(0, int64_t{0}, count);
    return;
  }
  std::mutex errorMutex;
  std::exception_ptr error;
  pool.run([&](int piece) {
    if (piece >= pieces) {
      return;
    }
    const auto [lo, hi] = partOf(piece, pieces, count, es);
    if (hi > lo) {
      try {
        fn(piece, lo, hi);
      } catch (...) {
        std::lock_guard<std::mutex> lock(errorMutex);
        if (!error) {
          error = std::current_exception();
        }
      }
    }
  });
  if (error) {
    std::rethrow_exception(error);
  }
}

// Positions [0, m) less this rank's part [lo, hi), split evenly as one range over the pool;
// fn(x, y) gets ranges of real positions.
template <typename Fn>
void outsidePart(WorkerPool& pool, int64_t m, int64_t lo, int64_t hi, size_t es, Fn&& fn) {
  const int64_t skip = hi - lo;
  parallelRange(pool, m - skip, es, [&](int, int64_t a, int64_t b) {
    if (a < lo) {
      fn(a, std::min(b, lo));
    }
    if (b > lo) {
      fn(std::max(a, lo) + skip, b + skip);
    }
  });
}

} // namespace

namespace {

// The reduction pipeline behind allreduce (root < 0: every rank receives) and reduce.
//
// A rank's own data never needs to travel for its own part: only the parts other ranks reduce
// are copied into the slot, the own part is reduced straight from the user's buffer, and its
// result goes to the user's buffer and (for the others) the next slot in the same pass. That
// is about two copies' worth of memory traffic per byte instead of three.
void reduceImpl(
    Transport& t,
    at::Tensor& data,
    const ReduceSpec& spec,
    int root,
    size_t oneShotMaxBytes,
    WorkerPool& workers) {
  const bool receives = root < 0 || root == t.rank();
  const size_t es = data.element_size();
  const int64_t n = data.numel();
  const size_t bytes = static_cast<size_t>(n) * es;
  const int ws = t.size();
  const int me = t.rank();
  std::byte* base = bytesOf(data);
  Pointers srcs(ws);

  if (bytes <= oneShotMaxBytes && bytes <= t.slotBytes()) {
    debug_log::note("one-shot");
    if (bytes > 0 && ws > 1) {
      std::memcpy(t.writeSlot(), base, bytes);
    }
    t.exchange();
    if (receives) {
      for (int r = 0; r < ws; ++r) {
        srcs[r] = r == me ? base : t.readSlot(r); // same bytes; ours is already in cache
      }
      reduceInto(spec, base, srcs.data(), ws, n);
    }
    return;
  }

  const int64_t chunkElems = static_cast<int64_t>(t.slotBytes() / es);
  debug_log::note(
      root < 0 ? "reduce-scatter + all-gather" : "reduce-scatter + gather", ", slot chunks ",
      (n + chunkElems - 1) / chunkElems, ", threads ", workers.threads());
  // Each piece of a fold split over the workers needs its own source pointers.
  std::vector<Pointers> pieceSrcs(workers.threads(), Pointers(ws));
  for (int64_t off = 0; off < n; off += chunkElems) {
    const int64_t m = std::min(chunkElems, n - off);
    std::byte* chunk = base + off * es;
    const auto [lo, hi] = partOf(me, ws, m, es);
    auto* slot = static_cast<std::byte*>(t.writeSlot());
    outsidePart(workers, m, lo, hi, es, [&](int64_t x, int64_t y) {
      std::memcpy(slot + x * es, chunk + x * es, (y - x) * es);
    });
    t.exchange();
    // Reduce-scatter: fold part `me` of every rank's chunk (ours from the user's buffer).
    auto* next = static_cast<std::byte*>(t.writeSlot());
    parallelRange(workers, hi - lo, es, [&](int piece, int64_t a, int64_t b) {
      const int64_t pos = lo + a;
      Pointers& from = pieceSrcs[piece];
      for (int r = 0; r < ws; ++r) {
        from[r] =
            r == me ? chunk + pos * es : static_cast<const std::byte*>(t.readSlot(r)) + pos * es;
      }
      if (receives) {
        reduceInto(spec, chunk + pos * es, from.data(), ws, b - a, next + pos * es);
      } else {
        reduceInto(spec, next + pos * es, from.data(), ws, b - a);
      }
    });
    t.exchange();
    // All-gather: every receiving rank copies the other ranks' reduced parts out.
    if (receives) {
      outsidePart(workers, m, lo, hi, es, [&](int64_t x, int64_t y) {
        for (int r = 0; r < ws; ++r) {
          const auto [plo, phi] = partOf(r, ws, m, es);
          const int64_t a = std::max(x, plo);
          const int64_t b = std::min(y, phi);
          if (r != me && b > a) {
            std::memcpy(
                chunk + a * es,
                static_cast<const std::byte*>(t.readSlot(r)) + a * es,
                (b - a) * es);
          }
        }
      });
    }
  }
}

} // namespace

namespace {

// Largest piece of one peer's part read at a time: the pieces of all peers, the fold over them
// and its result, written back to the peers, stay in the core's L2 cache.
constexpr size_t kPeerPieceBytes = size_t{256} << 10;

// Whether a collective of `bytes` (per rank, received) reaches the peers directly. All ranks
// decide alike: sizes match (the descriptor check), the window is checked at connect.
bool usePeerAccess(const Transport& t, size_t bytes, const PeerAccessWindow& window) {
  return t.size() > 1 && bytes > 0 && window.covers(bytes);
}

// The same, for a collective that folds the peers' pieces in its slot (peerScratch below): the
// slot must hold a page-sized piece of every peer.
bool usePeerFold(const Transport& t, size_t bytes, const PeerAccessWindow& window) {
  return usePeerAccess(t, bytes, window) &&
      t.slotBytes() >= static_cast<size_t>(t.size() - 1) * 4096;
}

// How a rank's next slot (private until the next exchange) is cut into scratch for the peers'
// pieces: one share per worker thread, holding one piece of every peer.
struct PeerScratch {
  int threads;
  size_t share;       // bytes per thread
  int64_t pieceElems; // elements per peer piece
};

PeerScratch peerScratch(const Transport& t, const WorkerPool& workers, size_t es) {
  const auto peers = static_cast<size_t>(t.size() - 1);
  const int threads =
      std::max<int>(1, std::min<size_t>(workers.threads(), t.slotBytes() / (peers * 4096)));
  const size_t share = t.slotBytes() / static_cast<size_t>(threads);
  const size_t pieceBytes = std::min(kPeerPieceBytes, share / peers) / 64 * 64;
  return {threads, share, std::max<int64_t>(1, static_cast<int64_t>(pieceBytes / es))};
}

// Points from[r] at elements [at, at + m) of every rank's shared tensor: ours in place (`own`),
// each peer's read into `scratch`, one piece apart.
void readPeerPieces(
    Transport& t,
    const Pointers& peers,
    const std::byte* own,
    int64_t at,
    int64_t m,
    size_t es,
    int64_t pieceElems,
    std::byte* scratch,
    Pointers& from) {
  for (int r = 0; r < t.size(); ++r) {
    if (r == t.rank()) {
      from[r] = own + at * es;
    } else {
      t.readPeer(r, scratch, static_cast<const std::byte*>(peers[r]) + at * es, m * es);
      from[r] = scratch;
      scratch += pieceElems * es;
    }
  }
}

// Allreduce through the peers' tensors where they lie (see Transport::sharePointers). Returns
// false, having moved nothing, where the ranks cannot reach each other's memory.
//
// Rank r owns part r. Piece by piece it reads part r of every peer's tensor into its scratch,
// folds it into its own tensor, and writes the result, still in cache, into part r of every
// peer's tensor. Nobody else reads or writes part r of any tensor meanwhile: a peer's original
// piece is read before the owner overwrites it, and no peer reads its own part r. So one pass,
// two exchanges in all (the addresses, and the end), where the slots take two per 1 MiB chunk
// and copy every byte in and out once more: faster wherever the kernel's cross-memory copy is
// fast (docs/benchmarks.md, "Peer access").
bool allreduceByPeerAccess(
    Transport& t,
    at::Tensor& data,
    const ReduceSpec& spec,
    WorkerPool& workers) {
  const int ws = t.size();
  const int me = t.rank();
  const size_t es = data.element_size();
  const int64_t n = data.numel();
  std::byte* base = bytesOf(data);
  Pointers peers(ws);
  if (!t.sharePointers(base, peers.data())) {
    return false;
  }
  debug_log::note("peer access, threads ", workers.threads());
  auto peerBytes = [&](int r, int64_t at) {
    return static_cast<std::byte*>(const_cast<void*>(peers[r])) + at * es;
  };

  // The peers' pieces land in our next slot, which is ours alone to write until the next
  // exchange; each worker thread gets its own share of it.
  const auto [lo, hi] = partOf(me, ws, n, es);
  const PeerScratch cut = peerScratch(t, workers, es);
  auto* scratch = static_cast<std::byte*>(t.writeSlot());
  std::vector<Pointers> pieceSrcs(cut.threads, Pointers(ws));
  parallelRange(
      workers,
      hi - lo,
      es,
      [&](int piece, int64_t a, int64_t b) {
        Pointers& from = pieceSrcs[piece];
        for (int64_t x = lo + a; x < lo + b; x += cut.pieceElems) {
          const int64_t m = std::min(cut.pieceElems, lo + b - x);
          readPeerPieces(
              t, peers, base, x, m, es, cut.pieceElems, scratch + piece * cut.share, from);
          reduceInto(spec, base + x * es, from.data(), ws, m);
          for (int r = 0; r < ws; ++r) {
            if (r != me) {
              t.writePeer(r, peerBytes(r, x), base + x * es, m * es);
            }
          }
        }
      },
      cut.threads);
  // Peers may still be reading or writing our tensor: nobody returns (and lets its caller use
  // the tensor) before every rank is done.
  t.exchange();
  return true;
}

} // namespace

void allreduce(
    Transport& t,
    at::Tensor& data,
    const ReduceSpec& spec,
    const AllreducePlan& plan,
    WorkerPool& workers) {
  const size_t bytes = static_cast<size_t>(data.numel()) * data.element_size();
  // Every rank decides alike: the sizes match (the descriptor check) and so do the thresholds
  // and the slot size (checked at connect).
  if (bytes > plan.oneShotMaxBytes && usePeerFold(t, bytes, plan.peerAccess) &&
      allreduceByPeerAccess(t, data, spec, workers)) {
    return;
  }
  reduceImpl(t, data, spec, /*root=*/-1, plan.oneShotMaxBytes, workers);
}

void reduce(
    Transport& t,
    at::Tensor& data,
    const ReduceSpec& spec,
    int root,
    size_t oneShotMaxBytes,
    WorkerPool& workers) {
  reduceImpl(t, data, spec, root, oneShotMaxBytes, workers);
}

namespace {

// Runs fn(r, offset, length) for every rank r whose data [offset, offset + length) of `bytes`
// this rank copies, the whole of bytes * ranks split evenly over the workers (if any).
template <typename Fn>
void forEachRankRange(WorkerPool* workers, int ranks, size_t bytes, Fn&& fn) {
  auto run = [&](int64_t lo, int64_t hi) {
    for (int r = 0; r < ranks; ++r) {
      const auto a = std::max<int64_t>(lo, static_cast<int64_t>(r * bytes));
      const auto b = std::min<int64_t>(hi, static_cast<int64_t>((r + 1) * bytes));
      if (b > a) {
        fn(r, static_cast<size_t>(a) - r * bytes, static_cast<size_t>(b - a));
      }
    }
  };
  const auto total = static_cast<int64_t>(bytes * ranks);
  if (workers == nullptr) {
    run(0, total);
    return;
  }
  parallelRange(*workers, total, 1, [&](int, int64_t lo, int64_t hi) { run(lo, hi); });
}

// Copies `length` bytes unless source and destination are the same (an in-place gather, whose
// input is this rank's part of the output).
void copyUnlessSame(std::byte* to, const std::byte* from, size_t length) {
  if (to != from && length > 0) {
    std::memmove(to, from, length);
  }
}

// Every rank's input to `destination(r)` on the ranks where `receives` is true.
template <typename Destination>
void gatherInto(
    Transport& t,
    const at::Tensor& input,
    bool receives,
    Destination destination,
    const PeerAccessWindow& window,
    WorkerPool* workers) {
  const size_t es = input.element_size();
  const size_t bytes = static_cast<size_t>(input.numel()) * es;
  const std::byte* in = bytesOf(input);
  Pointers peers(t.size());
  if (usePeerAccess(t, bytes * t.size(), window) && t.sharePointers(in, peers.data())) {
    debug_log::note("peer access");
    if (receives) {
      forEachRankRange(workers, t.size(), bytes, [&](int r, size_t offset, size_t length) {
        if (r == t.rank()) {
          copyUnlessSame(destination(r) + offset, in + offset, length);
        } else {
          const auto* from = static_cast<const std::byte*>(peers[r]);
          t.readPeer(r, destination(r) + offset, from + offset, length);
        }
      });
    }
    t.exchange(); // peers may still be reading our input
    return;
  }
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
        if (receives && length > 0) {
          // Our own part comes from our input: it is already in cache.
          copyUnlessSame(
              destination(r) + offset,
              r == t.rank() ? in + offset : static_cast<const std::byte*>(from),
              length);
        }
      });
}

} // namespace

void allgather(
    Transport& t,
    const at::Tensor& input,
    std::vector<at::Tensor>& outputs,
    const PeerAccessWindow& window,
    WorkerPool* workers) {
  gatherInto(t, input, true, [&](int r) { return bytesOf(outputs[r]); }, window, workers);
}

void gather(
    Transport& t,
    const at::Tensor& input,
    std::vector<at::Tensor>& outputs,
    int root,
    const PeerAccessWindow& window,
    WorkerPool* workers) {
  gatherInto(
      t, input, t.rank() == root, [&](int r) { return bytesOf(outputs[r]); }, window, workers);
}

void allgatherInto(
    Transport& t,
    const at::Tensor& input,
    at::Tensor& output,
    const PeerAccessWindow& window,
    WorkerPool* workers) {
  const size_t bytes = static_cast<size_t>(input.numel()) * input.element_size();
  std::byte* out = bytesOf(output);
  gatherInto(
      t,
      input,
      true,
      [&](int r) { return out + static_cast<size_t>(r) * bytes; },
      window,
      workers);
}

at::Tensor allreduceSparse(Transport& t, const at::Tensor& input) {
  const int ws = t.size();
  const at::Tensor mine = input.coalesce();
  const int64_t nnz = mine._nnz();
  at::Tensor counts = at::empty({ws}, at::kLong);
  allgatherInto(t, at::full({1}, nnz, at::kLong), counts);
  const int64_t most = counts.max().item<int64_t>();
  // Indices [sparse_dim, nnz] and values [nnz, dense sizes...], padded to the largest nnz so one
  // all-gather of fixed size moves each.
  const int64_t sparseDim = mine.sparse_dim();
  std::vector<int64_t> valueShape = mine.values().sizes().vec();
  valueShape[0] = most;
  at::Tensor indices = at::zeros({sparseDim, most}, at::kLong);
  indices.narrow(1, 0, nnz).copy_(mine.indices());
  at::Tensor values = at::zeros(valueShape, mine.values().options());
  values.narrow(0, 0, nnz).copy_(mine.values());
  at::Tensor allIndices = at::empty({ws * indices.numel()}, at::kLong);
  allgatherInto(t, indices.reshape(-1), allIndices);
  at::Tensor allValues = at::empty({ws * values.numel()}, values.options());
  allgatherInto(t, values.reshape(-1), allValues);
  valueShape.insert(valueShape.begin(), ws);
  allIndices = allIndices.view({ws, sparseDim, most});
  allValues = allValues.view(valueShape);
  at::Tensor sum;
  for (int r = 0; r < ws; ++r) {
    const int64_t n = counts[r].item<int64_t>();
    at::Tensor part = at::sparse_coo_tensor(
        allIndices[r].narrow(1, 0, n), allValues[r].narrow(0, 0, n), mine.sizes(),
        mine.options());
    sum = r == 0 ? part : sum + part;
  }
  return sum.coalesce();
}

namespace {

// One sub-slot per destination rank, a multiple of the element size and of 64 bytes.
size_t subSlotBytes(const Transport& t, size_t elementSize) {
  const size_t granule = std::max<size_t>(64, elementSize) / elementSize * elementSize;
  const size_t sub = t.slotBytes() / static_cast<size_t>(t.size()) / granule * granule;
  TORCH_CHECK(sub > 0, "dummy_collectives: buffer too small for ", t.size(), " ranks");
  return sub;
}

} // namespace

void scatter(Transport& t, const std::vector<at::Tensor>& inputs, at::Tensor& output, int root) {
  const bool isRoot = t.rank() == root;
  const size_t es = output.element_size();
  const size_t bytes = static_cast<size_t>(output.numel()) * es;
  const size_t sub = subSlotBytes(t, es);
  std::byte* out = bytesOf(output);
  size_t offset = 0;
  do {
    const size_t length = std::min(sub, bytes - offset);
    if (isRoot && length > 0) {
      auto* slot = static_cast<std::byte*>(t.writeSlot());
      for (int r = 0; r < t.size(); ++r) {
        if (r != root) {
          std::memcpy(slot + r * sub, bytesOf(inputs[r]) + offset, length);
        }
      }
    }
    t.exchange();
    if (length > 0) {
      const std::byte* from = isRoot ? bytesOf(inputs[root]) + offset
                                     : static_cast<const std::byte*>(t.readSlot(root)) +
              static_cast<size_t>(t.rank()) * sub;
      std::memcpy(out + offset, from, length);
    }
    offset += length;
  } while (offset < bytes);
}

void reduceScatter(
    Transport& t,
    const std::vector<at::Tensor>& inputs,
    at::Tensor& output,
    const ReduceSpec& spec) {
  const int ws = t.size();
  const size_t es = output.element_size();
  const int64_t n = output.numel();
  const int64_t subElems = static_cast<int64_t>(subSlotBytes(t, es) / es);
  std::byte* out = bytesOf(output);
  Pointers srcs(ws);
  int64_t offset = 0;
  const int me = t.rank();
  do {
    const int64_t m = std::min(subElems, n - offset);
    auto* slot = static_cast<std::byte*>(t.writeSlot());
    // Only the peers' parts go through the slot: our own part is folded from our input, which
    // saves copying 1/ws of the input (half of it at 2 ranks). `output` may be that part of
    // the input (in place): the fold reads each element before it writes it.
    for (int d = 0; d < ws && m > 0; ++d) {
      if (d != me) {
        std::memcpy(slot + d * subElems * es, bytesOf(inputs[d]) + offset * es, m * es);
      }
    }
    t.exchange();
    for (int r = 0; r < ws; ++r) {
      srcs[r] = r == me ? bytesOf(inputs[me]) + offset * es
                        : static_cast<const std::byte*>(t.readSlot(r)) + me * subElems * es;
    }
    reduceInto(spec, out + offset * es, srcs.data(), ws, m);
    offset += m;
  } while (offset < n);
}

void reduceScatterTensor(
    Transport& t,
    const at::Tensor& input,
    at::Tensor& output,
    const ReduceSpec& spec,
    const PeerAccessWindow& window,
    WorkerPool& workers) {
  const int ws = t.size();
  const int me = t.rank();
  const size_t es = output.element_size();
  const int64_t n = output.numel();
  const std::byte* in = bytesOf(input);
  Pointers peers(ws);
  if (usePeerFold(t, static_cast<size_t>(n) * es, window) && t.sharePointers(in, peers.data())) {
    debug_log::note("peer access");
    // Our part of every peer's input, a piece at a time through our next slot (private until
    // the next exchange), one share of it per worker thread, as in allreduceByPeerAccess.
    const PeerScratch cut = peerScratch(t, workers, es);
    const int64_t mine = me * n; // our part's first element in every rank's input
    auto* scratch = static_cast<std::byte*>(t.writeSlot());
    std::byte* out = bytesOf(output);
    std::vector<Pointers> pieceSrcs(cut.threads, Pointers(ws));
    parallelRange(
        workers,
        n,
        es,
        [&](int piece, int64_t a, int64_t b) {
          Pointers& from = pieceSrcs[piece];
          for (int64_t x = a; x < b; x += cut.pieceElems) {
            const int64_t m = std::min(cut.pieceElems, b - x);
            readPeerPieces(
                t, peers, in, mine + x, m, es, cut.pieceElems, scratch + piece * cut.share, from);
            reduceInto(spec, out + x * es, from.data(), ws, m);
          }
        },
        cut.threads);
    t.exchange(); // peers may still be reading our input
    return;
  }
  std::vector<at::Tensor> parts;
  parts.reserve(ws);
  for (int d = 0; d < ws; ++d) {
    parts.push_back(input.narrow(0, d * n, n));
  }
  reduceScatter(t, parts, output, spec);
}

void alltoall(Transport& t, const std::vector<Span>& sends, const std::vector<Span>& receives) {
  const int ws = t.size();
  const int me = t.rank();
  // Step 1: every rank's send and receive sizes.
  TORCH_CHECK(
      t.slotBytes() >= 2 * sizeof(uint64_t) * ws,
      "dummy_collectives: buffer too small for all-to-all sizes");
  auto* sizes = static_cast<uint64_t*>(t.writeSlot());
  for (int r = 0; r < ws; ++r) {
    sizes[r] = sends[r].bytes;
    sizes[ws + r] = receives[r].bytes;
  }
  t.exchange();
  size_t largest = 0;
  std::string mismatches;
  for (int s = 0; s < ws; ++s) {
    const auto* theirs = static_cast<const uint64_t*>(t.readSlot(s));
    for (int d = 0; d < ws; ++d) {
      const auto* dest = static_cast<const uint64_t*>(t.readSlot(d));
      if (theirs[d] != dest[ws + s]) {
        mismatches += c10::str(
            "\n  rank ", s, " sends ", theirs[d], " bytes to rank ", d, ", which expects ",
            dest[ws + s]);
      }
      largest = std::max<size_t>(largest, theirs[d]);
    }
  }
  TORCH_CHECK_VALUE(
      mismatches.empty(),
      "dummy alltoall (rank ",
      me,
      "): input and output split sizes do not match across ranks; no data was exchanged:",
      mismatches);
  if (receives[me].bytes > 0) {
    std::memcpy(receives[me].data, sends[me].data, receives[me].bytes);
  }
  // Then the data, one sub-slot per destination per step.
  const size_t sub = subSlotBytes(t, 1);
  for (size_t offset = 0; offset < largest; offset += sub) {
    auto* slot = static_cast<std::byte*>(t.writeSlot());
    for (int d = 0; d < ws; ++d) {
      if (d != me && sends[d].bytes > offset) {
        std::memcpy(slot + d * sub, sends[d].data + offset, std::min(sub, sends[d].bytes - offset));
      }
    }
    t.exchange();
    for (int s = 0; s < ws; ++s) {
      if (s != me && receives[s].bytes > offset) {
        std::memcpy(
            receives[s].data + offset,
            static_cast<const std::byte*>(t.readSlot(s)) + me * sub,
            std::min(sub, receives[s].bytes - offset));
      }
    }
  }
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
