#include "inter_host/links_choice.hpp"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

#include "inter_host/ucx_links.hpp"
#include "ucx/ucx_api.hpp"

namespace dummy_collectives::inter_host {
namespace {

std::string loadsKey(int host) {
  return c10::str("dummy_collectives/ucx_loads/", host);
}

} // namespace

LinksChoice LinksChoice::decide(
    const BackendOptions& options, const Topology& topology, c10d::Store& store) {
  const std::string& asked = options.interHost;
  if (asked == "gloo") {
    return {Engine::kNone, "gloo (inter_host gloo)"};
  }
  // ucx or auto: each host's leader says whether UCX loads there ("" where it does).
  if (topology.localRank() == 0) {
    std::string why;
    const bool loads = ucx::available(&why);
    const std::string said = loads ? "" : c10::str("-", why);
    store.set(loadsKey(topology.host()), std::vector<uint8_t>(said.begin(), said.end()));
  }
  for (int host = 0; host < topology.hostCount(); ++host) {
    const std::vector<uint8_t> said = store.get(loadsKey(host));
    if (said.empty()) {
      continue;
    }
    const std::string why(said.begin() + 1, said.end());
    TORCH_CHECK_WITH(
        DistBackendError, asked != "ucx", "dummy_collectives: rank ", topology.rank(),
        ": inter_host is 'ucx', but UCX does not load on ", topology.describeHost(host), ": ",
        why, " (DUMMY_COLLECTIVES_INTER_HOST=auto falls back on gloo)");
    return {Engine::kNone,
            c10::str("gloo (UCX does not load on ", topology.describeHost(host), ": ", why, ")")};
  }
  return {Engine::kUcx, c10::str("UCX (inter_host ", asked, ")")};
}

std::unique_ptr<PeerLinks> makeLinks(
    const LinksChoice& choice,
    const c10::intrusive_ptr<c10d::Store>& store,
    const Topology& topology,
    int railIndex,
    std::chrono::milliseconds timeout,
    std::shared_ptr<LinkHangUp> hangUp,
    std::function<std::chrono::nanoseconds()> pollFor) {
  TORCH_CHECK(choice.engine == LinksChoice::Engine::kUcx,
              "dummy_collectives: no links to make between hosts");
  return std::make_unique<UcxLinks>(store, topology.rail(railIndex), topology.host(),
                                    topology.addresses(), timeout, std::move(hangUp),
                                    std::move(pollFor));
}

std::string describeLinks(const PeerLinks& links) {
  const auto* onUcx = dynamic_cast<const UcxLinks*>(&links);
  return onUcx != nullptr ? onUcx->describe() : "links of an unknown engine";
}

} // namespace dummy_collectives::inter_host
