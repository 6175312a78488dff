#include "hierarchy/two_level_forms.hpp"

namespace dummy_collectives::hierarchy::two_level {

namespace {

// A pipelined broadcast's chunks are this many times inter_host_chunk_bytes.
constexpr size_t kBroadcastChunkFactor = 4;

} // namespace

// broadcast:pipeline, hosts of several ranks, after the root's record: chunks cross hosts on the
// root's rail (uniform hosts) or through the leaders while the hosts copy others.
void broadcastPipelined(const Levels& levels, const OpContext& ctx, at::Tensor& flat, int root) {
  const Topology& topology = levels.topology;
  const int rootHost = topology.hostOf(root);
  const int rootLocal = topology.localRankOf(root);
  const bool onRootHost = topology.host() == rootHost;
  // The in-host stages are copies, far cheaper than the cross-host one: whole chunks of 4 x
  // inter_host_chunk_bytes, since each chunk costs the engine an operation and a copy hides
  // little (docs/benchmarks.md, "Chunk size and count").
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

} // namespace dummy_collectives::hierarchy::two_level
