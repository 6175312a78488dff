#include <dummy_collectives/op_descriptor.hpp>

#include <c10/core/ScalarType.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "c10d/collective_names.hpp"

namespace dummy_collectives {
namespace {

const char* reduceOpName(int32_t op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "?";
  }
}

} // namespace

const char* collectiveName(CollectiveKind kind) {
  const CollectiveNames* names = findNames(kind);
  return names != nullptr ? names->method : "unknown collective";
}

bool OpDescriptor::operator==(const OpDescriptor& other) const {
  return seq == other.seq && kind == other.kind && dtype == other.dtype && numel == other.numel &&
      root == other.root && reduceOp == other.reduceOp && count == other.count &&
      layout == other.layout && path == other.path;
}

std::string OpDescriptor::describe() const {
  std::string text = c10::str(collectiveName(kind), " #", seq);
  if (dtype >= 0) {
    text += c10::str(
        " of ", numel, " ", c10::toString(static_cast<c10::ScalarType>(dtype)), " elements");
  }
  if (count != 1) {
    // The layout digest tells lists with equal totals but different tensors apart.
    text += c10::str(" in ", count, " tensors (layout ", std::hex, layout >> 32, ")");
  }
  if (reduceOp >= 0) {
    text += c10::str(" with ", reduceOpName(reduceOp));
  }
  if (root >= 0) {
    text += c10::str(" from root ", root);
  }
  if (path == DataPath::kCudaIpc) {
    text += " through CUDA IPC buffers";
  }
  return text;
}

} // namespace dummy_collectives
