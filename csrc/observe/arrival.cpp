#include <dummy_collectives/arrival.hpp>

namespace dummy_collectives {

WaitLedger::WaitLedger(int size) : size_(size), counters_(new Counter[size > 0 ? size : 1]) {
  base_.timesLast.assign(size_, 0);
  base_.waitedForNs.assign(size_, 0);
}

WaitLedger::Totals WaitLedger::read() const {
  Totals now;
  now.collectives = collectives_.load(std::memory_order_relaxed);
  now.timesLast.resize(size_);
  now.waitedForNs.resize(size_);
  for (int r = 0; r < size_; ++r) {
    now.timesLast[r] = counters_[r].timesLast.load(std::memory_order_relaxed);
    now.waitedForNs[r] = counters_[r].waitedNs.load(std::memory_order_relaxed);
  }
  return now;
}

WaitLedger::Totals WaitLedger::totals() const {
  Totals now = read();
  std::lock_guard<std::mutex> lock(mu_);
  now.collectives -= base_.collectives;
  for (int r = 0; r < size_; ++r) {
    now.timesLast[r] -= base_.timesLast[r];
    now.waitedForNs[r] -= base_.waitedForNs[r];
  }
  return now;
}

void WaitLedger::reset() {
  Totals now = read();
  std::lock_guard<std::mutex> lock(mu_);
  base_ = std::move(now);
}

} // namespace dummy_collectives
