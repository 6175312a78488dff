#include "c10d/backend_submission.hpp"

#include <cstring>
#include <string>

#include <ATen/record_function.h>

#include "c10d/argument_checks.hpp"
#include <dummy_collectives/param_comms.hpp>

namespace dummy_collectives {

DummyBackend::Stamp DummyBackend::stamp(
    OpDescriptor& op,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs,
    std::chrono::milliseconds timeout,
    const SplitSizes& splits) {
  op.seq = ++seq_;
  const bool observed = at::hasCallbacks();
  if (observed) {
    const auto dtype = op.dtype >= 0 ? static_cast<at::ScalarType>(op.dtype) : at::kByte;
    recordParamComms(
        *this, op.seq, false, collectiveName(op.kind), getRank(), dtype, inputs, outputs, splits);
  }
  const auto limit = timeout == c10d::kUnsetTimeout ? options_->timeout : timeout;
  uint64_t record = 0;
  if (fr_) {
    if (!frDescTaken_) {
      flight_recorder::describe(fr_.get(), getGroupDesc());
      frDescTaken_ = true;
    }
    const flight_recorder::OpInfo info{
        namesOf(op.kind).recorded, op.seq, p2pSeq_, false, -1, -1, limit};
    const size_t size = static_cast<size_t>(getSize());
    if (op.kind == CollectiveKind::kAllgather && outputs.size() == inputs.size() * size &&
        inputs.size() == 1) {
      record = flight_recorder::recordFlattened(fr_.get(), info, inputs, outputs, false, size);
    } else if (op.kind == CollectiveKind::kReduceScatter &&
               inputs.size() == outputs.size() * size && outputs.size() == 1) {
      record = flight_recorder::recordFlattened(fr_.get(), info, inputs, outputs, true, size);
    } else {
      record = flight_recorder::record(fr_.get(), info, inputs, outputs);
    }
  }
  OpContext call;
  call.op = op;
  call.rank = getRank();
  call.timeout = limit;
  return {call, observed, record};
}

void DummyBackend::requireWritable(
    const OpDescriptor& op, const std::vector<at::Tensor>& outputs) const {
  // A broadcast's root and a reduce's other ranks only read their tensor.
  const bool readOnly = (op.kind == CollectiveKind::kBroadcast && op.root == getRank()) ||
      (op.kind == CollectiveKind::kReduce && op.root != getRank());
  if (!readOnly && !outputs.empty()) {
    checker(op.kind).writable(outputs);
  }
}

PointToPoint DummyBackend::pointToPoint(
    const char* what,
    const char* title,
    int peer,
    int tag,
    const std::vector<at::Tensor>& tensors) {
  ++p2pSeq_;
  const bool observed = at::hasCallbacks(); // takes a lock: ask once
  if (observed) {
    recordParamComms(
        *this, p2pSeq_, true, what, peer, tensors[0].scalar_type(), tensors, tensors);
  }
  uint64_t record = 0;
  if (fr_) {
    // The flight recorder names receives "recv" whatever their source, as NCCL's entries do.
    const char* name = std::strcmp(what, "send") == 0 ? "send" : "recv";
    const flight_recorder::OpInfo info{
        name, seq_, p2pSeq_, true, getRank(), peer, options_->timeout};
    // The tensor is listed as input and output, as NCCL's entries list it.
    record = flight_recorder::record(fr_.get(), info, tensors, tensors);
    flight_recorder::started(record); // posted: the lowering progresses it from now
  }
  return {peer, tag, p2pSeq_, record, observed ? title : nullptr, fr_.get()};
}

std::shared_ptr<const DummyBackend::WaitRecord> DummyBackend::waitRecord(
    bool observed, CollectiveKind kind) const {
  if (!observed) {
    return nullptr;
  }
  return std::make_shared<const WaitRecord>(
      WaitRecord{at::ThreadLocalState(), getGroupUid(), namesOf(kind).title});
}

c10::intrusive_ptr<c10d::Work> DummyBackend::enqueue(
    const OpDescriptor& op,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    std::function<void(DummyWork&)> body) {
  const CollectiveNames& names = namesOf(op.kind);
  auto work = c10::make_intrusive<DummyWork>(
      getRank(),
      names.opType,
      names.title,
      inputs,
      std::move(outputs),
      op.seq,
      std::move(body),
      engine_);
  engine_->enqueue(work);
  return work;
}

DeviceCollectives* DummyBackend::deviceFor(const std::vector<at::Tensor>& tensors) const {
  return lowering_ ? lowering_->deviceFor(tensors) : nullptr;
}

c10::intrusive_ptr<c10d::Work> DummyBackend::zeroed(
    CollectiveKind kind,
    std::vector<at::Tensor> outputs) {
  for (auto& tensor : outputs) {
    tensor.zero_();
  }
  const CollectiveNames& names = namesOf(kind);
  return DummyWork::completed(getRank(), names.opType, names.title, std::move(outputs));
}

Checker DummyBackend::checker(CollectiveKind collective) const {
  return checker(namesOf(collective).method);
}

void DummyBackend::requireReal(CollectiveKind collective) const {
  requireReal(namesOf(collective).method);
}

} // namespace dummy_collectives
