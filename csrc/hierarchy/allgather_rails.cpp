#include "hierarchy/two_level_forms.hpp"

namespace dummy_collectives::hierarchy::two_level {

namespace {

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

} // namespace

// allgather:rails, uniform hosts of several ranks: per chunk, on rail k every host's rank k's
// piece, straight into its place in the output, while the host gathers its own ranks' pieces.
void allgatherOnRails(
    const Levels& levels, const OpContext& ctx, const at::Tensor& in, at::Tensor& out) {
  const Topology& topology = levels.topology;
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

} // namespace dummy_collectives::hierarchy::two_level
