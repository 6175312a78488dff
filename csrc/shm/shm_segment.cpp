#include "shm/shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

namespace dummy_collectives {
namespace {

std::string randomName() {
  std::random_device entropy;
  std::mt19937_64 gen((static_cast<uint64_t>(entropy()) << 32) ^ entropy() ^ ::getpid());
  return c10::str(ShmSegment::kNamePrefix, ::getpid(), "_", std::hex, gen());
}

void* mapShared(int fd, size_t bytes, const std::string& name) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  TORCH_CHECK(
      data != MAP_FAILED,
      "dummy_collectives: mmap of shared memory ",
      name,
      " (",
      bytes,
      " bytes) failed: ",
      std::strerror(errno));
  return data;
}

} // namespace

ShmSegment::ShmSegment(std::string name, void* data, size_t size, bool owner)
    : name_(std::move(name)), data_(data), size_(size), linked_(owner) {}

ShmSegment ShmSegment::create(size_t bytes) {
  std::string name;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    name = randomName();
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  TORCH_CHECK(
      fd >= 0, "dummy_collectives: shm_open(", name, ") failed: ", std::strerror(errno));
  // Reserve every page now (see create() in the header): a full /dev/shm then fails here, with
  // a message, instead of killing a rank mid-collective. (glibc emulates it by writing a byte per
  // block where the file system has no fallocate.)
  int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    const size_t free = freeBytes();
    ::close(fd);
    ::shm_unlink(name.c_str());
    if (err == ENOSPC || err == EFBIG || err == ENOMEM) {
      throw NoSpace(
          bytes,
          free,
          c10::str(
              "cannot reserve ", bytes, " bytes of shared memory in ", kDirectory, " (",
              std::strerror(err), "; ", free, " bytes free)"));
    }
    TORCH_CHECK(
        false, "dummy_collectives: cannot reserve ", bytes, " bytes of shared memory ", name,
        ": ", std::strerror(err));
  }
  void* data = nullptr;
  try {
    data = mapShared(fd, bytes, name);
  } catch (...) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw;
  }
  ::close(fd);
  return ShmSegment(name, data, bytes, /*owner=*/true);
}

size_t ShmSegment::freeBytes() {
  struct statvfs info {};
  if (::statvfs(kDirectory, &info) != 0) {
    return 0;
  }
  return static_cast<size_t>(info.f_bavail) * static_cast<size_t>(info.f_frsize);
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  // The name rides the group's store, which anyone who reaches it may write: only a segment
  // this library names, that this user owns and nobody else may open, is mapped.
  TORCH_CHECK(
      name.rfind(kNamePrefix, 0) == 0 && name.find('/', 1) == std::string::npos,
      "dummy_collectives: refusing shared memory '", name, "' named in the group's store: it "
      "is not a name this library gives its segments (", kNamePrefix, "...)");
  int fd = ::shm_open(name.c_str(), O_RDWR | O_NOFOLLOW, 0600);
  TORCH_CHECK(
      fd >= 0,
      "dummy_collectives: cannot open shared memory ",
      name,
      " created by rank 0: ",
      std::strerror(errno),
      " (all ranks of a dummy group must run on one host)");
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    TORCH_CHECK(false, "dummy_collectives: fstat of shared memory ", name, " failed: ",
                std::strerror(error));
  }
  if (!S_ISREG(info.st_mode) || info.st_uid != ::geteuid() || (info.st_mode & 077) != 0) {
    ::close(fd);
    TORCH_CHECK(
        false, "dummy_collectives: refusing shared memory ", name, " named in the group's "
        "store: it is owned by uid ", info.st_uid, " with mode ", std::oct,
        (info.st_mode & 07777), std::dec, ", where this library's segments belong to the user "
        "running the group (uid ", ::geteuid(), ") and are open to nobody else (mode 600); "
        "someone else wrote the group's store, or made that file");
  }
  if (static_cast<size_t>(info.st_size) < bytes) {
    ::close(fd);
    TORCH_CHECK(false, "dummy_collectives: shared memory ", name, " is smaller than expected");
  }
  void* data = nullptr;
  try {
    data = mapShared(fd, bytes, name);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return ShmSegment(name, data, bytes, /*owner=*/false);
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      linked_(std::exchange(other.linked_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  release();
}

void ShmSegment::unlink() {
  if (!name_.empty()) {
    // ENOENT is fine: another rank removed the name first.
    ::shm_unlink(name_.c_str());
  }
  linked_ = false;
}

void ShmSegment::release() {
  if (linked_) {
    unlink();
  }
  if (data_ != nullptr) {
    ::munmap(data_, size_);
    data_ = nullptr;
  }
}

} // namespace dummy_collectives
