#include "shm/cross_memory.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

namespace dummy_collectives::cross_memory {

namespace {

// process_vm_readv / process_vm_writev until all `bytes` are copied.
template <typename Call>
int transfer(std::byte* local, std::byte* remote, size_t bytes, Call call) {
  while (bytes > 0) {
    struct iovec localIov {local, bytes};
    struct iovec remoteIov {remote, bytes};
    const ssize_t copied = call(&localIov, &remoteIov);
    if (copied < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    if (copied == 0) {
      return EFAULT; // a partial transfer stops at an unreachable page; nothing more will come
    }
    local += copied;
    remote += copied;
    bytes -= static_cast<size_t>(copied);
  }
  return 0;
}

} // namespace

int read(int32_t pid, void* local, const void* remote, size_t bytes) {
  return transfer(
      static_cast<std::byte*>(local),
      static_cast<std::byte*>(const_cast<void*>(remote)),
      bytes,
      [pid](const iovec* l, const iovec* r) { return ::process_vm_readv(pid, l, 1, r, 1, 0); });
}

int write(int32_t pid, void* remote, const void* local, size_t bytes) {
  return transfer(
      static_cast<std::byte*>(const_cast<void*>(local)),
      static_cast<std::byte*>(remote),
      bytes,
      [pid](const iovec* l, const iovec* r) { return ::process_vm_writev(pid, l, 1, r, 1, 0); });
}

ProbeWord probeWord() {
  // Never zero, so a page of zeros read from the wrong place cannot pass for it.
  static uint64_t word = [] {
    std::random_device device;
    const uint64_t value = (static_cast<uint64_t>(device()) << 32) ^ device();
    return value == 0 ? 1 : value;
  }();
  return {&word, word};
}

double copySpeed() {
  static const double speed = [] {
    // One collective piece (kPeerPieceBytes in algorithms.cpp), in cache on both sides.
    constexpr size_t kBytes = size_t{256} << 10;
    constexpr int kRounds = 7;
    // Page-aligned, as slots are: two heap blocks 16 bytes apart modulo 4 KiB make memcpy's
    // loads wait on its stores (4K aliasing), 10x slower (seen in a process with torch loaded).
    auto block = [&] {
      return std::unique_ptr<std::byte, decltype(&std::free)>(
          static_cast<std::byte*>(std::aligned_alloc(4096, kBytes)), &std::free);
    };
    auto from = block();
    auto to = block();
    if (!from || !to) {
      return 0.0;
    }
    std::memset(from.get(), 1, kBytes);
    std::memset(to.get(), 2, kBytes);
    const auto self = static_cast<int32_t>(::getpid());
    using Clock = std::chrono::steady_clock;
    // Best of a few rounds, the two interleaved, so a preemption spoils one round of one.
    Clock::duration bestCopy = Clock::duration::max();
    Clock::duration bestKernel = Clock::duration::max();
    for (int round = 0; round < kRounds; ++round) {
      const auto t0 = Clock::now();
      std::memcpy(to.get(), from.get(), kBytes);
      const auto t1 = Clock::now();
      if (read(self, to.get(), from.get(), kBytes) != 0) {
        return 0.0;
      }
      const auto t2 = Clock::now();
      bestCopy = std::min(bestCopy, t1 - t0);
      bestKernel = std::min(bestKernel, t2 - t1);
    }
    return bestKernel.count() > 0
        ? static_cast<double>(bestCopy.count()) / static_cast<double>(bestKernel.count())
        : 1.0;
  }();
  return speed;
}

} // namespace dummy_collectives::cross_memory
