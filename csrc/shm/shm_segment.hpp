#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace dummy_collectives {

// One POSIX shared-memory mapping. The creator picks a random name; the name only lives in
// /dev/shm until every rank has mapped it (then unlink() removes it), so a crash afterwards,
// even SIGKILL, leaves nothing behind.
class ShmSegment {
 public:
  static constexpr const char* kNamePrefix = "/dummy_collectives_";
  static constexpr const char* kDirectory = "/dev/shm"; // where glibc's shm_open puts names

  // /dev/shm cannot hold a segment of `needed` bytes (tmpfs refused to reserve its pages).
  struct NoSpace : std::runtime_error {
    NoSpace(size_t needed, size_t free, const std::string& what)
        : std::runtime_error(what), needed(needed), free(free) {}
    size_t needed;
    size_t free; // bytes /dev/shm had free when it refused
  };

  // Creates a segment of `bytes` with every page reserved (posix_fallocate): tmpfs allocates
  // pages lazily, so without the reservation a full /dev/shm (Docker's default is 64 MiB) lets
  // ftruncate succeed and then kills the first rank to touch a missing page with SIGBUS.
  // Throws NoSpace where /dev/shm cannot hold it.
  static ShmSegment create(size_t bytes);
  // Bytes free in /dev/shm for this process (0 if unknown).
  static size_t freeBytes();
  static ShmSegment open(const std::string& name, size_t bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  // Removes the name from /dev/shm; the mapping stays valid. Safe to call more than once.
  void unlink();

  void* data() const {
    return data_;
  }
  size_t size() const {
    return size_;
  }
  const std::string& name() const {
    return name_;
  }

 private:
  ShmSegment(std::string name, void* data, size_t size, bool owner);
  void release();

  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool linked_ = false; // this process still owes the shm_unlink of name_
};

} // namespace dummy_collectives
