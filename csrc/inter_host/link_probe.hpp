#pragma once

#include <cstddef>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "inter_host/topology.hpp"

namespace dummy_collectives::inter_host {

// The least chunk size of the group's pipelines, where inter_host_min_chunk_bytes is auto (-1),
// from the link between hosts as measured once, at group creation.
//
// Pipelining pays where the link is much slower than a host's memory: a 1 Gbit/s link idles
// around the stages a pipeline of few chunks exposes, so it wants at least 8 chunks of 256 KiB.
// Where the link is fast (or is the veths of one machine), a chunk's in-host stages hide little
// and every chunk costs an engine operation, so whole chunks of inter_host_chunk_bytes win
// (docs/benchmarks.md, "Chunk size and count"). The hosts' leaders time an allreduce among
// themselves; the leader of the first host publishes the verdict in the store, and every rank
// of the group reads it, so all cut their messages alike.
//
// The leaders measure on a gloo group of their own, dropped after (its connections close), not
// on the rail: bulk traffic both ways leaves a TCP connection pacing later small messages below
// the link's speed, which would slow every later small broadcast on the rail
// (docs/benchmarks.md, "The link probe's own connections").
struct LinkVerdict {
  size_t minChunkBytes = 0;
  double gbitPerSecond = 0; // as the slowest leader measured it
};
LinkVerdict chooseMinChunkBytes(
    const Topology& topology,
    c10d::Backend* leaders, // the leaders' probe group, on a host's leader; else null
    c10d::Store& store,
    size_t chunkBytes);

// Below this rate (bits per second) a pipeline's chunks are 256 KiB: the threshold sits between
// what the probe measures through a 1 Gbit/s link and on unshaped veths (docs/benchmarks.md,
// "Chunk size and count"), so a 2.5 GbE link or faster counts as fast.
constexpr double kSlowLinkBitsPerSecond = 1.5e9;
constexpr size_t kSlowLinkMinChunkBytes = size_t{256} << 10;

} // namespace dummy_collectives::inter_host
