#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "hierarchy/algorithm_selection.hpp"

namespace dummy_collectives::hierarchy {

struct HierarchySettings;

// What decides which cross-host algorithms a group can run; the same on every rank.
struct GroupLayout {
  int hosts = 0;
  bool oneRankPerHost = false;
  bool uniform = false; // every host runs as many ranks
  bool links = false;   // the hosts' leaders' own connections carry data (inter_host_links)
};

// Gloo's own allreduce, whose ring pipelines, beats one exchange of pieces (an all-to-all, a
// fold and an all-gather) from a few MiB beyond two members, and loses below
// (docs/benchmarks.md, "The cross-host exchange"). Two members swap at every size up to 32 MiB:
// one round trip, where the ring takes two; from it the ring's folding half of the message wins
// (docs/benchmarks.md, "One rank per host, large allreduces"). Also each pipelined chunk's
// choice (cross_host_reduction.hpp, CrossHostReduction).
constexpr size_t kEngineAllreduceMinBytes = size_t{4} << 20;
constexpr size_t kTwoMembersEngineAllreduceMinBytes = size_t{32} << 20;
// Hosts of one rank pass a broadcast along a chain of the hosts from this many hosts: the root
// then sends the message once, where gloo's broadcast sends it to every other host.
constexpr int kChainMinHosts = 3;

// Records: what rides with the agreement between 2-3 hosts of one rank each, where no in-host
// step pays for a record's size and one exchange of the whole message beats the engine's ring of
// several steps (docs/benchmarks.md, "One rank per host"); beyond that many hosts every leader
// would send the whole message to many others.
constexpr size_t kFewHostsInlineBytes = size_t{256} << 10;
constexpr int kFewHosts = 3;
// What rides in a broadcast's one-way record on 2-3 hosts: beyond it the data follows in a
// second operation, a hand-off more; each side copies the data once, so records stay small next
// to the transfer (docs/benchmarks.md, "One rank per host").
constexpr size_t kOneWayBytes = size_t{1} << 20;
// Records of three or more hosts of one rank on a slow link, whose data goes to every other
// host: up to this size their extra bytes cost less than the ring's steps; beyond it an
// allreduce is gloo's ring and a broadcast goes along the chain of the hosts
// (docs/benchmarks.md, "Three or more hosts of one rank on a slow link").
constexpr size_t kSlowLinkRecordBytes = size_t{64} << 10;

// Completes `settings` (inlineBytes from the option, the link's measured rate) with what the
// records carry on this layout and what a slow link changes; every rank computes the same.
void sizeRecords(HierarchySettings& settings, const GroupLayout& layout);

// Which algorithm runs each collective at each size, for one group: the defaults its layout
// and settings call for, with the user's selection (BackendOptions::algo, DUMMY_COLLECTIVES_ALGO)
// painted over them where its algorithms apply. Every rank builds the same table (the layout,
// the settings and the option are the group's), so every rank runs the same algorithm.
class AlgorithmTable {
 public:
  AlgorithmTable(
      const GroupLayout& layout, const HierarchySettings& settings, const std::string& selection);

  Algorithm choose(Collective collective, size_t bytes) const;
  // Where the data cannot ride with the agreement (a caller with no record to carry it): the
  // table's choice, or where that is a record algorithm, the one chosen beyond the records.
  Algorithm chooseBeyondRecords(Collective collective, size_t bytes) const;

  // The table as the debug log prints it: a line per collective, each range with its algorithm
  // and why ("DUMMY_COLLECTIVES_ALGO" where the user chose it).
  std::vector<std::string> describe() const;
  // The selection's rules (or parts of them) this group does not apply, each with why.
  const std::vector<std::string>& skipped() const {
    return skipped_;
  }

  // Why `algorithm` cannot run on `layout` (empty: it can); and the largest message it carries
  // (SIZE_MAX: any).
  static std::string whyNot(Algorithm algorithm, const GroupLayout& layout);
  static size_t capacity(Algorithm algorithm, const HierarchySettings& settings);

 private:
  struct Row {
    ByteRange range;
    Algorithm algorithm;
    std::string why;
  };
  void paint(Collective collective, const ByteRange& range, Algorithm algorithm, std::string why);
  const std::vector<Row>& rows(Collective collective) const {
    return rows_[static_cast<size_t>(collective)];
  }

  std::array<std::vector<Row>, 3> rows_; // by Collective, ranges in order, covering every size
  std::vector<std::string> skipped_;
};

} // namespace dummy_collectives::hierarchy
