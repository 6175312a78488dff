#pragma once

// The agreement's records (agreement.hpp): what each rank and each host's leader write, as bytes
// that cross hosts. A record is a header at its start and a payload at kHeaderBytes; every record
// of a group has one size, so ranks that called different collectives never overrun each other.

#include <cstddef>
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "hierarchy/agreement.hpp"

namespace dummy_collectives::hierarchy::records {

enum Verdict : int32_t {
  kAgreed = 0,
  kHostDisagrees = 1,  // the ranks of the writer's host called different collectives
  kGroupDisagrees = 2, // a leader's broadcast: the group disagrees (its message is the payload)
};

using Header = Agreement::Header;

constexpr size_t kHeaderBytes = 128;
static_assert(sizeof(Header) <= kHeaderBytes, "the header outgrew its space");
static_assert(std::is_trivially_copyable_v<Header>, "headers travel as bytes");

// A record's size: the header and room for `payloadBytes`, in whole cache lines.
inline size_t recordBytes(size_t payloadBytes) {
  return kHeaderBytes + (payloadBytes + 63) / 64 * 64;
}

// `header` and `payload` at the start of `record` (contiguous bytes); raises where the payload
// does not fit.
void writeRecord(const at::Tensor& record, const Header& header, ByteView payload);
at::Tensor makeRecord(size_t bytes, const Header& header, ByteView payload);

struct Record {
  Header header;
  ByteView payload; // a view into the records read
};
// The header of the record at `offset` alone, whatever payload it claims (a record of another
// collective's, which the caller judges before reading further).
Header readHeader(const at::Tensor& records, int64_t offset);
// The records at `offsets` of `records`. Raises where a header claims a payload that runs past
// the end of `records` (a record that is no record: it must never be read past its buffer).
std::vector<Record> readRecords(const at::Tensor& records, const std::vector<int64_t>& offsets);
// `count` records of `bytes` each.
std::vector<Record> readRecords(const at::Tensor& records, int count, size_t bytes);
// The payload of the one record at the start of `record`.
ByteView payloadOf(const at::Tensor& record);
std::vector<ByteView> payloadsOf(const std::vector<Record>& records);

} // namespace dummy_collectives::hierarchy::records
