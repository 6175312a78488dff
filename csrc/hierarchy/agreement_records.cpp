#include "hierarchy/agreement_records.hpp"

#include <cstring>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace dummy_collectives::hierarchy::records {

void writeRecord(const at::Tensor& record, const Header& header, ByteView payload) {
  const auto bytes = static_cast<size_t>(record.numel());
  TORCH_CHECK(
      kHeaderBytes + payload.size <= bytes,
      "dummy_collectives: ", payload.size, " bytes do not fit a ", bytes, "-byte record");
  // Only the header's padding is zeroed (a record crosses hosts as bytes): the payload is
  // copied over the rest, and what follows it is never read.
  auto* base = static_cast<std::byte*>(record.data_ptr());
  std::memset(base, 0, kHeaderBytes);
  std::memcpy(base, &header, sizeof(Header));
  if (payload.size > 0) {
    std::memcpy(base + kHeaderBytes, payload.data, payload.size);
  }
}

at::Tensor makeRecord(size_t bytes, const Header& header, ByteView payload) {
  at::Tensor record = at::empty({static_cast<int64_t>(bytes)}, at::kByte);
  writeRecord(record, header, payload);
  return record;
}

Header readHeader(const at::Tensor& records, int64_t offset) {
  const auto size = static_cast<uint64_t>(records.numel());
  TORCH_CHECK(offset >= 0 && static_cast<uint64_t>(offset) + kHeaderBytes <= size,
              "dummy_collectives: a record at byte ", offset, " of ", size,
              " has no room for its header");
  Header header;
  std::memcpy(&header, static_cast<const std::byte*>(records.data_ptr()) + offset,
              sizeof(Header));
  return header;
}

std::vector<Record> readRecords(const at::Tensor& records, const std::vector<int64_t>& offsets) {
  std::vector<Record> out;
  const auto* base = static_cast<const std::byte*>(records.data_ptr());
  const auto size = static_cast<uint64_t>(records.numel());
  for (const int64_t offset : offsets) {
    Record r;
    r.header = readHeader(records, offset);
    const auto start = static_cast<uint64_t>(offset);
    TORCH_CHECK(r.header.payloadBytes <= size - start - kHeaderBytes,
                "dummy_collectives: the record at byte ", offset, " claims ",
                r.header.payloadBytes, " payload bytes, past the end of its ", size,
                "-byte buffer");
    r.payload = {base + offset + kHeaderBytes, static_cast<size_t>(r.header.payloadBytes)};
    out.push_back(r);
  }
  return out;
}

std::vector<Record> readRecords(const at::Tensor& records, int count, size_t bytes) {
  std::vector<int64_t> offsets;
  for (int i = 0; i < count; ++i) {
    offsets.push_back(static_cast<int64_t>(i * bytes));
  }
  return readRecords(records, offsets);
}

ByteView payloadOf(const at::Tensor& record) {
  return readRecords(record, {0})[0].payload;
}

std::vector<ByteView> payloadsOf(const std::vector<Record>& records) {
  std::vector<ByteView> views;
  for (const auto& r : records) {
    views.push_back(r.payload);
  }
  return views;
}

} // namespace dummy_collectives::hierarchy::records
