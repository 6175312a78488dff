#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <dummy_collectives/options.hpp>
#include "inter_host/peer_links.hpp"
#include "inter_host/topology.hpp"

namespace dummy_collectives::inter_host {

// What carries the agreement's records (and, one rank per host, the data) between hosts: links
// of the hosts' leaders (peer_links.hpp) on an engine, or nothing (gloo carries everything).
// `inter_host`: `auto` takes UCX where it loads on every host, else gloo alone; `ucx` requires
// UCX; `gloo` is gloo alone.
struct LinksChoice {
  enum class Engine { kNone, kUcx };
  Engine engine = Engine::kNone;
  std::string why; // for the debug log: what was chosen, or why nothing was

  bool any() const {
    return engine != Engine::kNone;
  }

  // Every rank of the group decides alike: where UCX may be chosen, each host's leader says in
  // `store` whether it loads there, and every rank reads what every host said. Throws a
  // DistBackendError where `ucx` was asked for and some host cannot load it.
  static LinksChoice decide(
      const BackendOptions& options, const Topology& topology, c10d::Store& store);
};

// The links of this rank's rail (`railIndex`: its local rank where hosts are uniform, else 0)
// on the chosen engine; every member makes them at once.
// `pollFor`: how long a wait on UCX polls before it sleeps (the host's wait policy).
std::unique_ptr<PeerLinks> makeLinks(
    const LinksChoice& choice,
    const c10::intrusive_ptr<c10d::Store>& store,
    const Topology& topology,
    int railIndex,
    std::chrono::milliseconds timeout,
    std::shared_ptr<LinkHangUp> hangUp,
    std::function<std::chrono::nanoseconds()> pollFor);

// "UCX 1.22.0 (...), tcp/eth0": what the links run on.
std::string describeLinks(const PeerLinks& links);

} // namespace dummy_collectives::inter_host
