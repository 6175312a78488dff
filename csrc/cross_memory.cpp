#include <dummy_collectives/cross_memory.hpp>

#include <sys/uio.h>

#include <cerrno>
#include <random>

namespace dummy_collectives::cross_memory {

int read(int32_t pid, void* local, const void* remote, size_t bytes) {
  auto* to = static_cast<std::byte*>(local);
  const auto* from = static_cast<const std::byte*>(remote);
  while (bytes > 0) {
    struct iovec localIov {to, bytes};
    struct iovec remoteIov {const_cast<std::byte*>(from), bytes};
    const ssize_t copied = ::process_vm_readv(pid, &localIov, 1, &remoteIov, 1, 0);
    if (copied < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    if (copied == 0) {
      return EFAULT; // a partial read stops at an unreadable page; nothing more will come
    }
    to += copied;
    from += copied;
    bytes -= static_cast<size_t>(copied);
  }
  return 0;
}

ProbeWord probeWord() {
  // Never zero, so a page of zeros read from the wrong place cannot pass for it.
  static const uint64_t word = [] {
    std::random_device device;
    const uint64_t value = (static_cast<uint64_t>(device()) << 32) ^ device();
    return value == 0 ? 1 : value;
  }();
  return {&word, word};
}

} // namespace dummy_collectives::cross_memory
