#pragma once

// How the members of one cross-host level (a rail, or the leaders) reduce a chunk they each hold:
// the exchange, the fold and the gather of every allreduce's cross-host stage.

#include <optional>
#include <vector>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include "hierarchy/algorithm_table.hpp"
#include "hierarchy/two_level_parts.hpp"

namespace dummy_collectives::hierarchy::two_level {

// Where a pipelined chunk is gloo's own allreduce: kEngineAllreduceMinBytes and
// kTwoMembersEngineAllreduceMinBytes (algorithm_table.hpp), which also split a whole message's
// allreduce between allreduce:pieces and allreduce:ring. For float sums and products between two
// members gloo computes what our kernels do to the bit (one commutative operation), so the order
// caveat below does not arise.

// Two members on the links fold halves of chunks this large (foldPiecesOnLinks) and swap smaller
// ones whole: halving the fold pays for the extra round trip on the leaders' large chunks, not
// on the rails' small ones (docs/benchmarks.md, "Halves between two leaders").
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
std::optional<c10d::ReduceOp> engineReduction(const ReduceSpec& spec, bool anyOrder);

// On the links, member m folds piece m of every member's `data` in host order, its own read in
// place and the others' received into scratch (an all-to-all of the pieces), then sends the
// folded piece to every other member, straight into its place in their `data` (an all-gather of
// blocks). A ring's bytes (2(H-1)/H of `data` each way) in two steps where gloo's ring takes
// 2(H-1), no copy of `data`, each member folding one piece; pieces are cut on cache lines, so
// none needs padding (the last may be short, or empty). Two members fold halves: the swap's
// bytes with half its fold. How leaders reduce their large chunks (CrossHostReduction) and
// hosts of one rank their segments (allreduceInSegmentsOnLinks). `scratch`, where large enough,
// receives the others' pieces (else a fresh tensor does). `data` in CUDA memory (the device
// algorithms') moves where it lies and is folded on its device.
void foldPiecesOnLinks(const InterHostEngine& engine, const OpContext& ctx,
                       const ReduceSpec& across, const at::Tensor& data,
                       const at::Tensor& scratch = {});

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

} // namespace dummy_collectives::hierarchy::two_level
