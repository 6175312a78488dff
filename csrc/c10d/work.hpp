#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include <optional>

#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace dummy_collectives {

class Progress;

// One issued collective. Completed by whichever thread runs it (see Engine); wait() lends the
// waiting thread to the engine. The future is made on first request, so collectives nobody asks
// a future of pay nothing for it.
class DummyWork final : public c10d::Work {
 public:
  using Body = std::function<void(DummyWork&)>;

  DummyWork(
      int rank,
      c10d::OpType opType,
      const char* profilingTitle,
      const std::vector<at::Tensor>& inputs,
      std::vector<at::Tensor> outputs,
      uint64_t seq,
      Body body,
      std::weak_ptr<Progress> progress);
  ~DummyWork() override;

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override {
    return seq_;
  }

  // A Work that is already finished (zero mode, world size 1 shortcuts).
  static c10::intrusive_ptr<DummyWork> completed(
      int rank,
      c10d::OpType opType,
      const char* profilingTitle,
      std::vector<at::Tensor> outputs);
  // A Work for collective `seq` that its caller already ran (failing with `error`, if set).
  static c10::intrusive_ptr<DummyWork> ran(
      int rank,
      c10d::OpType opType,
      std::vector<at::Tensor> outputs,
      uint64_t seq,
      std::exception_ptr error);

  // A body that queued device work calls this before it returns: the Work is then complete on
  // the host (its handshakes done) while its device work completes with `event`, recorded on
  // `stream`. wait() makes the caller's current stream wait for it (NCCL's semantics: the host
  // does not block), synchronize() blocks, the future's callbacks see it ordered.
  void setDeviceCompletion(c10::Stream stream, c10::Event event);

  // Runs the body and completes the Work; the engine calls it exactly once.
  void execute() noexcept;
  // Completes a Work that has no body (point-to-point), with `error` if it failed.
  void complete(std::exception_ptr error) noexcept;
  // recvAnysource: the rank the message came from.
  int sourceRank() const override;
  void setSourceRank(int rank) {
    sourceRank_.store(rank, std::memory_order_relaxed);
  }
  bool done() const {
    return done_.load(std::memory_order_acquire);
  }
  std::chrono::steady_clock::time_point enqueuedAt() const {
    return enqueuedAt_;
  }

 private:
  // Marks the Work done, with `error` if set. Callers hold mutex_ unless no other thread can
  // see the Work yet (completed(), ran()).
  void setDone(std::exception_ptr error) noexcept;
  void completeFuture(const c10::intrusive_ptr<c10::ivalue::Future>& future) const;

  std::vector<at::Tensor> outputs_;
  uint64_t seq_;
  Body body_;
  std::weak_ptr<Progress> progress_;
  std::atomic<int> sourceRank_{-1};
  std::chrono::steady_clock::time_point enqueuedAt_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_; // set with done_ (setDone)
  c10::intrusive_ptr<c10::ivalue::Future> future_; // guarded by mutex_
  // Set by the body before completion (published by done_'s release store).
  std::optional<c10::Stream> deviceStream_;
  std::optional<c10::Event> deviceEvent_;
};

} // namespace dummy_collectives
