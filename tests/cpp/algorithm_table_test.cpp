// The cross-host algorithms' names, the selection syntax (UCC's) and the table a group builds
// from its layout, its settings and the user's selection.

#include <stdexcept>
#include <string>

#include <c10/util/StringUtil.h>
#include <gtest/gtest.h>

#include "hierarchy/algorithm_table.hpp"
#include "hierarchy/levels.hpp"

namespace dummy_collectives::hierarchy {
namespace {

constexpr size_t K = 1024;
constexpr size_t M = K * K;

HierarchySettings settingsFor(const GroupLayout& layout) {
  HierarchySettings settings{};
  settings.inlineBytes = 16 * K;
  settings.chunkBytes = 4 * M;
  sizeRecords(settings, layout);
  return settings;
}

GroupLayout oneRankPerHost(int hosts) {
  return GroupLayout{hosts, /*oneRankPerHost=*/true, /*uniform=*/true, /*links=*/true};
}
GroupLayout twoRanksPerHost(int hosts) {
  return GroupLayout{hosts, false, true, true};
}

TEST(AlgorithmNames, EveryNameRoundTripsThroughASelection) {
  for (const AlgorithmName& a : algorithmNames()) {
    const std::string name = qualifiedName(a.algorithm);
    EXPECT_EQ(name.rfind(std::string(collectiveName(a.collective)) + ":", 0), 0u) << name;
    EXPECT_EQ(collectiveOf(a.algorithm), a.collective);
    const std::string rule = c10::str(collectiveName(a.collective), ":@", a.name);
    const auto rules = parseAlgorithmSelection(rule);
    ASSERT_EQ(rules.size(), 1u) << rule;
    EXPECT_EQ(rules[0].algorithm, a.algorithm) << rule;
  }
}

TEST(AlgorithmSelection, ParsesRangesInAnyFieldOrder) {
  const auto rules =
      parseAlgorithmSelection("allreduce:0-4k,1m-inf:@pieces#@chain:broadcast");
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0].collective, Collective::kAllreduce);
  ASSERT_EQ(rules[0].ranges.size(), 2u);
  EXPECT_EQ(rules[0].ranges[0].begin, 0u);
  EXPECT_EQ(rules[0].ranges[0].end, 4 * K); // both ends included
  EXPECT_EQ(rules[0].ranges[1].begin, M);
  EXPECT_EQ(rules[0].ranges[1].end, SIZE_MAX);
  EXPECT_EQ(rules[1].algorithm, Algorithm::kBroadcastChain);
  EXPECT_EQ(rules[1].ranges.size(), 1u); // every size
  EXPECT_TRUE(parseAlgorithmSelection("").empty());
}

