#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace dummy_collectives::inter_host {

// Requests to a group's store that never hold their caller past a deadline.
//
// A store request has no deadline of its own: a TCPStore client whose server sits on the far
// side of a partition waits in recv() until the network returns, however long that is. A rank
// that asked the store from inside a collective would then wait with it, far past the
// collective's timeout. So every request runs on this object's own thread, against a
// connection of its own (the store's clone(): a request left waiting never holds the
// connection that torch and the program use), and its caller waits only as long as it chooses.
// A request that is not answered in time goes on in the background: its answer, when the
// network returns, lands in its Reply and is read by whoever still holds it.
//
// Requests run one at a time, in the order they were posted, so an earlier one (a lost rank's
// note) reaches the store before a later one (the failure's reason). A request that raises
// means the store is gone (its host left or died): nothing asks it again, and later requests
// fail at once with the same error.
class StoreRequests {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { kWaiting, kAnswered, kFailed };

  // The answer to one request, shared with the thread that makes it.
  template <typename T>
  class Reply {
   public:
    // Waits until the request is answered or fails, or `until` passes; its state then.
    State await(Clock::time_point until) const {
      std::unique_lock<std::mutex> lock(shared_->mu);
      shared_->cv.wait_until(lock, until, [&] { return shared_->state != State::kWaiting; });
      return shared_->state;
    }
    State state() const {
      std::lock_guard<std::mutex> lock(shared_->mu);
      return shared_->state;
    }
    // The answer (kAnswered), or why the store could not give one (kFailed).
    const T& value() const {
      return shared_->value;
    }
    const std::string& error() const {
      return shared_->error;
    }

   private:
    friend class StoreRequests;
    struct Shared {
      std::mutex mu;
      std::condition_variable cv;
      State state = State::kWaiting;
      T value{};
      std::string error;
    };
    std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  };

  // `store`: the group's; requests go to its clone where it has one, else to it.
  explicit StoreRequests(const c10::intrusive_ptr<c10d::Store>& store);
  ~StoreRequests();
  StoreRequests(const StoreRequests&) = delete;
  StoreRequests& operator=(const StoreRequests&) = delete;

  // Queues `request` (it runs on this object's thread) and returns at once.
  template <typename T>
  Reply<T> post(std::function<T(c10d::Store&)> request) {
    Reply<T> reply;
    auto shared = reply.shared_;
    enqueue([shared, request = std::move(request)](c10d::Store& store, const std::string* gone) {
      T value{};
      std::string error;
      if (gone != nullptr) {
        error = *gone;
      } else {
        try {
          value = request(store);
        } catch (const c10::Error& e) {
          error = firstLine(e.what_without_backtrace());
        } catch (const std::exception& e) {
          error = firstLine(e.what());
        }
      }
      {
        std::lock_guard<std::mutex> lock(shared->mu);
        shared->value = std::move(value);
        shared->error = error;
        shared->state = error.empty() ? State::kAnswered : State::kFailed;
      }
      shared->cv.notify_all();
      return error;
    });
    return reply;
  }

  // Whether a request raised: the store is gone, and every later request fails.
  bool gone() const;
  // How long the oldest request still unanswered has waited (zero: none waits). A store that
  // answers nothing for longer than a round trip's worth is silent, not slow: a new request
  // would only queue behind that one.
  Clock::duration silentFor() const;

  struct Queue; // what the thread and this object share

 private:
  // A request and the reply it fills: runs against the store, or, where the store is gone
  // (`gone` non-null), fails with that error. Returns the request's error ("" if answered).
  using Task = std::function<std::string(c10d::Store&, const std::string* gone)>;
  void enqueue(Task task);
  // An error's first line, never empty (an empty one would read as an answer).
  static std::string firstLine(const std::string& what) {
    const std::string line = what.substr(0, what.find('\n'));
    return line.empty() ? "the store request failed" : line;
  }

  std::shared_ptr<Queue> queue_;
};

} // namespace dummy_collectives::inter_host
