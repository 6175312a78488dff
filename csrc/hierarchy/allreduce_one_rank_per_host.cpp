#include "hierarchy/two_level_forms.hpp"

#include <cstring>

#include "hierarchy/cross_host_reduction.hpp"

namespace dummy_collectives::hierarchy::two_level {

namespace {

// One rank per host on the leaders' links: an allreduce's segment (below), by host count. The
// pieces of a segment stay in cache while they are sent, received and folded; each segment costs
// two waits for every host. Segments beat both the swap and gloo's own allreduce on two hosts;
// on three, 2 MiB segments are the best of those measured (docs/benchmarks.md, "One rank per
// host, large allreduces" and "Three hosts of one rank: pieces on the links").
constexpr int64_t kTwoHostsSegmentBytes = int64_t{4} << 20;
constexpr int64_t kHostsSegmentBytes = int64_t{2} << 20;

} // namespace

// One rank per host, on the leaders' links, segment by segment: each segment's pieces are
// folded where they are kept and sent back (foldPiecesOnLinks). A ring's bytes, without gloo's
// thread hand-offs, each host folding its piece of the message, the same bits on every rank for
// every dtype and operation. An all-to-all and all-gather of padded copies, or a ring of
// send-receive steps on the links, would lose to gloo's ring on three hosts sharing two cores:
// each step waits for all three processes, one of which two cores always leave waiting
// (docs/benchmarks.md, "Three hosts of one rank: pieces on the links").
void allreduceInSegmentsOnLinks(
    const Levels& levels, const OpContext& ctx, at::Tensor& flat, const ReduceSpec& spec) {
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
    debug_log::note("one rank per host, in segments on the links");
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

} // namespace dummy_collectives::hierarchy::two_level