TEST(AlgorithmSelection, EachMistakeIsNamed) {
  for (const char* bad : {"allreduce", "@pieces", "allreduce:@chain", "allreduce:@nope",
                          "allreduce:4k-1k:@pieces", "allreduce:1x:@pieces", "alltoall:@swap"}) {
    try {
      parseAlgorithmSelection(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(ByteRanges, PrintAsTheLogPrintsThem) {
  EXPECT_EQ(sizeText(16 * K), "16K");
  EXPECT_EQ(sizeText(SIZE_MAX), "inf");
  EXPECT_EQ(rangeText(ByteRange{0, 16 * K}), "[0, 16K]");
  EXPECT_EQ(rangeText(ByteRange{16 * K + 1, SIZE_MAX}), "(16K, inf]");
  EXPECT_EQ(rangeText(ByteRange{0, M - 1}), "[0, 1M)");
}

// Every size maps to exactly one algorithm that can run on the layout.
void expectCoversEverySize(const AlgorithmTable& table, const GroupLayout& layout) {
  for (const Collective c :
       {Collective::kAllreduce, Collective::kBroadcast, Collective::kAllgather}) {
    for (size_t bytes : {size_t{0}, size_t{1}, 4 * K, 16 * K, 16 * K + 1, 256 * K, M, 4 * M,
                         32 * M, 32 * M + 1, size_t{1} << 40}) {
      const Algorithm a = table.choose(c, bytes);
      EXPECT_EQ(collectiveOf(a), c);
      EXPECT_EQ(AlgorithmTable::whyNot(a, layout), "") << qualifiedName(a) << " at " << bytes;
      EXPECT_NE(table.chooseBeyondRecords(c, bytes), Algorithm::kAllreduceRecords);
    }
  }
}

TEST(AlgorithmTable, DefaultsOfTwoHostsOfOneRank) {
  const GroupLayout layout = oneRankPerHost(2);
  const AlgorithmTable table(layout, settingsFor(layout), "");
  expectCoversEverySize(table, layout);
  EXPECT_EQ(table.choose(Collective::kAllreduce, 4), Algorithm::kAllreduceRecords);
  EXPECT_EQ(table.choose(Collective::kAllreduce, kFewHostsInlineBytes),
            Algorithm::kAllreduceRecords);
  EXPECT_EQ(table.choose(Collective::kAllreduce, kFewHostsInlineBytes + 1),
            Algorithm::kAllreduceSegments);
  EXPECT_EQ(table.choose(Collective::kBroadcast, kOneWayBytes), Algorithm::kBroadcastRecord);
  EXPECT_EQ(table.choose(Collective::kBroadcast, kOneWayBytes + 1), Algorithm::kBroadcastEngine);
  EXPECT_EQ(table.choose(Collective::kAllgather, 64 * M), Algorithm::kAllgatherSwap);
  EXPECT_TRUE(table.skipped().empty());
}

TEST(AlgorithmTable, DefaultsOfHostsOfSeveralRanks) {
  const GroupLayout layout = twoRanksPerHost(2);
  const AlgorithmTable table(layout, settingsFor(layout), "");
  expectCoversEverySize(table, layout);
  EXPECT_EQ(table.choose(Collective::kAllreduce, 16 * K), Algorithm::kAllreduceRecords);
  EXPECT_EQ(table.choose(Collective::kAllreduce, 16 * K + 1), Algorithm::kAllreduceRails);
  EXPECT_EQ(table.choose(Collective::kBroadcast, 4 * M), Algorithm::kBroadcastPipeline);
  GroupLayout uneven = layout;
  uneven.uniform = false;
  const AlgorithmTable unevenTable(uneven, settingsFor(uneven), "");
  expectCoversEverySize(unevenTable, uneven);
  EXPECT_EQ(unevenTable.choose(Collective::kAllreduce, 4 * M), Algorithm::kAllreduceLeaders);
}

TEST(AlgorithmTable, ChainFromThreeHostsWithLinks) {
  const GroupLayout three = oneRankPerHost(3);
  EXPECT_EQ(AlgorithmTable(three, settingsFor(three), "").choose(Collective::kBroadcast, 64 * M),
            Algorithm::kBroadcastChain);
  GroupLayout withoutLinks = three;
  withoutLinks.links = false;
  const AlgorithmTable table(withoutLinks, settingsFor(withoutLinks), "");
  expectCoversEverySize(table, withoutLinks);
  EXPECT_EQ(table.choose(Collective::kBroadcast, 64 * M), Algorithm::kBroadcastEngine);
  EXPECT_EQ(table.choose(Collective::kAllreduce, 64 * M), Algorithm::kAllreduceRing);
}

TEST(AlgorithmTable, ASelectionPaintsOverTheDefaultsLaterRulesWinning) {
  const GroupLayout layout = oneRankPerHost(2);
  const AlgorithmTable table(
      layout, settingsFor(layout), "allreduce:1m-inf:@ring#allreduce:4m-8m:@pieces");
  EXPECT_EQ(table.choose(Collective::kAllreduce, 2 * M), Algorithm::kAllreduceRing);
  EXPECT_EQ(table.choose(Collective::kAllreduce, 4 * M), Algorithm::kAllreducePieces);
  EXPECT_EQ(table.choose(Collective::kAllreduce, 8 * M), Algorithm::kAllreducePieces);
  EXPECT_EQ(table.choose(Collective::kAllreduce, 8 * M + 1), Algorithm::kAllreduceRing);
  EXPECT_EQ(table.choose(Collective::kAllreduce, 4), Algorithm::kAllreduceRecords);
  bool marked = false;
  for (const std::string& line : table.describe()) {
    marked = marked || line.find("DUMMY_COLLECTIVES_ALGO") != std::string::npos;
  }
  EXPECT_TRUE(marked);
}

TEST(AlgorithmTable, RulesThatCannotApplyAreSkippedSayingWhy) {
  const GroupLayout layout = twoRanksPerHost(2);
  const AlgorithmTable table(layout, settingsFor(layout),
                             "allreduce:@segments#allreduce:0-1m:@records");
  ASSERT_EQ(table.skipped().size(), 2u);
  EXPECT_NE(table.skipped()[0].find("one rank per host"), std::string::npos);
  EXPECT_NE(table.skipped()[1].find("carries up to 16K"), std::string::npos);
  EXPECT_EQ(table.choose(Collective::kAllreduce, 16 * K), Algorithm::kAllreduceRecords);
  EXPECT_EQ(table.choose(Collective::kAllreduce, 16 * K + 1), Algorithm::kAllreduceRails);
}

} // namespace
} // namespace dummy_collectives::hierarchy
