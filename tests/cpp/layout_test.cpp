// What crosses processes as bytes: the agreement's records (between hosts), the descriptor every
// rank publishes and the shared-memory segment's layout (inside a host); and each collective's
// names, which errors, the profiler and the flight recorder read.

#include <cstddef>
#include <cstring>
#include <set>
#include <string>
#include <type_traits>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "c10d/collective_names.hpp"
#include "hierarchy/agreement_records.hpp"
#include "shm/shm_layout.hpp"

namespace dummy_collectives {
namespace {

using hierarchy::ByteView;
namespace records = hierarchy::records;

constexpr auto kFirstKind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
constexpr auto kLastKind = static_cast<uint32_t>(CollectiveKind::kAllreduceSparse);

OpDescriptor allreduceOf(int64_t numel) {
  OpDescriptor op;
  op.seq = 7;
  op.kind = CollectiveKind::kAllreduce;
  op.dtype = static_cast<int32_t>(c10::ScalarType::Float);
  op.numel = numel;
  op.reduceOp = 0; // SUM
  return op;
}

ByteView viewOf(const std::string& text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

std::string textOf(ByteView view) {
  return {reinterpret_cast<const char*>(view.data), view.size};
}

TEST(Records, HeaderAndPayloadRoundTrip) {
  records::Header header;
  header.op = allreduceOf(1000);
  header.verdict = records::kHostDisagrees;
  header.writer = 3;
  header.lastRank = 2;
  header.arrivedNs = 123456789;
  const std::string payload = "what the host combined";
  header.payloadBytes = payload.size();
  const size_t bytes = records::recordBytes(64);
  const at::Tensor record = records::makeRecord(bytes, header, viewOf(payload));

  const auto read = records::readRecords(record, 1, bytes);
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].header.op, header.op);
  EXPECT_EQ(read[0].header.verdict, records::kHostDisagrees);
  EXPECT_EQ(read[0].header.writer, 3);
  EXPECT_EQ(read[0].header.lastRank, 2);
  EXPECT_EQ(read[0].header.arrivedNs, 123456789);
  EXPECT_EQ(textOf(read[0].payload), payload);
  EXPECT_EQ(textOf(records::payloadOf(record)), payload);
}

TEST(Records, SizesAreWholeCacheLinesAfterTheHeader) {
  EXPECT_EQ(records::recordBytes(0), records::kHeaderBytes);
  EXPECT_EQ(records::recordBytes(1), records::kHeaderBytes + 64);
  EXPECT_EQ(records::recordBytes(64), records::kHeaderBytes + 64);
  EXPECT_EQ(records::recordBytes(65), records::kHeaderBytes + 128);
  EXPECT_TRUE(std::is_trivially_copyable_v<records::Header>);
  EXPECT_LE(sizeof(records::Header), records::kHeaderBytes);
}

TEST(Records, ThePaddingOfAHeaderIsZeroedBeforeItTravels) {
  at::Tensor record = at::full({static_cast<int64_t>(records::recordBytes(0))}, 0xAB, at::kByte);
  records::writeRecord(record, records::Header{}, {});
  const auto* bytes = record.data_ptr<uint8_t>();
  for (size_t i = sizeof(records::Header); i < records::kHeaderBytes; ++i) {
    ASSERT_EQ(bytes[i], 0) << "byte " << i;
  }
}

TEST(Records, SeveralRecordsReadAtTheirOffsets) {
  const size_t bytes = records::recordBytes(16);
  at::Tensor all = at::empty({static_cast<int64_t>(3 * bytes)}, at::kByte);
  for (int i = 0; i < 3; ++i) {
    records::Header header;
    header.writer = i;
    const std::string payload(static_cast<size_t>(i + 1), static_cast<char>('a' + i));
    header.payloadBytes = payload.size();
    records::writeRecord(all.narrow(0, static_cast<int64_t>(i * bytes), bytes), header,
                         viewOf(payload));
  }
  const auto read = records::readRecords(all, 3, bytes);
  ASSERT_EQ(read.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(read[i].header.writer, i);
    EXPECT_EQ(textOf(read[i].payload),
              std::string(static_cast<size_t>(i + 1), static_cast<char>('a' + i)));
  }
  EXPECT_EQ(records::payloadsOf(read).size(), 3u);
}

TEST(Records, APayloadThatDoesNotFitIsRefused) {
  const at::Tensor record = at::empty({static_cast<int64_t>(records::recordBytes(8))}, at::kByte);
  const std::string tooLong(200, 'x');
  EXPECT_THROW(records::writeRecord(record, records::Header{}, viewOf(tooLong)), c10::Error);
}

TEST(Records, AHeaderClaimingMoreThanItsBufferIsRefused) {
  // A record that is no record (garbage, or cut short) must not be read past its buffer.
  records::Header header;
  header.payloadBytes = 0;
  at::Tensor record = records::makeRecord(records::recordBytes(8), header, {});
  header.payloadBytes = 1u << 20;
  std::memcpy(record.data_ptr(), &header, sizeof(header));
  try {
    records::readRecords(record, 1, records::recordBytes(8));
    FAIL() << "a record claiming 1 MiB in a " << record.numel() << "-byte buffer was read";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("past the end"), std::string::npos) << e.what();
  }
  EXPECT_THROW(records::readRecords(record, {record.numel() - 8}), c10::Error);
  // Its header alone is readable: the caller judges the call before its payload.
  EXPECT_EQ(records::readHeader(record, 0).payloadBytes, uint64_t{1} << 20);
  EXPECT_THROW(records::readHeader(record, record.numel() - 8), c10::Error);
}

