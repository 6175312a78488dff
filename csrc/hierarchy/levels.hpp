#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "hierarchy/algorithm_table.hpp"
#include "hierarchy/in_host.hpp"
#include "inter_host/engine.hpp"
#include "inter_host/group_health.hpp"
#include "inter_host/topology.hpp"

namespace dummy_collectives::hierarchy {

// What the algorithms use of the cross-host engine (csrc/inter_host/) throughout; its other
// names are written qualified where they are used (inter_host::PeerLinks).
using inter_host::bytesOf;
using inter_host::copiesOf;
using inter_host::copyUnlessSame;
using inter_host::GroupHealth;
using inter_host::InterHostEngine;
using inter_host::Topology;

// Settings every rank of a group that spans hosts shares (checked at group creation).
struct HierarchySettings {
  // Collectives whose data fits travel with the cross-host agreement: one exchange in all.
  size_t inlineBytes; // BackendOptions::interHostInlineBytes (its default: options_table.def)
  // Large messages cross hosts in pieces of this size, each piece's in-host stage overlapping
  // the previous piece's cross-host stage.
  size_t chunkBytes; // BackendOptions::interHostChunkBytes
  // Chunks are at least this large where the message allows (inter_host_min_chunk_bytes, or
  // what the link measured at creation says: inter_host/link_probe.hpp).
  size_t minChunkBytes = 0;
  double linkGbitPerSecond = 0; // as measured at creation (0: not measured)
  // Allreduces beyond this many bytes ride no record (at most inlineBytes). Three or more hosts
  // of one rank on a slow link (inter_host/link_probe.hpp) lower it: a record carries the whole
  // message to every other host, (H - 1) x N from each, where a ring sends 2(H - 1)/H x N.
  size_t allreduceInlineBytes = SIZE_MAX;
  // Where set (those slow-link hosts): from this many bytes a whole message's allreduce is the
  // engine's own (gloo's ring) where it computes what dummy's kernels do; else the member count
  // decides (cross_host_reduction.hpp, CrossHostReduction).
  std::optional<size_t> engineAllreduceMinBytes;
  // Broadcasts of up to this many bytes ride in the root's host's one-way record
  // (agreement.hpp, agreeOneWay); every other leader receives into a record this large. Beyond
  // inlineBytes, hosts of several ranks share the data in shared memory, not in the in-host
  // steps. records (broadcast.cpp).
  size_t oneWayBytes = 0;
};

// Everything a two-level algorithm runs on.
struct Levels {
  const Topology& topology;
  InHostLevel& host;
  // This rank's rail: the ranks with its local rank, one per host. Null where the topology is
  // not uniform and this rank is not its host's leader (local rank 0); leaders' rail is then
  // the one cross-host level of the two-level algorithms.
  InterHostEngine* rail;
  // Every rank of the group: what has no two-level form (gather, scatter, all-to-all, p2p).
  InterHostEngine& everyone;
  GroupHealth& health;
  HierarchySettings settings;
  // Which algorithm runs each collective at each size (algorithm_table.hpp).
  AlgorithmTable algorithms;
  // A broadcast's buffers (agreement.cpp, agreeOneWay), kept since fresh ones cost page faults
  // on every broadcast (a group runs one collective at a time): the record the root's host's
  // leader sends, where it lands on another host's leader, or that leader's verdict on its
  // host's other ranks; and the in-host records of its first step.
  mutable at::Tensor announcements;
  mutable at::Tensor hostRecords;
  // A leader's marks of its cross-host progress on its own steady clock (arrivalClockNs), for
  // what would otherwise compare the hosts' clocks (agreement.cpp): when it last sent a record
  // every other leader needed to finish a collective (none can have begun a later one
  // before), and when its last exchange completed (every leader completes one within a network
  // latency of the others). Both start at the group's creation.
  mutable int64_t lastRecordSentNs = 0;
  mutable int64_t lastExchangeDoneNs = 0;

  bool leader() const {
    return topology.localRank() == 0;
  }
  // Every host runs one rank: no in-host stage to overlap, so a pipeline would only cut the
  // engine's work into more, smaller operations. Collectives then cross hosts in one operation
  // on the whole message (allreduce_one_rank_per_host.cpp, broadcast.cpp, allgather.cpp).
  bool oneRankPerHost() const {
    return topology.oneRankPerHost();
  }
};

} // namespace dummy_collectives::hierarchy
