#include "inter_host/store_requests.hpp"

namespace dummy_collectives::inter_host {

struct StoreRequests::Queue {
  c10::intrusive_ptr<c10d::Store> store;
  std::mutex mu;
  std::condition_variable cv;
  // Each task with when it was posted; the front one runs while `running`.
  std::deque<std::pair<Task, Clock::time_point>> tasks;
  bool running = false;
  bool stop = false;
  std::string gone; // the first request's error: the store is gone

  void serve() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !tasks.empty(); });
      if (tasks.empty()) {
        return; // stopped, nothing left to ask
      }
      Task task = tasks.front().first;
      running = true;
      const std::string goneBefore = gone;
      lock.unlock();
      const std::string error = task(*store, goneBefore.empty() ? nullptr : &goneBefore);
      lock.lock();
      running = false;
      tasks.pop_front();
      if (!error.empty() && gone.empty()) {
        gone = error;
      }
    }
  }
};

StoreRequests::StoreRequests(const c10::intrusive_ptr<c10d::Store>& store)
    : queue_(std::make_shared<Queue>()) {
  try {
    queue_->store = store->clone();
  } catch (const std::exception&) {
    // A store that cannot be cloned (one defined in Python, say) is asked directly.
    queue_->store = store;
  }
  if (!queue_->store) {
    queue_->store = store;
  }
  std::thread([queue = queue_] { queue->serve(); }).detach();
}

StoreRequests::~StoreRequests() {
  // The thread may be waiting on a store that never answers: it is not joined. It ends once its
  // queue is empty, keeping what it shares with this object alive until then.
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    queue_->stop = true;
  }
  queue_->cv.notify_all();
}

void StoreRequests::enqueue(Task task) {
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    queue_->tasks.emplace_back(std::move(task), Clock::now());
  }
  queue_->cv.notify_all();
}

bool StoreRequests::gone() const {
  std::lock_guard<std::mutex> lock(queue_->mu);
  return !queue_->gone.empty();
}

StoreRequests::Clock::duration StoreRequests::silentFor() const {
  std::lock_guard<std::mutex> lock(queue_->mu);
  if (queue_->tasks.empty()) {
    return Clock::duration::zero();
  }
  return Clock::now() - queue_->tasks.front().second;
}

} // namespace dummy_collectives::inter_host
