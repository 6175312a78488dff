#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include <dummy_collectives/hierarchy/levels.hpp>

namespace dummy_collectives::hierarchy {

// Bytes in flight, and a view of them.
using Bytes = std::vector<std::byte>;
struct ByteView {
  const std::byte* data = nullptr;
  size_t size = 0;
};

// What the collective combines on the way (small messages: their data rides along). combineHost
// turns the payloads of a host's ranks (local rank order) into what the host sends; combineAll
// turns every host's contribution (host order) into the result. Both run only once every rank
// concerned called the same collective. Each result must fit in settings.inlineBytes.
struct Combine {
  std::function<Bytes(const std::vector<ByteView>& localPayloads)> host;
  std::function<Bytes(const std::vector<ByteView>& hostPayloads)> all;
};

// The first step of every collective of a group that spans hosts: every rank learns that every
// rank of the group called the same collective, or every rank raises the same mismatch error
// (DistBackendError) before any data moved, and the group stays usable -- as on one host.
//
// Every exchange has one fixed size (a header plus inlineBytes), whatever the collective, so
// ranks that called different collectives still exchange the same bytes:
//   1. an all-gather of every rank's header (and payload) inside each host: each host knows
//      whether its ranks agree;
//   2. an all-gather across hosts of each host's header and combined payload: on every rail
//      (uniform topologies: each rank then knows every host's verdict, and since every rank
//      agreed with its host and with its rail, the verdicts agree everywhere), or among the
//      hosts' leaders, which then broadcast the verdict and the result inside their hosts.
// Returns the combined result (empty without `combine`).
Bytes agree(
    const Levels& levels,
    const OpContext& ctx,
    ByteView payload = {},
    const Combine* combine = nullptr);

} // namespace dummy_collectives::hierarchy
