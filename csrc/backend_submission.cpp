#include "backend_submission.hpp"

#include <mutex>
#include <string>
#include <unordered_map>

#include <ATen/record_function.h>

#include <dummy_collectives/argument_checks.hpp>
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
  if (observed && !hostLevel_) { // a host level's collectives are steps of the group's own
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
        flight_recorder::opName(op.kind), op.seq, p2pSeq_, false, -1, -1, limit};
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
  return {limit, observed, record};
}

void DummyBackend::requireWritable(
    const OpDescriptor& op, const std::vector<at::Tensor>& outputs) const {
  // A broadcast's root and a reduce's other ranks only read their tensor.
  const bool readOnly = (op.kind == CollectiveKind::kBroadcast && op.root == getRank()) ||
      (op.kind == CollectiveKind::kReduce && op.root != getRank());
  if (!readOnly && !outputs.empty()) {
    checker(collectiveName(op.kind)).writable(outputs);
  }
}

uint64_t DummyBackend::recordPointToPoint(
    const char* op, int peer, const std::vector<at::Tensor>& tensors) {
  if (!fr_) {
    return 0;
  }
  const flight_recorder::OpInfo info{
      op, seq_, p2pSeq_, true, getRank(), peer, options_->timeout};
  // The tensor is listed as input and output, as NCCL's entries list it.
  const uint64_t record = flight_recorder::record(fr_.get(), info, tensors, tensors);
  flight_recorder::started(record); // posted: the point-to-point engine progresses it from now
  return record;
}

std::shared_ptr<const DummyBackend::WaitRecord> DummyBackend::waitRecord(
    bool observed, const char* profilingTitle) const {
  if (!observed || hostLevel_ || profilingTitle == nullptr) {
    return nullptr;
  }
  return std::make_shared<const WaitRecord>(
      WaitRecord{at::ThreadLocalState(), getGroupUid(), profilingTitle});
}

c10::intrusive_ptr<c10d::Work> DummyBackend::enqueue(
    const OpDescriptor& op,
    c10d::OpType opType,
    const char* profilingTitle,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    std::function<void(DummyWork&)> body) {
  auto work = c10::make_intrusive<DummyWork>(
      getRank(),
      opType,
      hostLevel_ && profilingTitle != nullptr ? hostLevelTitle(profilingTitle) : profilingTitle,
      inputs,
      std::move(outputs),
      op.seq,
      std::move(body),
      engine_);
  engine_->enqueue(work);
  return work;
}

const char* DummyBackend::hostLevelTitle(const char* title) {
  // The profiler keeps the title's pointer, not a copy: intern each title once, for good.
  static std::mutex mu;
  static auto* titles = new std::unordered_map<std::string, std::string>();
  std::lock_guard<std::mutex> lock(mu);
  std::string& interned = (*titles)[title];
  if (interned.empty()) {
    const std::string name(title);
    interned = "dummy.host:" + name.substr(name.find(':') + 1);
  }
  return interned.c_str();
}

bool DummyBackend::onDevicePath(const std::vector<at::Tensor>& tensors) const {
  return device_ && !tensors.empty() && tensors[0].is_cuda() && device_->accepts(tensors);
}

c10::intrusive_ptr<c10d::Work> DummyBackend::zeroed(
    c10d::OpType opType,
    const char* profilingTitle,
    std::vector<at::Tensor> outputs) {
  for (auto& tensor : outputs) {
    tensor.zero_();
  }
  return DummyWork::completed(getRank(), opType, profilingTitle, std::move(outputs));
}

} // namespace dummy_collectives
