#include "c10d/engine.hpp"

#include <algorithm>

#include <c10/util/thread_name.h>

#include "c10d/work.hpp"

namespace dummy_collectives {

using std::chrono::steady_clock;

Engine::Engine(Timing timing)
    : timing_(timing), lastActive_(steady_clock::now()), poll_(timing.poll) {
  worker_ = std::thread([this] {
    // Named so profilers, py-spy and the tests can tell it from the caller's threads.
    c10::setThreadName("dc_engine");
    workerLoop();
  });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void Engine::enqueue(c10::intrusive_ptr<DummyWork> work) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Issuing collectives is activity even when callers run them all themselves: a worker that
    // parked while they did would be woken by every single one (two context switches per
    // collective, each preempting a rank's caller on a machine with a core per rank).
    lastActive_ = work->enqueuedAt();
    queue_.push_back(std::move(work));
    queued_.store(queue_.size(), std::memory_order_release);
    // A parked worker sleeps without a timeout and must be woken; an active one polls. Several
    // collectives in flight means an asynchronous caller: run them without the grace period.
    wake = parked_ || queue_.size() > 1;
    expedite_ = expedite_ || queue_.size() > 1;
  }
  if (wake) {
    cv_.notify_one();
  }
}

void Engine::expedite() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) {
      return;
    }
    expedite_ = true;
  }
  cv_.notify_one();
}

c10::intrusive_ptr<DummyWork> Engine::pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) {
    expedite_ = false;
    lastActive_ = steady_clock::now();
    return {};
  }
  auto work = std::move(queue_.front());
  queue_.pop_front();
  queued_.store(queue_.size(), std::memory_order_release);
  return work;
}

void Engine::drain() {
  std::lock_guard<std::mutex> exec(execMu_);
  while (auto work = pop()) {
    work->execute();
  }
}

void Engine::runUntil(const DummyWork& work, std::chrono::steady_clock::time_point deadline) {
  if (deadline != std::chrono::steady_clock::time_point::max()) {
    // wait(timeout): a collective run on this thread could not give up at that deadline (it
    // honours only the group's timeout). Let the worker run the queue; the caller blocks on the
    // Work until its deadline.
    expedite();
    return;
  }
  std::unique_lock<std::mutex> exec(execMu_, std::try_to_lock);
  if (!exec.owns_lock()) {
    return; // the worker is running the queue; the caller blocks on the Work instead
  }
  while (!work.done()) {
    auto next = pop();
    if (!next) {
      return;
    }
    next->execute();
  }
}

void Engine::workerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const auto now = steady_clock::now();
    if (queue_.empty()) {
      if (stopping_) {
        return;
      }
      if (now - lastActive_ > timing_.active) {
        parked_ = true;
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        parked_ = false;
      } else if (cv_.wait_for(lock, poll_) == std::cv_status::timeout && queue_.empty()) {
        // Callers ran what was issued meanwhile: a synchronous program; poll less.
        poll_ = std::min(poll_ * 2, timing_.maxPoll);
      }
      continue;
    }
    const auto due = queue_.front()->enqueuedAt() + timing_.grace;
    if (!stopping_ && !expedite_ && now < due) {
      cv_.wait_until(lock, due);
      continue;
    }
    lock.unlock();
    drain();
    lock.lock();
    poll_ = timing_.poll; // an asynchronous program: notice its next collective soon
  }
}

} // namespace dummy_collectives
