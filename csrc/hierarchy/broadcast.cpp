#include "hierarchy/two_level_forms.hpp"

#include <cstring>

namespace dummy_collectives::hierarchy::two_level {

// broadcast:chain: hosts of one rank on the leaders' links pass the message along a chain of the
// hosts from the root's, every host passing it on as it arrives: the root sends it once, where a
// broadcast from the root sends it to every other host (gloo's too). One operation on the links a
// host: bytes go on as they land, with no chunk to wait for.
void broadcastAlongChain(
    const InterHostEngine& rail, const OpContext& ctx, at::Tensor& flat, int rootHost) {
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
  // The root's record first: on the leaders' links one operation is in flight at a time.
  if (agreed.announced) {
    levels.rail->wait(agreed.announced, ctx);
  }
  if (algorithm == Algorithm::kBroadcastDevice) {
    broadcastOnDeviceData(levels, ctx, flat, root);
    return;
  }
  if (levels.oneRankPerHost()) {
    // The whole message in one engine operation: no in-host stage to overlap.
    InterHostEngine& rail = *levels.rail;
    if (algorithm == Algorithm::kBroadcastChain) {
      debug_log::note("one rank per host, along a chain of the hosts");
      broadcastAlongChain(rail, ctx, flat, rootHost);
      return;
    }
    rail.wait(rail.broadcast(flat, rootHost), ctx);
    return;
  }
  broadcastPipelined(levels, ctx, flat, root);
}

} // namespace dummy_collectives::hierarchy::two_level
