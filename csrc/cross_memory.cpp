#include <dummy_collectives/cross_memory.hpp>

#include <sys/uio.h>

#include <cerrno>
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

} // namespace dummy_collectives::cross_memory
