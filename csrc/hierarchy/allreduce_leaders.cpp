#include "hierarchy/two_level_forms.hpp"

#include "hierarchy/cross_host_reduction.hpp"

namespace dummy_collectives::hierarchy::two_level {

namespace {

// Through the leaders, an allreduce's chunks are up to this many times inter_host_chunk_bytes:
// each chunk costs the leaders an engine operation, and only they move it across hosts (on
// rails every rank moves its shard, so there 1 MiB chunks are already L times larger)
// (docs/benchmarks.md, "Chunk size and count").
constexpr size_t kLeadersAllreduceChunkFactor = 4;

} // namespace

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

} // namespace dummy_collectives::hierarchy::two_level
