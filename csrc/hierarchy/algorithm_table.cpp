#include "hierarchy/algorithm_table.hpp"

#include <algorithm>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "hierarchy/levels.hpp"
#include "inter_host/link_probe.hpp"

namespace dummy_collectives::hierarchy {
namespace {

constexpr std::array<Collective, 3> kCollectives{
    Collective::kAllreduce, Collective::kBroadcast, Collective::kAllgather};

ByteRange upTo(size_t bytes) { // inclusive
  return ByteRange{0, bytes};
}

bool ridesInRecords(Algorithm algorithm) {
  return algorithm == Algorithm::kAllreduceRecords || algorithm == Algorithm::kBroadcastRecord ||
      algorithm == Algorithm::kAllgatherRecords;
}

} // namespace

void sizeRecords(HierarchySettings& settings, const GroupLayout& layout) {
  const bool fewHosts = layout.hosts <= kFewHosts;
  if (layout.oneRankPerHost && fewHosts) {
    settings.inlineBytes = std::max(settings.inlineBytes, kFewHostsInlineBytes);
  }
  // Three or more hosts of one rank choose between records and gloo's ring by the link's rate.
  const bool recordsOrRing = layout.oneRankPerHost && layout.hosts > 2;
  const bool slow = recordsOrRing &&
      settings.linkGbitPerSecond * 1e9 < inter_host::kSlowLinkBitsPerSecond;
  if (slow) {
    settings.allreduceInlineBytes = kSlowLinkRecordBytes;
    settings.engineAllreduceMinBytes = 0;
  }
  settings.allreduceInlineBytes = std::min(settings.allreduceInlineBytes, settings.inlineBytes);
  // A broadcast's record goes one way (no copy for every peer, as an exchange sends), so it
  // carries more than an exchange; but past a few hosts gloo's broadcast tree forwards every
  // receiver's whole record, so they stay at the exchange's size.
  settings.oneWayBytes = fewHosts ? std::max(settings.inlineBytes, kOneWayBytes)
                                  : settings.inlineBytes;
  if (slow) {
    settings.oneWayBytes = std::min(settings.oneWayBytes, kSlowLinkRecordBytes);
  }
}

std::string AlgorithmTable::whyNot(Algorithm algorithm, const GroupLayout& layout) {
  switch (algorithm) {
    case Algorithm::kAllreduceRecords:
    case Algorithm::kBroadcastRecord:
    case Algorithm::kAllgatherRecords:
      return "";
    case Algorithm::kAllreduceDevice:
    case Algorithm::kBroadcastDevice:
    case Algorithm::kAllgatherDevice:
      return layout.links ? "" : "it needs the leaders' links (inter_host_links)";
    case Algorithm::kAllreduceSegments:
    case Algorithm::kBroadcastChain:
      if (!layout.oneRankPerHost) {
        return "it needs one rank per host";
      }
      return layout.links ? "" : "it needs the leaders' links (inter_host_links)";
    case Algorithm::kAllreducePieces:
    case Algorithm::kAllreduceRing:
    case Algorithm::kBroadcastEngine:
    case Algorithm::kAllgatherSwap:
      return layout.oneRankPerHost ? "" : "it needs one rank per host";
    case Algorithm::kAllreduceRails:
    case Algorithm::kAllgatherRails:
      if (layout.oneRankPerHost) {
        return "it needs several ranks per host";
      }
      return layout.uniform ? "" : "it needs as many ranks on every host";
    case Algorithm::kAllreduceLeaders:
    case Algorithm::kBroadcastPipeline:
    case Algorithm::kAllgatherLeaders:
      return layout.oneRankPerHost ? "it needs several ranks on some host" : "";
  }
  return "unknown algorithm";
}

size_t AlgorithmTable::capacity(Algorithm algorithm, const HierarchySettings& settings) {
  switch (algorithm) {
    case Algorithm::kAllreduceRecords:
    case Algorithm::kAllgatherRecords: // counting every rank's input
      return settings.inlineBytes;
    case Algorithm::kBroadcastRecord:
      return settings.oneWayBytes;
    default:
      return SIZE_MAX;
  }
}

AlgorithmTable::AlgorithmTable(
    const GroupLayout& layout, const HierarchySettings& settings, const std::string& selection) {
  using C = Collective;
  using A = Algorithm;
  // ---- the defaults -------------------------------------------------------------------------
  paint(C::kAllreduce, ByteRange{}, layout.oneRankPerHost ? A::kAllreduceSegments
                                    : layout.uniform      ? A::kAllreduceRails
                                                          : A::kAllreduceLeaders,
        layout.oneRankPerHost ? "on the leaders' links, each host folding a piece: a ring's "
                                "bytes in two steps"
            : layout.uniform  ? "each rail carries its shard, pipelined with the in-host stages"
                              : "hosts of different sizes: their leaders carry the message");
  if (layout.oneRankPerHost && !(layout.links &&
                                 (layout.hosts == 2 || !settings.engineAllreduceMinBytes))) {
    // No links, or a slow link between three or more hosts: one exchange of pieces, then gloo's
    // ring where it pipelines better.
    const size_t ringFrom = settings.engineAllreduceMinBytes.value_or(
        layout.hosts == 2 ? kTwoMembersEngineAllreduceMinBytes : kEngineAllreduceMinBytes);
    paint(C::kAllreduce, ByteRange{}, A::kAllreducePieces,
          "one exchange of pieces, a fold, an all-gather: fewer steps than a ring");
    if (ringFrom > 0) {
      paint(C::kAllreduce, ByteRange{ringFrom, SIZE_MAX}, A::kAllreduceRing,
            settings.engineAllreduceMinBytes ? "a slow link: gloo's ring sends the fewest bytes"
                                             : "gloo's ring pipelines large messages best");
    } else {
      paint(C::kAllreduce, ByteRange{}, A::kAllreduceRing,
            "a slow link: gloo's ring sends the fewest bytes");
    }
  }
  paint(C::kAllreduce, upTo(settings.allreduceInlineBytes), A::kAllreduceRecords,
        "rides with the agreement: one exchange (inter_host_inline_bytes)");

  paint(C::kBroadcast, ByteRange{},
        !layout.oneRankPerHost ? A::kBroadcastPipeline
            : layout.links && layout.hosts >= kChainMinHosts ? A::kBroadcastChain
                                                             : A::kBroadcastEngine,
        !layout.oneRankPerHost ? "chunks cross hosts while the hosts copy others"
            : layout.links && layout.hosts >= kChainMinHosts
            ? "every host passes it on as it lands: the root sends it once"
            : "the engine's broadcast of the whole message");
  paint(C::kBroadcast, upTo(settings.oneWayBytes), A::kBroadcastRecord,
        "rides in the root's host's one-way record");

  paint(C::kAllgather, ByteRange{},
        layout.oneRankPerHost ? A::kAllgatherSwap
            : layout.uniform  ? A::kAllgatherRails
                              : A::kAllgatherLeaders,
        layout.oneRankPerHost ? "one all-to-all of the input, in place; two hosts swap"
            : layout.uniform  ? "each rail carries its ranks' pieces, pipelined"
                              : "hosts of different sizes: the leaders share the hosts' blocks");
  paint(C::kAllgather, upTo(settings.inlineBytes), A::kAllgatherRecords,
        "every rank's input rides with the agreement (inter_host_inline_bytes)");

  // ---- the user's selection, rule by rule (a later one wins) --------------------------------
  for (const SelectionRule& rule : parseAlgorithmSelection(selection)) {
    if (std::string why = whyNot(rule.algorithm, layout); !why.empty()) {
      skipped_.push_back(c10::str("'", rule.text, "': ", why));
      continue;
    }
    const size_t most = capacity(rule.algorithm, settings);
    for (const ByteRange& range : rule.ranges) {
      if (range.begin > most) {
        skipped_.push_back(c10::str("'", rule.text, "' at ", rangeText(range), ": ",
                                    qualifiedName(rule.algorithm), " carries up to ",
                                    sizeText(most)));
        continue;
      }
      if (range.end > most) {
        skipped_.push_back(c10::str("'", rule.text, "' beyond ", sizeText(most), ": ",
                                    qualifiedName(rule.algorithm), " carries up to ",
                                    sizeText(most)));
      }
      paint(rule.collective, ByteRange{range.begin, std::min(range.end, most)}, rule.algorithm,
            "DUMMY_COLLECTIVES_ALGO");
    }
  }
}

void AlgorithmTable::paint(
    Collective collective, const ByteRange& range, Algorithm algorithm, std::string why) {
  if (range.begin > range.end) {
    return;
  }
  std::vector<Row>& rows = rows_[static_cast<size_t>(collective)];
  std::vector<Row> painted;
  bool placed = false;
  for (const Row& row : rows) {
    if (row.range.end < range.begin || row.range.begin > range.end) {
      if (!placed && row.range.begin > range.end) {
        painted.push_back(Row{range, algorithm, why});
        placed = true;
      }
      painted.push_back(row);
      continue;
    }
    if (row.range.begin < range.begin) { // the part before
      painted.push_back(Row{ByteRange{row.range.begin, range.begin - 1}, row.algorithm, row.why});
    }
    if (!placed) {
      painted.push_back(Row{range, algorithm, why});
      placed = true;
    }
    if (row.range.end > range.end) { // the part after
      painted.push_back(Row{ByteRange{range.end + 1, row.range.end}, row.algorithm, row.why});
    }
  }
  if (!placed) {
    painted.push_back(Row{range, algorithm, std::move(why)});
  }
  rows = std::move(painted);
}

Algorithm AlgorithmTable::choose(Collective collective, size_t bytes) const {
  for (const Row& row : rows(collective)) {
    if (row.range.contains(bytes)) {
      return row.algorithm;
    }
  }
  TORCH_INTERNAL_ASSERT(false, "the algorithm table misses ", bytes, " bytes");
  return rows(collective).back().algorithm;
}

Algorithm AlgorithmTable::chooseBeyondRecords(Collective collective, size_t bytes) const {
  const Algorithm chosen = choose(collective, bytes);
  if (!ridesInRecords(chosen)) {
    return chosen;
  }
  // The first at a larger size (records carry a bounded size, so one follows them).
  for (const Row& row : rows(collective)) {
    if (row.range.end >= bytes && !ridesInRecords(row.algorithm)) {
      return row.algorithm;
    }
  }
  TORCH_INTERNAL_ASSERT(false, "the algorithm table has only records");
  return chosen;
}

std::vector<std::string> AlgorithmTable::describe() const {
  std::vector<std::string> lines;
  for (const Collective c : kCollectives) {
    std::string line = c10::str(collectiveName(c), ":");
    for (const Row& row : rows(c)) {
      line += c10::str(" ", rangeText(row.range), " @", qualifiedName(row.algorithm)
                           .substr(std::string(collectiveName(c)).size() + 1),
                       " (", row.why, ");");
    }
    line.pop_back();
    lines.push_back(std::move(line));
  }
  return lines;
}

} // namespace dummy_collectives::hierarchy
