#include "hierarchy/cross_host_reduction.hpp"

#include <dummy_collectives/device_collectives.hpp>

namespace dummy_collectives::hierarchy::two_level {

std::optional<c10d::ReduceOp> engineReduction(const ReduceSpec& spec, bool anyOrder) {
  switch (spec.dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      break;
    default:
      return std::nullopt;
  }
  const bool integral = c10::isIntegralType(spec.dtype, /*includeBool=*/false);
  const bool minOrMax = spec.kind == ReduceKind::kMin || spec.kind == ReduceKind::kMax;
  const bool ringOrderIsFine = anyOrder && (spec.dtype == at::kFloat || spec.dtype == at::kDouble);
  if (!integral && (minOrMax || !ringOrderIsFine)) {
    return std::nullopt;
  }
  switch (spec.kind) {
    case ReduceKind::kSum:
      return c10d::ReduceOp(c10d::ReduceOp::SUM);
    case ReduceKind::kProduct:
      return c10d::ReduceOp(c10d::ReduceOp::PRODUCT);
    case ReduceKind::kMin:
      return c10d::ReduceOp(c10d::ReduceOp::MIN);
    case ReduceKind::kMax:
      return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case ReduceKind::kBand:
      return integral ? std::optional(c10d::ReduceOp(c10d::ReduceOp::BAND)) : std::nullopt;
    case ReduceKind::kBor:
      return integral ? std::optional(c10d::ReduceOp(c10d::ReduceOp::BOR)) : std::nullopt;
    case ReduceKind::kBxor:
      return integral ? std::optional(c10d::ReduceOp(c10d::ReduceOp::BXOR)) : std::nullopt;
  }
  return std::nullopt;
}

void foldPiecesOnLinks(const InterHostEngine& engine, const OpContext& ctx,
                       const ReduceSpec& across, const at::Tensor& data,
                       const at::Tensor& scratch) {
  const int members = engine.size();
  const int me = engine.rank();
  const int64_t n = data.numel();
  const int64_t per = roundUp(ceilDiv(n, members), lineElements(data.element_size()));
  auto piece = [&](int m) {
    const int64_t begin = std::min(n, m * per);
    return data.narrow(0, begin, std::min(n, begin + per) - begin);
  };
  at::Tensor mine = piece(me);
  const int64_t m = mine.numel();
  const int64_t slots = (members - 1) * m;
  at::Tensor received = scratch.defined() && scratch.numel() >= slots
      ? scratch.narrow(0, 0, slots)
      : at::empty({slots}, data.options());
  // Member s's piece `me` (none from this member).
  auto slot = [&](int s) { return received.narrow(0, (s < me ? s : s - 1) * m, m); };
  waitForDevice(data); // the links read device memory outside any stream
  engine.wait(engine.piecesOnLinks([&](int d) { return bytesOf(piece(d)); },
                                   [&](int s) { return bytesOf(slot(s)); }),
              ctx);
  if (data.is_cuda()) {
    std::vector<at::Tensor> sources;
    for (int s = 0; s < members; ++s) {
      sources.push_back(s == me ? mine : slot(s));
    }
    foldOnDevice(across, mine, sources);
    waitForDevice(mine);
  } else {
    std::vector<const void*> srcs;
    for (int s = 0; s < members; ++s) {
      srcs.push_back(s == me ? mine.data_ptr() : slot(s).data_ptr());
    }
    fold(across, mine.data_ptr(), srcs, m);
  }
  engine.wait(engine.piecesOnLinks([&](int) { return bytesOf(mine); },
                                   [&](int s) { return bytesOf(piece(s)); }),
              ctx);
}

} // namespace dummy_collectives::hierarchy::two_level
