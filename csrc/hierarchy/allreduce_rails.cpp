#include "hierarchy/two_level_forms.hpp"

#include "hierarchy/cross_host_reduction.hpp"

namespace dummy_collectives::hierarchy::two_level {

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

} // namespace dummy_collectives::hierarchy::two_level
