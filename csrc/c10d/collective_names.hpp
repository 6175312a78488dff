#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <dummy_collectives/op_descriptor.hpp>

namespace dummy_collectives {

// Each collective's names, spelled once: the c10d::Backend method its errors name, the OpType
// its Work reports, the title the profiler records, and the name the flight recorder writes
// (NCCL's, the one torchfrtrace matches).
struct CollectiveNames {
  CollectiveKind kind;
  const char* method;
  c10d::OpType opType;
  const char* title;
  const char* recorded;
};

// Null for a value that is no CollectiveKind (a descriptor read from a peer that wrote garbage).
const CollectiveNames* findNames(CollectiveKind kind);
const CollectiveNames& namesOf(CollectiveKind kind);

} // namespace dummy_collectives
