#include "c10d/work.hpp"

#include <thread>

#include <ATen/core/jit_type.h>
#include <ATen/record_function.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "c10d/progress.hpp"

namespace dummy_collectives {
namespace {

std::vector<c10::Device> devicesOf(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::Device> devices;
  for (const auto& tensor : tensors) {
    if (!tensor.device().is_cpu() &&
        std::find(devices.begin(), devices.end(), tensor.device()) == devices.end()) {
      devices.push_back(tensor.device());
    }
  }
  return devices;
}

} // namespace

DummyWork::DummyWork(
    int rank,
    c10d::OpType opType,
    const char* profilingTitle,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    uint64_t seq,
    Body body,
    std::weak_ptr<Progress> progress)
    // c10d::Work allocates a RecordFunction and copies the inputs whenever it gets a title:
    // give it one only while a profiler (or another observer) listens. (Asking takes a lock:
    // Works made without a title do not ask.)
    : c10d::Work(
          rank,
          opType,
          profilingTitle != nullptr && at::hasCallbacks() ? profilingTitle : nullptr,
          profilingTitle != nullptr && at::hasCallbacks()
              ? std::optional<std::vector<at::Tensor>>(inputs)
              : std::nullopt),
      outputs_(std::move(outputs)),
      seq_(seq),
      body_(std::move(body)),
      progress_(std::move(progress)),
      // Only the engine reads it, for Works it queues (those have a body).
      enqueuedAt_(
          body_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point()) {}

DummyWork::~DummyWork() = default;

c10::intrusive_ptr<DummyWork> DummyWork::completed(
    int rank,
    c10d::OpType opType,
    const char* profilingTitle,
    std::vector<at::Tensor> outputs) {
  auto work = c10::make_intrusive<DummyWork>(
      rank, opType, profilingTitle, outputs, outputs, 0, nullptr, std::weak_ptr<Progress>());
  work->setDone(nullptr); // no other thread sees it yet: no lock, no waiter, no future
  return work;
}

c10::intrusive_ptr<DummyWork> DummyWork::ran(
    int rank,
    c10d::OpType opType,
    std::vector<at::Tensor> outputs,
    uint64_t seq,
    std::exception_ptr error) {
  // No profiling title: the caller runs collectives itself only while no profiler listens.
  const std::vector<at::Tensor> noInputs;
  auto work = c10::make_intrusive<DummyWork>(
      rank, opType, nullptr, noInputs, std::move(outputs), seq, nullptr, std::weak_ptr<Progress>());
  // No other thread sees it yet: no lock, no waiter, no future. (Small blocking collectives
  // all end here; the locks of complete() would be a measurable part of what they cost.)
  work->setDone(std::move(error));
  return work;
}

void DummyWork::setDone(std::exception_ptr error) noexcept {
  // What c10d::Work::finish() sets, and ours, in one step: whoever sees done_ (acquire) sees
  // the rest, so wait() reads it without the lock.
  completed_ = true;
  exception_ = error;
  error_ = std::move(error);
  if (recordFunctionEndCallback_) {
    recordFunctionEndCallback_();
    recordFunctionEndCallback_ = nullptr;
  }
  done_.store(true, std::memory_order_release);
}

void DummyWork::execute() noexcept {
  std::exception_ptr error;
  if (body_) {
    try {
      body_(*this);
    } catch (...) {
      error = std::current_exception();
    }
    body_ = nullptr; // drop the tensors and state the body captured
  }
  complete(error);
}

void DummyWork::complete(std::exception_ptr error) noexcept {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    // Under the lock: getFuture() either made its future before this (we complete it) or sees
    // done_ (it completes the future itself); a waiter on cv_ sees completed_.
    std::lock_guard<std::mutex> lock(mutex_);
    setDone(std::move(error));
    future = future_;
  }
  cv_.notify_all();
  if (future) {
    completeFuture(future);
  }
}

void DummyWork::setDeviceCompletion(c10::Stream stream, c10::Event event) {
  deviceStream_.emplace(stream);
  deviceEvent_.emplace(std::move(event));
}

void DummyWork::completeFuture(const c10::intrusive_ptr<c10::ivalue::Future>& future) const {
  if (error_) {
    future->setError(error_);
  } else if (deviceStream_) {
    // The future records its own events on the current stream: make that the stream the
    // device work was queued on, so callbacks and waiters are ordered after it.
    c10::StreamGuard guard(*deviceStream_);
    future->markCompleted(c10::IValue(outputs_));
  } else {
    future->markCompleted(c10::IValue(outputs_));
  }
}

bool DummyWork::isCompleted() {
  return done() && (!deviceEvent_ || error_ || deviceEvent_->query());
}

bool DummyWork::wait(std::chrono::milliseconds timeout) {
  using SteadyClock = std::chrono::steady_clock;
  const bool bounded = timeout != kNoTimeout && timeout < std::chrono::hours(24 * 365);
  const auto deadline = bounded ? SteadyClock::now() + timeout : SteadyClock::time_point::max();
  if (!done()) {
    if (auto progress = progress_.lock()) {
      progress->runUntil(*this, deadline);
    }
    // Another thread runs it: a short polite spin catches the common quick finish without a
    // sleep and wake-up; then we block on the condition variable.
    for (int i = 0; i < 64 && !done(); ++i) {
      std::this_thread::yield();
    }
  }
  if (done()) {
    // setDone() wrote exception_ before done_ (release), and nothing writes it again.
    if (exception_) {
      std::rethrow_exception(exception_);
    }
  } else {
    // c10d::Work::wait, less its synchronize(): that blocks the host here (see synchronize()).
    std::unique_lock<std::mutex> lock(mutex_);
    if (!bounded) {
      cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_until(lock, deadline, [&] { return completed_; })) {
      TORCH_CHECK(
          false, "dummy ", c10d::opTypeToString(opType_), " #", seq_, " on rank ", rank_,
          ": Work.wait timed out after ", timeout.count(), " ms (the operation goes on; wait "
          "again, or let the group's timeout end it)");
    }
    if (exception_) {
      std::rethrow_exception(exception_);
    }
  }
  if (deviceEvent_) {
    // Like NCCL: the caller's current stream waits for the device work; the host does not.
    c10::impl::VirtualGuardImpl guard(deviceStream_->device_type());
    deviceEvent_->block(guard.getStream(deviceStream_->device()));
  }
  c10d::Work::synchronize(); // torch's bookkeeping for in-flight collectives; never blocks
  return true;
}

void DummyWork::synchronize() {
  // Host-staged device outputs were copied back before completion; device work queued on a
  // backend stream completes with its event.
  if (done() && deviceEvent_) {
    deviceEvent_->synchronize();
  }
  c10d::Work::synchronize();
}

int DummyWork::sourceRank() const {
  return sourceRank_.load(std::memory_order_relaxed);
}

std::vector<at::Tensor> DummyWork::result() {
  return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> DummyWork::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  bool finished = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), devicesOf(outputs_));
      finished = done_.load(std::memory_order_acquire);
    }
    future = future_;
  }
  if (finished) {
    completeFuture(future);
  } else if (auto progress = progress_.lock()) {
    // Whoever holds a future may never call wait(): make sure the worker gets to it now.
    progress->expedite();
  }
  return future;
}

} // namespace dummy_collectives
