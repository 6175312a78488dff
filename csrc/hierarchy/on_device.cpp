// The device algorithms (two_level.hpp): allreduce:device, broadcast:device, allgather:device.
// Every step is waited for before the next reads what it wrote, since the links move the
// memory outside any stream: in-host steps return complete (in_host.hpp), and what this thread
// queues on the device is waited for before the links or an in-host step (which may run on
// another thread, another stream) read it (waitForDevice).
#include "hierarchy/two_level_forms.hpp"

#include <dummy_collectives/device_collectives.hpp>

#include "hierarchy/two_level.hpp"

namespace dummy_collectives::hierarchy::two_level {

namespace {

// Hosts of as many ranks, several each: reduce-scatter inside each host (local rank k keeps
// part k), every rail folds its part across hosts on its own links, all-gather inside each
// host. Each rank's link carries 1/L of the message, as NCCL's rings spread a host's traffic
// over its NICs. Whole tensors, no pipeline: in-host steps on the device path hand a whole
// tensor over at once.
void allreduceOnRailsOnDevice(
    const Levels& levels, const OpContext& ctx, at::Tensor& flat, const ReduceSpec& spec) {
  debug_log::note("where the tensor lives, on the rails");
  const int L = levels.host.size();
  const int64_t part = roundUp(ceilDiv(flat.numel(), L), lineElements(flat.element_size()));
  at::Tensor work = flat;
  if (part * L != flat.numel()) {
    work = at::zeros({part * L}, flat.options());
    work.narrow(0, 0, flat.numel()).copy_(flat);
  }
  at::Tensor shard = at::empty({part}, flat.options());
  waitForDevice(work);
  levels.host.reduceScatter(ctx, shard, work, hostSpec(spec))();
  allreduceInSegmentsOnLinks(levels, ctx, shard, spec); // on this rank's rail
  levels.host.allgather(ctx, work, shard, InHostLevel::Step::kFollowing)();
  if (!work.is_same(flat)) {
    flat.copy_(work.narrow(0, 0, flat.numel()));
  }
}

// Reduce to each host's leader, fold across hosts on the leaders' links in segments, broadcast
// inside each host.
void allreduceThroughLeadersOnDevice(
    const Levels& levels, const OpContext& ctx, at::Tensor& flat, const ReduceSpec& spec) {
  debug_log::note("where the tensor lives, through the leaders");
  const bool hostOfOne = levels.host.size() == 1;
  if (hostOfOne && spec.premul) {
    flat.mul_(spec.factor); // what the in-host step applies on hosts of several ranks
  } else if (!hostOfOne) {
    levels.host.reduce(ctx, flat, 0, hostSpec(spec))();
  }
  if (levels.leader()) {
    allreduceInSegmentsOnLinks(levels, ctx, flat, spec); // waits for the device first
  }
  if (!hostOfOne) {
    levels.host.broadcast(ctx, flat, 0)();
  }
}

} // namespace

void allreduceOnDeviceData(
    const Levels& levels, const OpContext& ctx, at::Tensor& flat, const ReduceSpec& spec) {
  if (flat.numel() == 0) { // every rank's size was agreed
    return;
  }
  // An in-host step may run on another thread, whose stream orders nothing this one queued.
  waitForDevice(flat);
  if (levels.topology.uniform() && levels.host.size() > 1) {
    allreduceOnRailsOnDevice(levels, ctx, flat, spec);
  } else {
    allreduceThroughLeadersOnDevice(levels, ctx, flat, spec);
  }
}

// The root's host shares the data inside it; its leader passes it along a chain of the hosts'
// leaders on the links, each passing it on as it lands; every other host's leader shares it
// inside its host.
void broadcastOnDeviceData(
    const Levels& levels, const OpContext& ctx, at::Tensor& flat, int root) {
  debug_log::note("where the tensor lives, along a chain of the leaders");
  if (flat.numel() == 0) {
    return;
  }
  waitForDevice(flat); // in-host steps return complete: the one wait before the links read it
  const Topology& topology = levels.topology;
  const int rootHost = topology.hostOf(root);
  const bool onRootHost = topology.host() == rootHost;
  if (onRootHost && levels.host.size() > 1) {
    levels.host.broadcast(ctx, flat, topology.localRankOf(root))();
  }
  if (levels.leader()) {
    broadcastAlongChain(*levels.rail, ctx, flat, rootHost); // the leaders' rail: hosts in order
  }
  if (!onRootHost && levels.host.size() > 1) {
    levels.host.broadcast(ctx, flat, 0)();
  }
}

void allreduceOnDevice(
    const Levels& levels, const OpContext& ctx, at::Tensor& data, const ReduceSpec& spec) {
  agree(levels, ctx);
  at::Tensor flat = data.view(-1);
  allreduceOnDeviceData(levels, ctx, flat, spec);
}

void broadcastOnDevice(const Levels& levels, const OpContext& ctx, at::Tensor& data, int root) {
  const OneWayAgreement agreed = agreeOneWay(levels, ctx, {}, root);
  if (agreed.announced) {
    levels.rail->wait(agreed.announced, ctx);
  }
  at::Tensor flat = bytesOf(data);
  broadcastOnDeviceData(levels, ctx, flat, root);
}

void allgatherOnDevice(
    const Levels& levels, const OpContext& ctx, const at::Tensor& input, at::Tensor& output) {
  agree(levels, ctx);
  at::Tensor out = output.view(-1);
  if (out.numel() > 0) {
    allgatherThroughLeaders(levels, ctx, input.reshape(-1), out);
  }
}

} // namespace dummy_collectives::hierarchy::two_level
