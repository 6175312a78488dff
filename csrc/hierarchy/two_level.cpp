#include "hierarchy/two_level.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

#include <dummy_collectives/debug_log.hpp>
#include "hierarchy/agreement.hpp"
#include "hierarchy/pipeline.hpp"
#include "kernels/reduce_kernel.hpp"

namespace dummy_collectives::hierarchy::two_level {
namespace {

int64_t ceilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int64_t roundUp(int64_t a, int64_t b) {
  return ceilDiv(a, b) * b;
}

std::byte* bytePtr(const at::Tensor& t) {
  return static_cast<std::byte*>(t.data_ptr());
}

// `data` (contiguous) zero-padded to `numel` elements. memcpy and memset, not ATen's zeros and
// copy_: ATen parallelizes large fills and copies with OpenMP, whose threads then spin for a
// while; where ranks share cores (torchrun leaves OMP_NUM_THREADS unset for one rank per host)
// that starved gloo's network thread (inter_host.cpp, copiesOf).
at::Tensor paddedCopy(const at::Tensor& data, int64_t numel) {
  at::Tensor padded = at::empty({numel}, data.options());
  const size_t bytes = static_cast<size_t>(data.numel()) * data.element_size();
  auto* out = static_cast<std::byte*>(padded.data_ptr());
  if (bytes > 0) {
    std::memcpy(out, data.data_ptr(), bytes);
  }
  std::memset(out + bytes, 0, static_cast<size_t>(numel) * data.element_size() - bytes);
  return padded;
}

ByteView viewOf(const at::Tensor& t) {
  return {bytePtr(t), static_cast<size_t>(t.numel()) * t.element_size()};
}

// The in-host stage reduces with the collective's own operation, except AVG: the hosts' sums are
// added across hosts and divided once, by the whole group's size (crossSpec).
ReduceSpec hostSpec(ReduceSpec spec) {
  spec.divisor = 1;
  return spec;
}
// Across hosts the values are already premultiplied (PREMUL_SUM) by the in-host stage.
ReduceSpec crossSpec(ReduceSpec spec) {
  spec.premul = false;
  spec.factor = 1.0;
  return spec;
}

// Folds `count` sources of `numel` elements each (in source order) into `out`.
void fold(const ReduceSpec& spec, void* out, const std::vector<const void*>& srcs, int64_t numel) {
  reduceInto(spec, out, srcs.data(), static_cast<int>(srcs.size()), numel);
}

Bytes foldPayloads(const ReduceSpec& spec, const std::vector<ByteView>& payloads, size_t bytes,
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
Bytes concatenated(const std::vector<ByteView>& payloads) {
  Bytes all;
  for (const auto& p : payloads) {
    all.insert(all.end(), p.data, p.data + p.size);
  }
  return all;
}

Pending waitEngine(const InterHostEngine& engine, const OpContext& ctx,
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
int64_t lineElements(size_t elementSize) {
  return std::max<int64_t>(1, 64 / static_cast<int64_t>(elementSize));
}

// ---- allreduce ---------------------------------------------------------------------------------

// Where a pipelined chunk is gloo's own allreduce: kEngineAllreduceMinBytes and
// kTwoMembersEngineAllreduceMinBytes (algorithm_table.hpp), which also split a whole message's
// allreduce between allreduce:pieces and allreduce:ring. For float sums and products between two
// members gloo computes what our kernels do to the bit (one commutative operation), so the order
// caveat below does not arise.

// Two members on the links fold halves of chunks this large (foldPiecesOnLinks) and swap smaller
// ones whole. Alternated (3 passes, 2 runs each): the leaders' 4 MiB chunks of 3+1 at 64 MiB
// 0.98x / 0.98x -> 1.26x / 1.32x gloo, 1+3 0.93x / 1.28x -> 1.09x / 1.22x; the 2x2 rails'
// chunks of 512 KiB lost a round trip to the halves (64 MiB 2.04x / 2.62x -> 1.61x / 1.65x).
constexpr size_t kHalvesMinBytes = size_t{2} << 20;

// Whether the engine's allreduce computes what dummy's kernels do for `spec` (across hosts: no
// premultiplication, AVG's division done apart), to the bit: gloo has no int16, complex or AVG,
// and its bool is left to our kernels. Integers come out the same in any order. Floating point
// does not: gloo folds in ring order (not host order) and rounds half types after every add; its
// MIN/MAX (std::min) picks a NaN or not by operand order. (Two members use the engine's
// allreduce only for large messages, kTwoMembersEngineAllreduceMinBytes: one add per element,
// so every order gives the same bits.)
// `anyOrder`: the caller accepts gloo's ring order for float and double sums and products (a
// whole message crossing hosts in one operation: the ring folds each element in one order and
// forwards that result, so every rank still gets the same bits, only not in host order).
std::optional<c10d::ReduceOp> engineReduction(const ReduceSpec& spec, bool anyOrder) {
  switch (spec.dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      break;
    default:
      return std::nullopt;
  }
  const bool integral = c10::isIntegralType(spec.dtype, /*includeBool=*/false);
  const bool minOrMax = spec.kind == ReduceKind::kMin || spec.kind == ReduceKind::kMax;
  const bool ringOrderIsFine = anyOrder && (spec.dtype == at::kFloat || spec.dtype == at::kDouble);
  if (!integral && (minOrMax || !ringOrderIsFine)) {
    return std::nullopt;
  }
  switch (spec.kind) {
    case ReduceKind::kSum:
      return c10d::ReduceOp(c10d::ReduceOp::SUM);
    case ReduceKind::kProduct:
      return c10d::ReduceOp(c10d::ReduceOp::PRODUCT);
    case ReduceKind::kMin:
      return c10d::ReduceOp(c10d::ReduceOp::MIN);
    case ReduceKind::kMax:
      return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case ReduceKind::kBand:
      return integral ? std::optional(c10d::ReduceOp(c10d::ReduceOp::BAND)) : std::nullopt;
    case ReduceKind::kBor:
      return integral ? std::optional(c10d::ReduceOp(c10d::ReduceOp::BOR)) : std::nullopt;
    case ReduceKind::kBxor:
      return integral ? std::optional(c10d::ReduceOp(c10d::ReduceOp::BXOR)) : std::nullopt;
  }
  return std::nullopt;
}

// On the links, member m folds piece m of every member's `data` in host order, its own read in
// place and the others' received into scratch (an all-to-all of the pieces), then sends the
// folded piece to every other member, straight into its place in their `data` (an all-gather of
// blocks). A ring's bytes (2(H-1)/H of `data` each way) in two steps where gloo's ring takes
// 2(H-1), no copy of `data`, each member folding one piece; pieces are cut on cache lines, so
// none needs padding (the last may be short, or empty). Two members fold halves: the swap's
// bytes with half its fold. How leaders reduce their large chunks (CrossHostReduction) and
// hosts of one rank their segments (allreduceInSegmentsOnLinks). `scratch`, where large enough,
// receives the others' pieces (else a fresh tensor does).
void foldPiecesOnLinks(const InterHostEngine& engine, const OpContext& ctx,
                       const ReduceSpec& across, const at::Tensor& data,
                       const at::Tensor& scratch = {}) {
  const int members = engine.size();
  const int me = engine.rank();
  const int64_t n = data.numel();
  const int64_t per = roundUp(ceilDiv(n, members), lineElements(data.element_size()));
  auto piece = [&](int m) {
    const int64_t begin = std::min(n, m * per);
    return data.narrow(0, begin, std::min(n, begin + per) - begin);
  };
  at::Tensor mine = piece(me);
  const int64_t m = mine.numel();
  const int64_t slots = (members - 1) * m;
  at::Tensor received = scratch.defined() && scratch.numel() >= slots
      ? scratch.narrow(0, 0, slots)
      : at::empty({slots}, data.options());
  // Member s's piece `me` (none from this member).
  auto slot = [&](int s) { return received.narrow(0, (s < me ? s : s - 1) * m, m); };
  engine.wait(engine.piecesOnLinks([&](int d) { return bytesOf(piece(d)); },
                                   [&](int s) { return bytesOf(slot(s)); }),
              ctx);
  std::vector<const void*> srcs;
  for (int s = 0; s < members; ++s) {
    srcs.push_back(s == me ? mine.data_ptr() : slot(s).data_ptr());
  }
  fold(across, mine.data_ptr(), srcs, m);
  engine.wait(engine.piecesOnLinks([&](int) { return bytesOf(mine); },
                                   [&](int s) { return bytesOf(piece(s)); }),
              ctx);
}

// The cross-host stage of a pipelined allreduce: afterwards every member of `engine` holds, in
// its chunk tensor, the fold over members of theirs (same size on every member). Three
// pipeline stages, so that the engine moves one chunk while the host level works on others:
//   exchange: between two members, each sends the other its whole chunk (one round trip, and
//             no more bytes than a ring's two steps); beyond two, the engine's own allreduce for
//             large chunks, where it computes what our kernels do (its ring overlaps sending,
//             receiving and adding); else an all-to-all of the chunk's pieces (member m keeps
//             piece m of everyone's);
//   fold:     the fold of both chunks (two members) or of piece m, in host order; AVG's
//             division after the engine's allreduce;
//   gather:   nothing, or an all-gather of the folded pieces back into the chunk.
// Two members exchange whole chunks below 32 MiB because one round trip beats the all-to-all's
// two and the engine's ring's two steps; beyond two, large chunks keep the engine's allreduce
// because there it beats the all-to-all (docs/benchmarks.md, "The cross-host exchange").
//
// `blocking`: where the engine has links (the leaders', or a rail's), the exchange, the fold
// and the gather of a chunk that is not the engine's own allreduce all run in exchange(), on
// this thread, the links carrying the bytes: the pipeline runs that stage as its blocking one
// (pipeline.hpp), the host level working on other chunks meanwhile. gloo's operations cost
// each chunk two thread hand-offs a side.
class CrossHostReduction {
 public:
  CrossHostReduction(
      const InterHostEngine& engine,
      const OpContext& ctx,
      const ReduceSpec& spec,
      int chunks,
      bool wholeMessage = false,
      bool blocking = false,
      std::optional<size_t> engineMinBytes = std::nullopt)
      : engine_(engine),
        ctx_(ctx),
        spec_(crossSpec(spec)),
        native_(engineReduction(spec_, wholeMessage || engine.size() == 2)),
        onLinks_(blocking && engine.hasLinks()),
        engineMinBytes_(engineMinBytes.value_or(
            engine.size() == 2 ? kTwoMembersEngineAllreduceMinBytes : kEngineAllreduceMinBytes)),
        chunks_(chunks) {}

  // Whether exchange() runs on the links, to completion (the pipeline's blocking stage).
  bool onLinks() const {
    return onLinks_;
  }

  // Whether a chunk of `bytes` is exchanged as an all-to-all of equal pieces, one per member
  // (its element count must then divide into them).
  bool inPieces(size_t bytes) const {
    return engine_.size() > 2 && !enginesOwn(bytes);
  }

  // Whether a chunk of `bytes` is the engine's own allreduce, unchanged (gloo's ring).
  bool enginesOwn(size_t bytes) const {
    return native_.has_value() && bytes >= engineMinBytes_;
  }

  Pending exchange(int c, const at::Tensor& data) {
    Chunk& k = chunks_[c];
    k.data = data;
    const size_t bytes = static_cast<size_t>(data.numel()) * data.element_size();
    k.native = enginesOwn(bytes);
    if (k.native) {
      std::vector<at::Tensor> tensors{data};
      c10d::AllreduceOptions opts;
      opts.reduceOp = *native_;
      opts.timeout = ctx_.timeout;
      return waitEngine(engine_, ctx_, engine_->allreduce(tensors, opts));
    }
    Pending exchanged;
    if (engine_.size() == 2 && onLinks_ && bytes >= kHalvesMinBytes) {
      foldPiecesOnLinks(engine_, ctx_, spec_, data);
      k = Chunk();
      k.done = true;
      return nullptr;
    }
    if (engine_.size() == 2) {
      // Send all of ours to the other member, nothing to ourselves.
      const int64_t n = static_cast<int64_t>(bytes);
      const int me = engine_.rank();
      std::vector<int64_t> sends(2, 0);
      sends[1 - me] = n;
      k.pieces = at::empty_like(data); // the other member's chunk
      at::Tensor out = bytesOf(k.pieces);
      at::Tensor in = bytesOf(data);
      exchanged = waitEngine(engine_, ctx_, engine_.alltoall(out, in, sends, sends, onLinks_));
    } else {
      k.pieces = at::empty_like(data);
      at::Tensor out = bytesOf(k.pieces);
      at::Tensor in = bytesOf(data);
      exchanged = waitEngine(engine_, ctx_, engine_.alltoall(out, in, onLinks_));
    }
    if (!onLinks_) {
      return exchanged;
    }
    exchanged();
    foldChunk(k);
    if (Pending gathered = gatherChunk(k)) {
      gathered();
    }
    k = Chunk();
    k.done = true;
    return nullptr;
  }

  Pending fold(int c) {
    Chunk& k = chunks_[c];
    if (k.done) {
      return nullptr;
    }
    foldChunk(k);
    return nullptr;
  }

  Pending gather(int c) {
    Chunk& k = chunks_[c];
    Pending pending = k.done ? nullptr : gatherChunk(k);
    k = Chunk();
    return pending;
  }

 private:
  struct Chunk {
    at::Tensor data;
    bool native = false;
    bool done = false; // exchanged, folded and gathered on the links
    at::Tensor pieces;
    at::Tensor folded;
  };

  void foldChunk(Chunk& k) const {
    if (k.native) {
      if (spec_.divisor != 1) {
        ReduceSpec divide = spec_;
        divide.kind = ReduceKind::kSum;
        two_level::fold(divide, k.data.data_ptr(), {k.data.data_ptr()}, k.data.numel());
      }
      return;
    }
    const int members = engine_.size();
    if (members == 2) { // the exchange
      const void* theirs = k.pieces.data_ptr();
      const void* mine = k.data.data_ptr();
      const bool first = engine_.rank() == 0;
      two_level::fold(spec_, k.data.data_ptr(), {first ? mine : theirs, first ? theirs : mine},
                      k.data.numel());
      k.pieces = at::Tensor();
      return;
    }
    const int64_t piece = k.data.numel() / members;
    k.folded = at::empty({piece}, k.data.options());
    std::vector<const void*> srcs;
    for (int m = 0; m < members; ++m) {
      srcs.push_back(bytePtr(k.pieces) + m * piece * k.data.element_size());
    }
    two_level::fold(spec_, k.folded.data_ptr(), srcs, piece);
  }

  Pending gatherChunk(Chunk& k) const {
    if (k.native || engine_.size() == 2) {
      return nullptr;
    }
    at::Tensor out = bytesOf(k.data);
    at::Tensor in = bytesOf(k.folded);
    return waitEngine(engine_, ctx_, engine_.allgather(out, in, onLinks_));
  }

  const InterHostEngine& engine_;
  const OpContext& ctx_;
  const ReduceSpec spec_;
  const std::optional<c10d::ReduceOp> native_;
  const bool onLinks_;
  const size_t engineMinBytes_;
  std::vector<Chunk> chunks_;
};

// Uniform topology: per chunk, reduce-scatter inside the host (rank k keeps part k), the
// cross-host reduction of part k on rail k, an all-gather inside the host. `agreement`, if
// given, is finished just before the first cross-host step: the first reduce-scatter (which
// writes only scratch) overlaps the leaders' exchange.
void allreduceOnRails(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& flat,
    const ReduceSpec& spec,
    Agreement* agreement) {
  const int L = levels.host.size();
  const int H = levels.rail->size();
  debug_log::note("on the rails");
  const Chunking plan(
      flat.numel(), int64_t{L} * H * lineElements(flat.element_size()), levels.settings,
      flat.element_size());
  CrossHostReduction across(
      *levels.rail, ctx, spec, plan.count, /*wholeMessage=*/false, /*blocking=*/true);
  struct State {
    ChunkBuffer buffer;
    at::Tensor shard; // this rank's part of the chunk
  };
  std::vector<State> states(plan.count);
  const int local = levels.host.rank();
  bool agreed = agreement == nullptr;
  runPipeline(
      plan.count,
      {[&](int c) {
         State& s = states[c];
         s.buffer = ChunkBuffer(flat, plan, c, /*copyIn=*/true);
         // The shard is this rank's part of the chunk itself: the reduce-scatter, the
         // cross-host fold and the all-gather then work in place, and no stage copies it.
         // But a reduce-scatter issued while the leaders still check that every rank called
         // this collective must not write the user's tensor: it reduces into scratch, and its
         // all-gather copies the shard back.
         const int64_t part = plan.padded(c) / L;
         s.shard = agreed ? s.buffer.work.narrow(0, local * part, part)
                          : at::empty({part}, flat.options());
         return levels.host.reduceScatter(ctx, s.shard, s.buffer.work, hostSpec(spec));
       },
       [&](int c) {
         if (c == 0 && agreement != nullptr) {
           agreement->finish();
         }
         agreed = true;
         return across.exchange(c, states[c].shard);
       },
       [&](int c) { return across.fold(c); },
       [&](int c) { return across.gather(c); },
       [&](int c) -> Pending {
         State& s = states[c];
         Pending gathered =
             levels.host.allgather(ctx, s.buffer.work, s.shard, InHostLevel::Step::kFollowing);
         return [&s, gathered] {
           gathered();
           s.buffer.finish();
           s = State(); // the chunk's buffers go as soon as it is done
         };
       }},
      across.onLinks() ? 1 : -1, [&] { levels.host.expedite(); });
}

// Through the leaders, an allreduce's chunks are up to this many times inter_host_chunk_bytes:
// each chunk costs the leaders an engine operation, and only they move it across hosts (on
// rails every rank moves its shard, so there 1 MiB chunks are already L times larger). With
// 4 MiB chunks 3+1 and 1+3 hosts at 16 and 64 MiB went from 0.89-0.93x gloo to 1.08-1.22x;
// docs/benchmarks.md, "Chunk size and count".
constexpr size_t kLeadersAllreduceChunkFactor = 4;

// Hosts of different sizes: per chunk, reduce to the host's leader, the cross-host reduction
// among the leaders, a broadcast inside the host.
void allreduceThroughLeaders(
    const Levels& levels, const OpContext& ctx, at::Tensor& flat, const ReduceSpec& spec) {
  const int H = levels.topology.hostCount();
  debug_log::note("through the leaders");
  HierarchySettings settings = levels.settings;
  settings.chunkBytes *= kLeadersAllreduceChunkFactor;
  const Chunking plan(
      flat.numel(), int64_t{H} * lineElements(flat.element_size()), settings,
      flat.element_size());
  const bool leader = levels.leader();
  const bool alone = levels.host.size() == 1;
  std::optional<CrossHostReduction> across;
  if (leader) {
    across.emplace(
        *levels.rail, ctx, spec, plan.count, /*wholeMessage=*/false, /*blocking=*/true);
  }
  std::vector<ChunkBuffer> buffers(plan.count);
  runPipeline(
      plan.count,
      {[&](int c) -> Pending {
         buffers[c] = ChunkBuffer(flat, plan, c, /*copyIn=*/true);
         if (alone) {
           // The in-host stage on one rank: nothing to add, but PREMUL_SUM's factor applies.
           if (spec.premul) {
             buffers[c].work.mul_(spec.factor);
           }
           return nullptr;
         }
         return levels.host.reduce(ctx, buffers[c].work, 0, hostSpec(spec));
       },
       [&](int c) { return leader ? across->exchange(c, buffers[c].work) : Pending(); },
       [&](int c) { return leader ? across->fold(c) : Pending(); },
       [&](int c) { return leader ? across->gather(c) : Pending(); },
       [&](int c) -> Pending {
         Pending broadcast;
         if (!alone) {
           broadcast = levels.host.broadcast(ctx, buffers[c].work, 0);
         }
         return [&buffers, c, broadcast] {
           if (broadcast) {
             broadcast();
           }
           buffers[c].finish();
           buffers[c] = ChunkBuffer();
         };
       }},
      across && across->onLinks() ? 1 : -1, [&] { levels.host.expedite(); });
}

// One rank per host on the leaders' links: an allreduce's segment (below), by host count. The
// pieces of a segment stay in cache while they are sent, received and folded; each segment costs
// two waits for every host. Two hosts: alternated with the swap below 32 MiB and gloo's own
// allreduce from it (3 passes, 2 runs each; then as an all-to-all and all-gather of padded
// pieces): 4 MiB 0.97x / 1.25x -> 1.67x / 1.52x gloo, 16 MiB 1.11x / 1.13x -> 1.33x / 1.66x,
// 64 MiB 1.32x / 0.86x -> 1.54x / 1.25x. Three hosts sharing two cores, segments of 1, 2 and
// 4 MiB alternated in one process with gloo's own allreduce (5 launches): 2 MiB the best from
// 4 MiB on, medians 4 MiB 0.99x -> 1.32x, 16 MiB 0.96x -> 1.13x, 64 MiB 0.93x -> 1.01x; 1 MiB
// (one segment) 1.40x -> 1.75x (docs/benchmarks.md, "Three hosts of one rank: pieces on the
// links").
constexpr int64_t kTwoHostsSegmentBytes = int64_t{4} << 20;
constexpr int64_t kHostsSegmentBytes = int64_t{2} << 20;

// One rank per host, on the leaders' links, segment by segment: each segment's pieces are
// folded where they are kept and sent back (foldPiecesOnLinks). A ring's bytes, without gloo's
// thread hand-offs, each host folding its piece of the message, the same bits on every rank for
// every dtype and operation. Earlier forms that lost to gloo's ring on three hosts sharing two
// cores: an all-to-all and all-gather of padded copies (16 MiB 0.71x / 0.59x) and a ring of
// send-receive steps on the links (16 MiB 0.71-0.73x, 64 MiB 0.52-0.54x): each step waits for
// all three processes, one of which two cores always leave waiting.
void allreduceInSegmentsOnLinks(
    const Levels& levels, const OpContext& ctx, at::Tensor& flat, const ReduceSpec& spec) {
  debug_log::note("one rank per host, in segments on the links");
  const InterHostEngine& rail = *levels.rail;
  const ReduceSpec across = crossSpec(spec);
  const int64_t line = lineElements(flat.element_size());
  const int64_t segmentBytes = rail.size() == 2 ? kTwoHostsSegmentBytes : kHostsSegmentBytes;
  const int64_t segment = std::max(rail.size() * line, segmentBytes / flat.element_size());
  // The others' pieces of a segment land here (a piece is a segment's share, rounded up to a
  // cache line).
  const int64_t piece = roundUp(ceilDiv(std::min(flat.numel(), segment), rail.size()), line);
  at::Tensor scratch = at::empty({(rail.size() - 1) * piece}, flat.options());
  for (int64_t begin = 0; begin < flat.numel(); begin += segment) {
    foldPiecesOnLinks(rail, ctx, across,
                      flat.narrow(0, begin, std::min(segment, flat.numel() - begin)), scratch);
  }
}

// One rank per host: the cross-host reduction of the whole message, PREMUL_SUM's factor applied
// first as the in-host stage would: allreduce:segments on the links (above), or in one
// operation, allreduce:ring (the engine's own allreduce, where it computes what our kernels do;
// else as pieces) or allreduce:pieces (an exchange of pieces, a fold and an all-gather; two
// hosts swap).
void allreduceOneRankPerHost(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& flat,
    const ReduceSpec& spec,
    Algorithm algorithm) {
  if (spec.premul) {
    flat.mul_(spec.factor);
  }
  if (algorithm == Algorithm::kAllreduceSegments) {
    allreduceInSegmentsOnLinks(levels, ctx, flat, spec);
    return;
  }
  CrossHostReduction across(*levels.rail, ctx, spec, 1, /*wholeMessage=*/true, /*blocking=*/false,
                            algorithm == Algorithm::kAllreduceRing ? 0 : SIZE_MAX);
  const size_t bytes = static_cast<size_t>(flat.numel()) * flat.element_size();
  // "gloo's own": the benchmark holds such a call to gloo's speed less the check's cost.
  debug_log::note("one rank per host, whole message",
                  across.enginesOwn(bytes) ? ", gloo's own allreduce" : "");
  // An all-to-all of equal pieces needs whole pieces: pad (copies cost a memory pass each).
  const int64_t granule = int64_t{levels.rail->size()} * lineElements(flat.element_size());
  at::Tensor work = flat;
  if (across.inPieces(bytes) && flat.numel() % granule != 0) {
    work = paddedCopy(flat, roundUp(flat.numel(), granule));
  }
  if (Pending exchanged = across.exchange(0, work)) {
    exchanged();
  }
  across.fold(0);
  if (Pending gathered = across.gather(0)) {
    gathered();
  }
  if (!work.is_same(flat)) {
    std::memcpy(bytePtr(flat), bytePtr(work), flat.numel() * flat.element_size());
  }
}

// `algorithm`: one beyond the records. `agreement`, if given, is still to be finished.
void allreduceData(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& data,
    const ReduceSpec& spec,
    Algorithm algorithm,
    Agreement* agreement) {
  at::Tensor flat = data.view(-1);
  if (algorithm == Algorithm::kAllreduceRails) {
    allreduceOnRails(levels, ctx, flat, spec, agreement);
    return;
  }
  // Every other form's first stage writes the rank's own tensor: agree first.
  if (agreement != nullptr) {
    agreement->finish();
  }
  if (algorithm == Algorithm::kAllreduceLeaders) {
    allreduceThroughLeaders(levels, ctx, flat, spec);
    return;
  }
  allreduceOneRankPerHost(levels, ctx, flat, spec, algorithm);
}

} // namespace

void allreduceData(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& data,
    const ReduceSpec& spec) {
  const size_t bytes = static_cast<size_t>(data.numel()) * data.element_size();
  allreduceData(levels, ctx, data, spec,
                levels.algorithms.chooseBeyondRecords(Collective::kAllreduce, bytes), nullptr);
}

void allreduce(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& data,
    const ReduceSpec& spec) {
  const size_t bytes = static_cast<size_t>(data.numel()) * data.element_size();
  const Algorithm algorithm = levels.algorithms.choose(Collective::kAllreduce, bytes);
  if (algorithm != Algorithm::kAllreduceRecords) {
    Agreement agreement(levels, ctx);
    if (!agreement.hostAgrees()) {
      agreement.finish(); // raises: this host's ranks called different collectives
    }
    allreduceData(levels, ctx, data, spec, algorithm, &agreement);
    return;
  }
  // Small: the data rides with the agreement. Each host folds its ranks' payloads, then every
  // host's sum is folded in host order (the same order on every rank: identical results).
  debug_log::note("inline with the agreement");
  const int64_t numel = data.numel();
  const Combine combine{
      [&](const std::vector<ByteView>& local) {
        return foldPayloads(hostSpec(spec), local, bytes, numel);
      },
      [&](const std::vector<ByteView>& hosts) {
        return foldPayloads(crossSpec(spec), hosts, bytes, numel);
      }};
  const Bytes result = agree(levels, ctx, viewOf(data), &combine);
  if (bytes > 0) {
    std::memcpy(data.data_ptr(), result.data(), bytes);
  }
}

void reduce(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& data,
    const ReduceSpec& spec,
    int root) {
  // The two-level allreduce on a copy: the root keeps the result, the others their input.
  at::Tensor scratch = data.clone();
  allreduce(levels, ctx, scratch, spec);
  if (levels.topology.rank() == root) {
    data.copy_(scratch);
  }
}

// ---- broadcast ---------------------------------------------------------------------------------

// A pipelined broadcast's chunks are this many times inter_host_chunk_bytes.
constexpr size_t kBroadcastChunkFactor = 4;

// broadcast:chain: hosts of one rank on the leaders' links pass the message along a chain of the
// hosts from the root's, every host passing it on as it arrives: the root sends it once, where a
// broadcast from the root sends it to every other host (gloo's too). One operation on the links a
// host: bytes go on as they land, with no chunk to wait for.
void broadcastAlongChain(
    const InterHostEngine& rail, const OpContext& ctx, at::Tensor& flat, int rootHost) {
  debug_log::note("one rank per host, along a chain of the hosts");
  const int H = rail.size();
  const int place = (rail.rank() - rootHost + H) % H; // this host's place in the chain
  const int prev = place > 0 ? (rail.rank() - 1 + H) % H : -1;
  const int next = place < H - 1 ? (rail.rank() + 1) % H : -1;
  rail.wait(rail.relayOnLinks(prev, next, flat), ctx);
}

void broadcast(const Levels& levels, const OpContext& ctx, at::Tensor& data, int root) {
  const Topology& topology = levels.topology;
  const size_t bytes = static_cast<size_t>(data.numel()) * data.element_size();
  const int rootHost = topology.hostOf(root);
  const int rootLocal = topology.localRankOf(root);
  const bool isRoot = topology.rank() == root;
  // The root's host's record goes one way, as gloo's broadcast does, and every other host
  // checks it (agreement.hpp, agreeOneWay). A message that fits a record rides in it; a larger
  // one follows the check: the root's side issues it at once, every other rank only once its
  // host checked the record (before that, a root that called something larger could overrun
  // their receive: gloo aborts the process then).
  const Algorithm algorithm = levels.algorithms.choose(Collective::kBroadcast, bytes);
  const bool inRecord = algorithm == Algorithm::kBroadcastRecord;
  // Where it fits the in-host records too, every rank has it once the agreement is done.
  const bool inHostRecords =
      inRecord && (levels.oneRankPerHost() || bytes <= levels.settings.inlineBytes);
  at::Tensor flat = bytesOf(data);
  if (inHostRecords) {
    debug_log::note("one way, in the root's record");
    const OneWayAgreement agreed =
        agreeOneWay(levels, ctx, isRoot ? viewOf(data) : ByteView{}, root);
    if (agreed.announced) {
      levels.rail->wait(agreed.announced, ctx);
    }
    TORCH_CHECK(agreed.payload.size == bytes, "dummy_collectives: broadcast got ",
                agreed.payload.size, " bytes for ", bytes);
    if (!isRoot && bytes > 0) {
      std::memcpy(data.data_ptr(), agreed.payload.data, bytes);
    }
    return;
  }
  const bool onRootHost = topology.host() == rootHost;
  if (inRecord) {
    // Larger than the in-host records: the root's host shares the data in shared memory before
    // its leader announces it; every other host's leader shares what it heard. One cross-host
    // message, where the data after the record would be a second.
    debug_log::note("one way, in the root's host's record, shared inside each host");
    const OneWayAgreement agreed = agreeOneWay(levels, ctx, {}, root, [&] {
      if (levels.host.size() > 1) {
        levels.host.broadcast(ctx, flat, rootLocal)();
      }
      return viewOf(data);
    });
    if (agreed.announced) {
      levels.rail->wait(agreed.announced, ctx);
    }
    if (!onRootHost) {
      if (levels.leader()) {
        TORCH_CHECK(agreed.payload.size == bytes, "dummy_collectives: broadcast got ",
                    agreed.payload.size, " bytes for ", bytes);
        std::memcpy(data.data_ptr(), agreed.payload.data, bytes);
      }
      if (levels.host.size() > 1) {
        levels.host.broadcast(ctx, flat, 0)();
      }
    }
    return;
  }
  debug_log::note("one way, the root's record, then the data");
  const OneWayAgreement agreed = agreeOneWay(levels, ctx, {}, root);
  if (levels.oneRankPerHost()) {
    // The whole message in one engine operation: no in-host stage to overlap. The root's
    // record first: on the leaders' links one operation is in flight at a time.
    InterHostEngine& rail = *levels.rail;
    if (agreed.announced) {
      rail.wait(agreed.announced, ctx);
    }
    if (algorithm == Algorithm::kBroadcastChain) {
      broadcastAlongChain(rail, ctx, flat, rootHost);
      return;
    }
    rail.wait(rail.broadcast(flat, rootHost), ctx);
    return;
  }
  if (agreed.announced) {
    levels.rail->wait(agreed.announced, ctx);
  }
  // The in-host stages are copies, far cheaper than the cross-host one: whole chunks (2 hosts
  // x 2 ranks, 1 MiB: 0.71x gloo in 4 chunks of 256 KiB), of 4 x inter_host_chunk_bytes: each
  // chunk costs gloo an operation of 0.3-0.9 ms here, and a copy hides little (alternated
  // with 1 MiB chunks: 2x2 64 MiB 0.95x -> 1.54x gloo, 3+1 16 MiB 0.77x -> 1.21x, 1+3 64 MiB
  // 1.23x -> 1.46x; docs/benchmarks.md, "Chunk size and count").
  HierarchySettings settings = levels.settings;
  settings.chunkBytes *= kBroadcastChunkFactor;
  const Chunking plan(flat.numel(), 64, settings, 1, 1, /*wholeChunks=*/true);
  const bool uniform = topology.uniform();
  const int local = topology.localRank();
  // Uniform: rail k of the root carries the chunk across hosts, then each host broadcasts it
  // from its rank k. Otherwise: the root's host broadcasts it to its leader, the leaders carry
  // it across, and the other hosts broadcast it from their leader.
  // The carrier's rail with links (the leaders'; uniform hosts: where the root is local rank
  // 0) moves each chunk on them, this thread driving the bytes while the host level copies the
  // chunks before and after (pipeline.hpp, a blocking stage); gloo's broadcast costs each chunk
  // two thread hand-offs a side.
  const int carrier = uniform ? rootLocal : 0;
  const bool carries = local == carrier && levels.rail != nullptr;
  const bool onLinks = carries && levels.rail->hasLinks();
  std::vector<Stage> stages;
  if (!uniform) {
    stages.push_back([&](int c) -> Pending {
      if (!onRootHost || rootLocal == 0 || levels.host.size() == 1) {
        return nullptr;
      }
      at::Tensor chunk = flat.narrow(0, plan.begin(c), plan.length(c));
      return levels.host.broadcast(ctx, chunk, rootLocal);
    });
  }
  const int crossing = static_cast<int>(stages.size());
  stages.push_back([&](int c) -> Pending {
    if (!carries) {
      return nullptr;
    }
    at::Tensor chunk = flat.narrow(0, plan.begin(c), plan.length(c));
    Pending sent =
        waitEngine(*levels.rail, ctx, levels.rail->broadcast(chunk, rootHost, onLinks));
    if (onLinks) {
      sent();
      return nullptr;
    }
    return sent;
  });
  stages.push_back([&](int c) -> Pending {
    if (levels.host.size() == 1 || (!uniform && onRootHost)) {
      if (!uniform && onRootHost && rootLocal == 0 && levels.host.size() > 1) {
        // The root is its host's leader: its host peers get the chunk from it directly.
        at::Tensor chunk = flat.narrow(0, plan.begin(c), plan.length(c));
        return levels.host.broadcast(ctx, chunk, 0);
      }
      return nullptr;
    }
    at::Tensor chunk = flat.narrow(0, plan.begin(c), plan.length(c));
    return levels.host.broadcast(ctx, chunk, uniform ? rootLocal : 0);
  });
  runPipeline(plan.count, stages, onLinks ? crossing : -1, [&] { levels.host.expedite(); });
}

// ---- allgather ---------------------------------------------------------------------------------

namespace {

// `hostOrdered` holds every rank's `bytes`, host by host, each host's in local rank order;
// rank r's go to block r of `out`.
void placeByRank(
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

// Whether ranks are numbered host by host (each host's ranks in a row, hosts in order): every
// host's inputs are then one block of the output, in place.
bool hostOrderIsRankOrder(const Topology& topology) {
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

// The all-gather of `mine` over the rail (whose members are the hosts, in order): host h's
// piece lands in slotOf(h) (ours is there already). Two members swap straight into place; more
// gather into one tensor (gloo's all-to-all wants one), copied into place after the wait.
// `onLinks`: two members swap on the rail's links (`alone`: nothing else of the rail's in flight).
Pending railAllgather(
    const InterHostEngine& rail,
    const OpContext& ctx,
    const at::Tensor& mine,
    const std::function<at::Tensor(int)>& slotOf,
    bool onLinks = false) {
  at::Tensor in = bytesOf(mine);
  const int64_t bytes = in.numel();
  if (rail.size() == 2) {
    const int other = 1 - rail.rank();
    std::vector<int64_t> splits(2, 0);
    splits[other] = bytes;
    at::Tensor theirs = bytesOf(slotOf(other));
    return waitEngine(rail, ctx, rail.alltoall(theirs, in, splits, splits, onLinks));
  }
  at::Tensor all = at::empty({bytes * rail.size()}, at::kByte);
  Pending gathered = waitEngine(rail, ctx, rail.allgather(all, in));
  std::vector<at::Tensor> slots;
  for (int h = 0; h < rail.size(); ++h) {
    slots.push_back(slotOf(h));
  }
  return [gathered, all, slots = std::move(slots), me = rail.rank(), bytes] {
    gathered();
    for (int h = 0; h < static_cast<int>(slots.size()); ++h) {
      if (h != me) {
        std::memcpy(slots[h].data_ptr(), bytePtr(all) + h * bytes, static_cast<size_t>(bytes));
      }
    }
  };
}

// Hosts of different sizes: every host's inputs gathered inside it, straight into their place
// in the output; the hosts' blocks shared among the leaders, each landing in its place (on the
// leaders' links, where they have them: this is the rail's only operation in flight); the
// other hosts' blocks broadcast inside each host. One cross-host step between leaders, where an
// all-gather over every rank crosses hosts once per rank; and no rank moves its own host's
// inputs twice (before: an in-host all-gather, then the whole output broadcast and copied
// again, 0.6x gloo's speed on 3+1 hosts at 16 MiB).
void allgatherThroughLeaders(
    const Levels& levels, const OpContext& ctx, const at::Tensor& in, at::Tensor& out) {
  debug_log::note("through the leaders");
  const Topology& topology = levels.topology;
  const int64_t bytes = in.numel() * in.element_size();
  const int H = topology.hostCount();
  const int me = topology.host();
  // Every host's block, host by host: the output itself where ranks are numbered that way.
  const bool inPlace = hostOrderIsRankOrder(topology);
  at::Tensor all = inPlace ? bytesOf(out) : at::empty({bytes * topology.size()}, at::kByte);
  std::vector<int64_t> blockOffset(H + 1, 0);
  for (int h = 0; h < H; ++h) {
    blockOffset[h + 1] =
        blockOffset[h] + static_cast<int64_t>(topology.ranksOn(h).size()) * bytes;
  }
  at::Tensor hostBlock = all.narrow(0, blockOffset[me], blockOffset[me + 1] - blockOffset[me]);
  at::Tensor mine = bytesOf(in);
  if (levels.host.size() > 1) {
    if (inPlace && mine.data_ptr() == bytePtr(hostBlock) + topology.localRank() * bytes) {
      mine = mine.clone(); // in place (as FSDP calls it): the step reads what it writes
    }
    levels.host.allgather(ctx, hostBlock, mine, InHostLevel::Step::kFollowing)();
  } else {
    copyUnlessSame(hostBlock, mine);
  }
  if (levels.leader()) {
    const InterHostEngine& leaders = *levels.rail; // the leaders' rail lists hosts in order
    leaders.wait(leaders.allgatherBlocks(all, blockOffset, /*alone=*/true), ctx);
  }
  if (levels.host.size() > 1) {
    // The other hosts' blocks: those before this host's, and those after.
    if (blockOffset[me] > 0) {
      levels.host.broadcast(ctx, all.narrow(0, 0, blockOffset[me]), 0)();
    }
    if (blockOffset[me + 1] < blockOffset[H]) {
      levels.host.broadcast(
          ctx, all.narrow(0, blockOffset[me + 1], blockOffset[H] - blockOffset[me + 1]), 0)();
    }
  }
  if (!inPlace) {
    placeByRank(topology, bytePtr(all), out, bytes);
  }
}

} // namespace

void allgatherData(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output) {
  const Topology& topology = levels.topology;
  at::Tensor in = input.reshape(-1);
  at::Tensor out = output.view(-1);
  const Algorithm algorithm = levels.algorithms.chooseBeyondRecords(
      Collective::kAllgather, static_cast<size_t>(out.numel()) * out.element_size());
  if (algorithm == Algorithm::kAllgatherLeaders) {
    allgatherThroughLeaders(levels, ctx, in, out);
    return;
  }
  if (algorithm == Algorithm::kAllgatherSwap) {
    // Rank order is host order: one all-to-all of the input to every member writes the output
    // in place (one step, where gloo's all-gather ring takes one per other host; two hosts
    // swap: InterHostEngine::allgather).
    debug_log::note("one rank per host, all-to-all of the input");
    at::Tensor outBytes = bytesOf(out);
    at::Tensor inBytes = bytesOf(in);
    levels.rail->wait(levels.rail->allgather(outBytes, inBytes), ctx);
    return;
  }
  // Per chunk: on rail k, every host's rank k's piece, straight into its place in the output;
  // meanwhile inside the host its ranks' pieces; then inside the host every other host's
  // pieces, which the rails brought. Every piece lands in place: no staging tensor, no copy
  // into the output at the end (before: rail blocks, then host blocks, then a copy into place).
  const InterHostEngine& rail = *levels.rail;
  const int me = topology.host();
  const int k = topology.localRank();
  const int64_t n = in.numel();
  const Chunking plan(n, lineElements(in.element_size()), levels.settings, in.element_size());
  auto pieceOf = [&](int rank, int c) {
    return out.narrow(0, rank * n + plan.begin(c), plan.length(c));
  };
  auto hostPieces = [&](int h, int c) {
    std::vector<at::Tensor> perRank;
    for (const int rank : topology.ranksOn(h)) {
      perRank.push_back(pieceOf(rank, c));
    }
    return perRank;
  };
  // Two hosts swap on their rail's links, this thread moving the bytes while the host level
  // gathers the host's own pieces (issued first, and started at once): the first stage is the
  // pipeline's blocking one. It issues an in-host step too, in the same place on every rank
  // (every rail has links or none), so every rank still issues the host's steps in one order.
  const bool swapOnLinks = rail.size() == 2 && rail.hasLinks();
  runPipeline(
      plan.count,
      {[&](int c) -> Pending {
         at::Tensor mine = pieceOf(topology.rank(), c);
         copyUnlessSame(mine, in.narrow(0, plan.begin(c), plan.length(c)));
         Pending inHost =
             levels.host.allgather(ctx, hostPieces(me, c), mine, InHostLevel::Step::kFollowing);
         if (swapOnLinks) {
           levels.host.expedite();
         }
         Pending across = railAllgather(
             rail, ctx, mine, [&](int h) { return pieceOf(topology.ranksOn(h)[k], c); },
             swapOnLinks);
         if (swapOnLinks) {
           across();
           return inHost;
         }
         return [across, inHost] {
           across();
           inHost();
         };
       },
       [&](int c) -> Pending {
         std::vector<Pending> steps;
         for (int h = 0; h < topology.hostCount(); ++h) {
           if (h != me) {
             steps.push_back(levels.host.allgather(
                 ctx, hostPieces(h, c), pieceOf(topology.ranksOn(h)[k], c),
                 InHostLevel::Step::kFollowing));
           }
         }
         return [steps] {
           for (const Pending& step : steps) {
             step();
           }
         };
       }},
      swapOnLinks ? 0 : -1, [&] { levels.host.expedite(); });
}

void allgather(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output) {
  const Topology& topology = levels.topology;
  const size_t bytes = static_cast<size_t>(input.numel()) * input.element_size();
  if (levels.algorithms.choose(Collective::kAllgather, bytes * topology.size()) !=
      Algorithm::kAllgatherRecords) {
    agree(levels, ctx);
    allgatherData(levels, ctx, input, output);
    return;
  }
  // Small: every host's inputs ride with the agreement, host by host, each host's in local
  // rank order (hosts may differ in size).
  debug_log::note("inline with the agreement");
  const Combine combine{concatenated, concatenated};
  const Bytes result = agree(levels, ctx, viewOf(input.contiguous()), &combine);
  at::Tensor out = output.view(-1);
  placeByRank(topology, result.data(), out, static_cast<int64_t>(bytes));
}

// ---- reduce-scatter ----------------------------------------------------------------------------

void reduceScatterData(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output,
    const ReduceSpec& spec) {
  const Topology& topology = levels.topology;
  at::Tensor in = input.reshape(-1);
  at::Tensor out = output.view(-1);
  const int64_t n = out.numel();
  const int W = topology.size();
  if (!topology.uniform()) {
    // Every rank sends part d to rank d and folds what it receives in rank order: exactly the
    // one-level reduction.
    debug_log::note("an all-to-all over every rank, folded in rank order");
    at::Tensor parts = at::empty_like(in);
    at::Tensor partsBytes = bytesOf(parts);
    at::Tensor inBytes = bytesOf(in);
    levels.everyone.wait(levels.everyone.alltoall(partsBytes, inBytes), ctx);
    std::vector<const void*> srcs;
    for (int r = 0; r < W; ++r) {
      srcs.push_back(bytePtr(parts) + r * n * in.element_size());
    }
    fold(spec, out.data_ptr(), srcs, n);
    return;
  }
  // Per chunk of the parts: inside the host, reduce-scatter the parts destined to each rail
  // (rank k keeps the host's sum of the parts for rail k's ranks), then on the rail an
  // all-to-all of those sums and a fold in host order.
  const InterHostEngine& rail = *levels.rail;
  const int L = levels.host.size();
  const int H = rail.size();
  // One rank per host: one chunk, one engine operation (nothing in-host to overlap, and the
  // leaders' links carry one operation at a time).
  HierarchySettings settings = levels.settings;
  if (levels.oneRankPerHost()) {
    settings.chunkBytes = std::numeric_limits<size_t>::max() / 2;
  }
  const Chunking plan(n, lineElements(in.element_size()), settings, in.element_size(), L * H,
                      /*wholeChunks=*/levels.oneRankPerHost());
  const ReduceSpec across = crossSpec(spec);
  struct State {
    at::Tensor sums;   // [H][m]: this host's sum of the parts for rail peers on each host
    at::Tensor pieces; // [H][m]: every host's sum of this rank's part
  };
  std::vector<State> states(plan.count);
  runPipeline(
      plan.count,
      {[&](int c) -> Pending {
         State& s = states[c];
         const int64_t m = plan.length(c);
         // One chunk of hosts of one rank numbered in host order: the input is in rail order.
         bool inRailOrder = plan.count == 1;
         for (int k = 0; k < L; ++k) {
           for (int h = 0; h < H; ++h) {
             inRailOrder = inRailOrder && topology.ranksOn(h)[k] == k * H + h;
           }
         }
         // memcpy, not ATen's copy_: where ranks share cores its OpenMP threads spin after a
         // large copy and starve the network threads (copiesOf). 3x1's reduce-scatter of 4 MiB
         // under torchrun (OMP_NUM_THREADS unset): 20-26 ms with copy_ into a new tensor,
         // 5.5-7.5 ms with neither (gloo's: 24-36 ms).
         at::Tensor byRail = inRailOrder ? in : at::empty({L * H * m}, in.options()); // [k][h][m]
         for (int k = 0; k < L && !inRailOrder; ++k) {
           for (int h = 0; h < H; ++h) {
             const int rank = topology.ranksOn(h)[k];
             copyUnlessSame(byRail.narrow(0, (k * H + h) * m, m),
                            in.narrow(0, rank * n + plan.begin(c), m));
           }
         }
         if (L == 1) {
           // The input itself is never written: premultiplied, it is a new tensor.
           s.sums = spec.premul ? byRail.mul(spec.factor) : byRail;
           return nullptr;
         }
         s.sums = at::empty({H * m}, in.options());
         return levels.host.reduceScatter(ctx, s.sums, byRail, hostSpec(spec));
       },
       [&](int c) {
         State& s = states[c];
         s.pieces = at::empty_like(s.sums);
         at::Tensor outBytes = bytesOf(s.pieces);
         at::Tensor inBytes = bytesOf(s.sums);
         return waitEngine(rail, ctx, rail.alltoall(outBytes, inBytes));
       },
       [&](int c) -> Pending {
         State& s = states[c];
         const int64_t m = plan.length(c);
         std::vector<const void*> srcs;
         for (int h = 0; h < H; ++h) {
           srcs.push_back(bytePtr(s.pieces) + h * m * in.element_size());
         }
         fold(across, bytePtr(out) + plan.begin(c) * in.element_size(), srcs, m);
         s = State();
         return nullptr;
       }});
}

void reduceScatter(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output,
    const ReduceSpec& spec) {
  agree(levels, ctx);
  reduceScatterData(levels, ctx, input, output, spec);
}

void barrier(const Levels& levels, const OpContext& ctx) {
  agree(levels, ctx);
}

// ---- through the engine over every rank --------------------------------------------------------

void gather(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    std::vector<at::Tensor>& outputs,
    int root) {
  agree(levels, ctx);
  debug_log::note("gloo's own gather over every rank");
  std::vector<at::Tensor> in{bytesOf(input.contiguous())};
  std::vector<std::vector<at::Tensor>> out;
  if (levels.topology.rank() == root) {
    out.emplace_back();
    for (auto& t : outputs) {
      out[0].push_back(bytesOf(t));
    }
  }
  c10d::GatherOptions opts;
  opts.rootRank = root;
  opts.timeout = ctx.timeout;
  levels.everyone.wait(levels.everyone->gather(out, in, opts), ctx);
}

void scatter(
    const Levels& levels,
    const OpContext& ctx,
    std::vector<at::Tensor>& inputs,
    at::Tensor& output,
    int root) {
  agree(levels, ctx);
  debug_log::note("gloo's own scatter over every rank");
  std::vector<at::Tensor> out{bytesOf(output)};
  std::vector<std::vector<at::Tensor>> in;
  if (levels.topology.rank() == root) {
    in.emplace_back();
    for (auto& t : inputs) {
      in[0].push_back(bytesOf(t.contiguous()));
    }
  }
  c10d::ScatterOptions opts;
  opts.rootRank = root;
  opts.timeout = ctx.timeout;
  levels.everyone.wait(levels.everyone->scatter(out, in, opts), ctx);
}

void alltoall(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output,
    const std::vector<int64_t>& sendBytes,
    const std::vector<int64_t>& recvBytes) {
  const InterHostEngine& everyone = levels.everyone;
  const int W = everyone.size();
  // Every rank's sizes, so every rank checks every pair alike (and raises alike).
  at::Tensor mine = at::empty({2 * W}, at::kLong);
  std::copy(sendBytes.begin(), sendBytes.end(), mine.data_ptr<int64_t>());
  std::copy(recvBytes.begin(), recvBytes.end(), mine.data_ptr<int64_t>() + W);
  at::Tensor all = at::empty({2 * W * W}, at::kLong);
  const int64_t sizesBytes = static_cast<int64_t>(mine.numel() * mine.element_size());
  if (static_cast<size_t>(sizesBytes * W) <= levels.settings.inlineBytes) {
    // The sizes ride with the agreement (as a small all-gather's data): one exchange, not two.
    const Combine combine{concatenated, concatenated};
    const Bytes result = agree(levels, ctx, viewOf(mine), &combine);
    placeByRank(levels.topology, result.data(), all, sizesBytes);
  } else {
    agree(levels, ctx);
    at::Tensor allBytes = bytesOf(all);
    at::Tensor mineBytes = bytesOf(mine);
    everyone.wait(everyone.allgather(allBytes, mineBytes), ctx);
  }
  const int64_t* sizes = all.data_ptr<int64_t>();
  std::string mismatches;
  for (int s = 0; s < W; ++s) {
    for (int d = 0; d < W; ++d) {
      const int64_t sent = sizes[s * 2 * W + d];
      const int64_t expected = sizes[d * 2 * W + W + s];
      if (sent != expected) {
        mismatches += c10::str(
            "\n  rank ", s, " sends ", sent, " bytes to rank ", d, ", which expects ", expected);
      }
    }
  }
  // As on one host (algorithms::alltoall): every rank saw every size, so every rank raises.
  TORCH_CHECK_VALUE(
      mismatches.empty(),
      "dummy alltoall (rank ",
      ctx.rank,
      "): input and output split sizes do not match across ranks; no data was exchanged:",
      mismatches);
  at::Tensor outBytes = bytesOf(output);
  at::Tensor inBytes = bytesOf(input.contiguous());
  // One rank per host numbered in host order: the rail's members are the ranks, and its links
  // move the parts with no thread hand-off (3x1, 4 MiB: its all-gather on the links 3.2-3.9 ms
  // against gloo's all-to-all of the same bytes 4.1 ms).
  if (levels.oneRankPerHost() && levels.rail->hasLinks() &&
      hostOrderIsRankOrder(levels.topology)) {
    debug_log::note("one rank per host, on the links");
    levels.rail->wait(
        levels.rail->alltoall(outBytes, inBytes, recvBytes, sendBytes, /*alone=*/true), ctx);
    return;
  }
  debug_log::note("gloo's own alltoall over every rank");
  everyone.wait(everyone.alltoall(outBytes, inBytes, recvBytes, sendBytes), ctx);
}

at::Tensor allreduceSparse(const Levels& levels, const OpContext& ctx, const at::Tensor& input) {
  agree(levels, ctx);
  debug_log::note("gloo's own sparse allreduce over every rank");
  std::vector<at::Tensor> tensors{input.clone()};
  auto work = levels.everyone->allreduce_sparse(tensors);
  levels.everyone.wait(work, ctx);
  return work->result()[0];
}

} // namespace dummy_collectives::hierarchy::two_level
