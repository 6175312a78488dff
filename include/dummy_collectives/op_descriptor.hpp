#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

namespace dummy_collectives {

enum class CollectiveKind : uint32_t {
  kAllreduce = 1,
  kAllgather,
  kBroadcast,
  kBarrier,
  kAllgatherBase,
  kAllreduceCoalesced,
  kReduce,
  kAllgatherCoalesced,
  kAllgatherIntoTensorCoalesced,
  kGather,
  kScatter,
  kReduceScatter,
  kReduceScatterBase,
  kReduceScatterTensorCoalesced,
  kAlltoall,
  kAlltoallBase,
  kAllreduceSparse,
};

const char* collectiveName(CollectiveKind kind);

// How a collective's data moves. Every rank must take the same path: a rank that staged its CUDA
// tensor through host memory cannot meet one that exchanges it through CUDA IPC buffers.
enum class DataPath : int32_t {
  kHost = 0,    // host shared memory (CPU tensors, and CUDA tensors staged through the host)
  kCudaIpc = 1, // device buffers shared by CUDA IPC (csrc/cuda)
};

// What one rank asked for, published in shared memory with the first step of every collective.
// Ranks compare descriptors before touching data, so mismatched calls fail on every rank with a
// message describing each rank's call, instead of hanging or mixing unrelated buffers.
struct OpDescriptor {
  // 64-bit fields first: 48 bytes without padding, so two descriptors and two arrival stamps
  // share a rank's step-counter line pair (shm_transport.cpp's RankControl).
  uint64_t seq = 0;      // per-group sequence number of the collective (1-based)
  int64_t numel = 0;     // elements this rank contributes
  uint64_t layout = 0;   // coalesced: digest of every tensor's dtype and numel, in order
  CollectiveKind kind = CollectiveKind::kBarrier;
  int32_t dtype = -1;    // c10::ScalarType, -1 where the op carries no data
  int32_t root = -1;     // root rank, -1 where the op has none
  int32_t reduceOp = -1; // c10d::ReduceOp::RedOpType, -1 where the op does not reduce
  int32_t count = 1;     // tensors per rank (coalesced collectives)
  DataPath path = DataPath::kHost; // how the data moves; ranks must agree

  bool operator==(const OpDescriptor& other) const;
  bool operator!=(const OpDescriptor& other) const {
    return !(*this == other);
  }
  std::string describe() const;
};

static_assert(std::is_trivially_copyable_v<OpDescriptor>, "lives in shared memory");
static_assert(sizeof(OpDescriptor) == 48, "see the field order");

} // namespace dummy_collectives
