#include "c10d/collective_names.hpp"

#include <array>

#include <c10/util/Exception.h>

namespace dummy_collectives {
namespace {

using c10d::OpType;
using enum CollectiveKind;

// In CollectiveKind's order (checked below). The list forms of all-gather and reduce-scatter are
// recorded flattened, as NCCL records them; NCCL records both all-to-alls as all_to_all, whose
// sizes torchfrtrace does not compare across ranks (uneven splits differ by rank).
constexpr std::array<CollectiveNames, 17> kNames{{
    {kAllreduce, "allreduce", OpType::ALLREDUCE, "dummy:all_reduce", "all_reduce"},
    {kAllgather, "allgather", OpType::ALLGATHER, "dummy:all_gather", "all_gather"},
    {kBroadcast, "broadcast", OpType::BROADCAST, "dummy:broadcast", "broadcast"},
    {kBarrier, "barrier", OpType::BARRIER, "dummy:barrier", "barrier"},
    {kAllgatherBase, "_allgather_base", OpType::_ALLGATHER_BASE, "dummy:_allgather_base",
     "_all_gather_base"},
    {kAllreduceCoalesced, "allreduce_coalesced", OpType::ALLREDUCE_COALESCED,
     "dummy:allreduce_coalesced", "allreduce_coalesced"},
    {kReduce, "reduce", OpType::REDUCE, "dummy:reduce", "reduce"},
    {kAllgatherCoalesced, "allgather_coalesced", OpType::ALLGATHER_COALESCED,
     "dummy:all_gather_coalesced", "ALLGATHER_coalesced"},
    {kAllgatherIntoTensorCoalesced, "allgather_into_tensor_coalesced", OpType::COALESCED,
     "dummy:all_gather_into_tensor_coalesced", "all_gather_into_tensor_coalesced"},
    {kGather, "gather", OpType::GATHER, "dummy:gather", "gather"},
    {kScatter, "scatter", OpType::SCATTER, "dummy:scatter", "scatter"},
    {kReduceScatter, "reduce_scatter", OpType::REDUCE_SCATTER, "dummy:reduce_scatter",
     "reduce_scatter"},
    {kReduceScatterBase, "_reduce_scatter_base", OpType::_REDUCE_SCATTER_BASE,
     "dummy:_reduce_scatter_base", "_reduce_scatter_base"},
    {kReduceScatterTensorCoalesced, "reduce_scatter_tensor_coalesced", OpType::COALESCED,
     "dummy:reduce_scatter_tensor_coalesced", "reduce_scatter_tensor_coalesced"},
    {kAlltoall, "alltoall", OpType::ALLTOALL, "dummy:all_to_all", "all_to_all"},
    {kAlltoallBase, "alltoall_base", OpType::ALLTOALL_BASE, "dummy:all_to_all", "all_to_all"},
    {kAllreduceSparse, "allreduce_sparse", OpType::_ALLREDUCE_SPARSE, "dummy:sparse_all_reduce",
     "all_reduce"},
}};

constexpr bool inKindOrder() {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (static_cast<size_t>(kNames[i].kind) != i + 1) {
      return false;
    }
  }
  return true;
}
static_assert(inKindOrder(), "kNames must list CollectiveKind's values in order");

} // namespace

const CollectiveNames* findNames(CollectiveKind kind) {
  const auto index = static_cast<size_t>(kind) - 1; // kind 0 wraps round: not found
  return index < kNames.size() ? &kNames[index] : nullptr;
}

const CollectiveNames& namesOf(CollectiveKind kind) {
  const CollectiveNames* names = findNames(kind);
  TORCH_CHECK(names != nullptr, "dummy: unknown collective kind ", static_cast<int>(kind));
  return *names;
}

} // namespace dummy_collectives
