#include "hierarchy/two_level_forms.hpp"

#include <dummy_collectives/device_collectives.hpp>

namespace dummy_collectives::hierarchy::two_level {

// Hosts of different sizes: every host's inputs gathered inside it, straight into their place
// in the output; the hosts' blocks shared among the leaders, each landing in its place (on the
// leaders' links, where they have them: this is the rail's only operation in flight); the
// other hosts' blocks broadcast inside each host. One cross-host step between leaders, where an
// all-gather over every rank crosses hosts once per rank; and no rank moves its own host's
// inputs twice (an in-host all-gather, then the whole output broadcast and copied again, lost
// to gloo). Also allgather:device, on any layout: tensors in CUDA memory stay there.
void allgatherThroughLeaders(
    const Levels& levels, const OpContext& ctx, const at::Tensor& in, at::Tensor& out) {
  debug_log::note("through the leaders");
  const Topology& topology = levels.topology;
  const int64_t bytes = in.numel() * in.element_size();
  const int H = topology.hostCount();
  const int me = topology.host();
  // Every host's block, host by host: the output itself where ranks are numbered that way.
  const bool inPlace = hostOrderIsRankOrder(topology);
  at::Tensor all = inPlace ? bytesOf(out)
                           : at::empty({bytes * topology.size()}, out.options().dtype(at::kByte));
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
      waitForDevice(mine); // the step may run on another thread's stream
    }
    levels.host.allgather(ctx, hostBlock, mine, InHostLevel::Step::kFollowing)();
  } else {
    copyUnlessSame(hostBlock, mine);
  }
  if (levels.leader()) {
    const InterHostEngine& leaders = *levels.rail; // the leaders' rail lists hosts in order
    waitForDevice(hostBlock); // the links read device memory outside any stream
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
    placeByRank(topology, all, out, bytes);
  }
}

} // namespace dummy_collectives::hierarchy::two_level
