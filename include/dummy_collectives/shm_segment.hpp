#pragma once

#include <cstddef>
#include <string>

namespace dummy_collectives {

// One POSIX shared-memory mapping. The creator picks a random name; the name only lives in
// /dev/shm until every rank has mapped it (then unlink() removes it), so a crash afterwards,
// even SIGKILL, leaves nothing behind.
class ShmSegment {
 public:
  static constexpr const char* kNamePrefix = "/dummy_collectives_";

  static ShmSegment create(size_t bytes);
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
