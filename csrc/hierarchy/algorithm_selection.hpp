#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dummy_collectives::hierarchy {

// The collectives whose cross-host algorithm is chosen by size (the others have one form).
enum class Collective { kAllreduce, kBroadcast, kAllgather };

// Every cross-host algorithm, by name. What each does and where it applies: algorithm_table.hpp;
// docs/across_hosts.md, "Cross-host algorithms"; docs/design.md, "Named algorithms, one table".
enum class Algorithm {
  kAllreduceRecords,
  kAllreduceSegments,
  kAllreducePieces,
  kAllreduceRing,
  kAllreduceRails,
  kAllreduceLeaders,
  kAllreduceDevice,
  kBroadcastRecord,
  kBroadcastChain,
  kBroadcastEngine,
  kBroadcastPipeline,
  kBroadcastDevice,
  kAllgatherRecords,
  kAllgatherSwap,
  kAllgatherRails,
  kAllgatherLeaders,
  kAllgatherDevice,
};

struct AlgorithmName {
  Algorithm algorithm;
  Collective collective;
  const char* name; // after the collective's: "allreduce:segments"
};

// Every algorithm, in the order the documentation lists them.
const std::vector<AlgorithmName>& algorithmNames();
const char* collectiveName(Collective collective);
// "allreduce:segments".
std::string qualifiedName(Algorithm algorithm);
Collective collectiveOf(Algorithm algorithm);

// Message sizes in bytes, both ends included ("0-4k" includes 4096); end SIZE_MAX: "inf".
struct ByteRange {
  size_t begin = 0;
  size_t end = SIZE_MAX;
  bool contains(size_t bytes) const {
    return bytes >= begin && bytes <= end;
  }
};
// "[0, 16K]", "(16K, inf]", "[0, 1M)": an end just past a round size is open.
std::string rangeText(const ByteRange& range);
std::string sizeText(size_t bytes); // "16K", "4M", "inf", "1000"

// One rule of a user's selection: `collective` at these sizes runs `algorithm`.
struct SelectionRule {
  Collective collective;
  std::vector<ByteRange> ranges; // at least one
  Algorithm algorithm;
  std::string text; // the rule as written, for messages
};

// Parses a selection in UCC's syntax (its TUNE variables): rules separated by '#', each of
// colon-separated fields in any order: the collective (required), size ranges ("0-4k",
// "4k-inf", several joined by ','; all sizes where none is given) and "@name" (required). Where
// rules overlap, the later one wins.
// Sizes are bytes with an optional binary suffix (k, m, g) or "inf". Empty: no rule.
// Throws std::invalid_argument saying which rule is wrong and how.
std::vector<SelectionRule> parseAlgorithmSelection(const std::string& text);

} // namespace dummy_collectives::hierarchy