TEST(Descriptor, IsFortyEightBytesAndComparesEveryField) {
  EXPECT_EQ(sizeof(OpDescriptor), 48u);
  EXPECT_TRUE(std::is_trivially_copyable_v<OpDescriptor>);
  const OpDescriptor base = allreduceOf(10);
  auto differs = [&](auto change) {
    OpDescriptor other = base;
    change(other);
    return other != base;
  };
  EXPECT_FALSE(differs([](OpDescriptor&) {}));
  EXPECT_TRUE(differs([](OpDescriptor& o) { o.seq++; }));
  EXPECT_TRUE(differs([](OpDescriptor& o) { o.numel++; }));
  EXPECT_TRUE(differs([](OpDescriptor& o) { o.layout++; }));
  EXPECT_TRUE(differs([](OpDescriptor& o) { o.kind = CollectiveKind::kReduce; }));
  EXPECT_TRUE(differs([](OpDescriptor& o) { o.dtype++; }));
  EXPECT_TRUE(differs([](OpDescriptor& o) { o.root = 1; }));
  EXPECT_TRUE(differs([](OpDescriptor& o) { o.reduceOp = 3; }));
  EXPECT_TRUE(differs([](OpDescriptor& o) { o.count = 2; }));
  EXPECT_TRUE(differs([](OpDescriptor& o) { o.path = DataPath::kCudaIpc; }));
}

TEST(Descriptor, DescribesTheCallAsAUserWroteIt) {
  OpDescriptor op = allreduceOf(10);
  EXPECT_EQ(op.describe(), "allreduce #7 of 10 Float elements with SUM");
  op.kind = CollectiveKind::kBroadcast;
  op.reduceOp = -1;
  op.root = 2;
  op.path = DataPath::kCudaIpc;
  EXPECT_EQ(op.describe(), "broadcast #7 of 10 Float elements from root 2 through CUDA IPC buffers");
  op.kind = static_cast<CollectiveKind>(99); // a descriptor a peer wrote garbage into
  EXPECT_NE(op.describe().find("unknown collective"), std::string::npos);
}

TEST(CollectiveNames, EveryKindHasItsOwnNames) {
  std::set<std::string> methods;
  for (uint32_t k = kFirstKind; k <= kLastKind; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    const CollectiveNames& names = namesOf(kind);
    EXPECT_EQ(names.kind, kind);
    EXPECT_STREQ(collectiveName(kind), names.method);
    EXPECT_EQ(std::string(names.title).rfind("dummy:", 0), 0u) << names.title;
    EXPECT_GT(std::strlen(names.recorded), 0u);
    methods.insert(names.method);
  }
  EXPECT_EQ(methods.size(), kLastKind - kFirstKind + 1);
  EXPECT_EQ(findNames(static_cast<CollectiveKind>(0)), nullptr);
  EXPECT_EQ(findNames(static_cast<CollectiveKind>(kLastKind + 1)), nullptr);
  EXPECT_THROW(namesOf(static_cast<CollectiveKind>(kLastKind + 1)), c10::Error);
}

TEST(ShmLayout, WhatARankWritesOftenSitsOnItsOwnLines) {
  EXPECT_EQ(alignof(RankControl), kLine);
  EXPECT_EQ(sizeof(RankControl) % kLine, 0u);
  // A peer's step counter, descriptors and arrival stamps arrive in one transfer.
  EXPECT_LE(offsetof(RankControl, arrivedNs) + sizeof(RankControl::arrivedNs), kLine);
  EXPECT_GE(offsetof(RankControl, pid), kLine);
  // The two counters of a channel have different writers: separate lines.
  EXPECT_EQ(offsetof(ChannelControl, consumed), kLine);
  EXPECT_EQ(sizeof(ChannelControl), 2 * kLine);
}

TEST(ShmLayout, SizesArePagesAndRingsShrinkWithTheGroup) {
  for (int size : {1, 2, 3, 8, 64}) {
    const auto n = static_cast<size_t>(size);
    EXPECT_EQ(controlBytes(size) % 4096, 0u) << size;
    EXPECT_GE(controlBytes(size),
              sizeof(ControlBlock) + n * sizeof(RankControl) + n * n * sizeof(ChannelControl));
    EXPECT_EQ(ringBytes(size) % 4096, 0u) << size;
    EXPECT_EQ(ringsBytes(size), n * n * ringBytes(size));
  }
  EXPECT_EQ(ringBytes(2), size_t{256} << 10);
  EXPECT_EQ(ringBytes(1024), size_t{16} << 10);
  EXPECT_GE(ringBytes(8), ringBytes(64));
}

} // namespace
} // namespace dummy_collectives
