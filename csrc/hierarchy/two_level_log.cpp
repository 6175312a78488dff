// What a group across hosts tells the debug log once, at creation: its hosts, engines, plan and
// algorithm table (DUMMY_COLLECTIVES_DEBUG=INFO).
#include "hierarchy/two_level_lowering.hpp"

#include <algorithm>
#include <cstring>

#include <c10/util/StringUtil.h>

#include <dummy_collectives/debug_log.hpp>
#include "hierarchy/cross_host_device.hpp"
#include "inter_host/link_probe.hpp"
#include "hierarchy/two_level.hpp"
#include "shm/shm_lowering.hpp"

namespace dummy_collectives::hierarchy {

void TwoLevelLowering::logCreation(int me) const {
  using debug_log::bytes;
  // Enough hosts to see the layout; a thousand-host job need not print them all on every rank.
  constexpr int kHostsShown = 16;
  for (int h = 0; h < std::min(topology_.hostCount(), kHostsShown); ++h) {
    DC_LOG(kInfo, me, "host ", h, " of ", topology_.hostCount(), ": ",
           topology_.describeHost(h).substr(std::strlen("host "))); // "host <name> ..."
  }
  if (topology_.hostCount() > kHostsShown) {
    DC_LOG(kInfo, me, "... and ", topology_.hostCount() - kHostsShown, " more hosts");
  }
  const std::string between = topology_.uniform()
      ? c10::str("rails (ranks per host ", topology_.localSize(), "; this rank's rail: ranks ",
                 c10::Join(", ", topology_.rail(topology_.localRank())), ")")
      : c10::str("leaders (hosts run different numbers of ranks; their local rank 0 carries "
                 "the cross-host stage, this rank ",
                 topology_.localRank() == 0 ? "among them)" : "not)");
  DC_LOG(kInfo, me, "cross-host engine gloo (inter_host ", options_->interHost, ") over ", between,
         "; CUDA tensors cross hosts ", device_->describe());
  const size_t inlined = levels_->settings.inlineBytes;
  DC_LOG(kInfo, me, "cross-host plan: up to ", bytes(inlined),
         inlined == options_->interHostInlineBytes
             ? " (inter_host_inline_bytes)"
             : c10::str(" (inter_host_inline_bytes ", bytes(options_->interHostInlineBytes),
                        ", raised: ", topology_.hostCount(),
                        " hosts of one rank, no in-host step pays for it)"),
         " ride with the agreement (one exchange); larger messages ",
         levels_->oneRankPerHost()
             ? c10::str("cross hosts whole, in one engine operation",
                        !linksBetweenHosts()       ? ""
                            : topology_.hostCount() == 2
                            ? " on the leaders' links (allreduce in 4 MiB segments, half folded "
                              "on each host)"
                            : c10::str(" on the leaders' links (",
                                       levels_->settings.engineAllreduceMinBytes
                                           ? "allreduce as gloo's own on this slow link"
                                           : "allreduce in 2 MiB segments, each host folding a "
                                             "piece",
                                       "; broadcasts along a chain of the hosts)"),
                        " (one rank per host: no in-host stage for a pipeline to overlap)")
             : c10::str("are pipelined in at least ", two_level::kMinChunks, " chunks of ",
                        bytes(levels_->settings.minChunkBytes), " to inter_host_chunk_bytes ",
                        bytes(options_->interHostChunkBytes),
                        options_->interHostMinChunkBytes >= 0
                            ? std::string(" (inter_host_min_chunk_bytes)")
                            : c10::str(" (the link between hosts measured ",
                                       levels_->settings.linkGbitPerSecond, " Gbit/s at "
                                       "creation: chunks as small as ",
                                       bytes(inter_host::kSlowLinkMinChunkBytes), " below ",
                                       inter_host::kSlowLinkBitsPerSecond / 1e9, " Gbit/s)"),
                        linksBetweenHosts()
                            ? c10::str(", each chunk's cross-host stage on ",
                                       topology_.uniform() ? "this rail's" : "the leaders'",
                                       " links, driven by the waiting thread")
                            : std::string()));
  if (levels_->oneRankPerHost() && levels_->settings.linkGbitPerSecond > 0) {
    DC_LOG(kInfo, me, "cross-host plan: the link between hosts measured ",
           levels_->settings.linkGbitPerSecond, " Gbit/s at creation: ",
           levels_->settings.engineAllreduceMinBytes
               ? c10::str("below ", inter_host::kSlowLinkBitsPerSecond / 1e9,
                          " Gbit/s, allreduces beyond ",
                          bytes(levels_->settings.allreduceInlineBytes),
                          " ride no record and run gloo's own allreduce (its ring sends 2(H-1)/H "
                          "of the message from each host, a record all of it to every other "
                          "host), and broadcasts beyond ", bytes(levels_->settings.oneWayBytes),
                          " go along the chain of the hosts")
               : c10::str("at least ", inter_host::kSlowLinkBitsPerSecond / 1e9,
                          " Gbit/s, allreduce records as large as the others"));
  }
  for (const std::string& line : levels_->algorithms.describe()) {
    DC_LOG(kInfo, me, "cross-host algorithms: ", line);
  }
  if (me == 0) {
    for (const std::string& rule : levels_->algorithms.skipped()) {
      DC_LOG(kWarn, me, "DUMMY_COLLECTIVES_ALGO: this group (", topology_.hostCount(), " hosts, ",
             topology_.oneRankPerHost() ? "one rank each"
                 : topology_.uniform()  ? c10::str(topology_.localSize(), " ranks each")
                                        : "of different sizes",
             ") skips ", rule);
    }
  }
  DC_LOG(kInfo, me, "cross-host records: ",
         linksBetweenHosts()
             ? c10::str("links of the hosts' leaders, driven by the waiting thread: ", links_.why,
                        linksText_.empty() ? "" : c10::str("; this rank's: ", linksText_))
             : links_.why);
  DC_LOG(kInfo, me, "cross-host plan: broadcasts send the root's host's record one way (as "
         "gloo's own broadcast; every other host checks it), with up to ",
         bytes(levels_->settings.oneWayBytes), " of data, larger data after the check; a "
         "mismatch that a host other than the root's finds fails the group");
  hostShm_->logCreation(me);
}

} // namespace dummy_collectives::hierarchy
