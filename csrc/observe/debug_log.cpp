#include <dummy_collectives/debug_log.hpp>

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <c10/core/ScalarType.h>

namespace dummy_collectives::debug_log {
namespace {

// NCCL writes its host name up to the first dot; so do we, so the two logs' lines line up.
std::string shortHostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) {
    return "unknown";
  }
  std::string host(name);
  return host.substr(0, host.find('.'));
}

const std::string& hostName() {
  static const std::string host = shortHostName();
  return host;
}

// DUMMY_COLLECTIVES_DEBUG_FILE with %h and %p replaced, as NCCL_DEBUG_FILE.
std::string filePath(const char* pattern) {
  std::string path;
  for (const char* c = pattern; *c != '\0'; ++c) {
    if (c[0] == '%' && c[1] == 'h') {
      path += hostName(), ++c;
    } else if (c[0] == '%' && c[1] == 'p') {
      path += std::to_string(::getpid()), ++c;
    } else {
      path += *c;
    }
  }
  return path;
}

// Opened at the first line, not at load: a job that logs nothing leaves no empty files.
int outputFd() {
  static const int fd = [] {
    const char* pattern = std::getenv("DUMMY_COLLECTIVES_DEBUG_FILE");
    if (pattern == nullptr || *pattern == '\0') {
      return STDERR_FILENO;
    }
    const std::string path = filePath(pattern);
    const int opened = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (opened < 0) {
      const std::string why = "dummy_collectives: cannot open DUMMY_COLLECTIVES_DEBUG_FILE " +
          path + " (" + std::strerror(errno) + "); logging to stderr\n";
      (void)!::write(STDERR_FILENO, why.data(), why.size());
      return STDERR_FILENO;
    }
    return opened;
  }();
  return fd;
}

bool equalsIgnoringCase(const char* text, const char* word) {
  for (; *text != '\0' && *word != '\0'; ++text, ++word) {
    if (std::toupper(static_cast<unsigned char>(*text)) != *word) {
      return false;
    }
  }
  return *text == '\0' && *word == '\0';
}

Level readLevel() {
  const char* text = std::getenv("DUMMY_COLLECTIVES_DEBUG");
  if (text == nullptr || *text == '\0' || equalsIgnoringCase(text, "WARN")) {
    return Level::kWarn;
  }
  if (equalsIgnoringCase(text, "INFO")) {
    return Level::kInfo;
  }
  if (equalsIgnoringCase(text, "TRACE")) {
    return Level::kTrace;
  }
  emit(
      Level::kWarn,
      -1,
      c10::str("DUMMY_COLLECTIVES_DEBUG='", text, "' is not WARN, INFO or TRACE; using WARN"));
  return Level::kWarn;
}

thread_local std::string* tlsNote = nullptr;

} // namespace

namespace detail {

// Read while the library loads: before any group exists, so no log site ever sees it change.
Level level = readLevel();

std::string* currentNote() {
  return tlsNote;
}

void addNote(const std::string& text) {
  std::string& note = *tlsNote;
  // A coalesced collective repeats its algorithm per tensor: say it once.
  const size_t last = note.rfind(", ");
  const size_t start = last == std::string::npos ? 0 : last + 2;
  if (note.compare(start, std::string::npos, text) == 0) {
    return;
  }
  note += note.empty() ? text : ", " + text;
}

} // namespace detail

const char* levelName() {
  switch (detail::level) {
    case Level::kTrace:
      return "TRACE";
    case Level::kInfo:
      return "INFO";
    default:
      return "WARN";
  }
}

void emit(Level level, int rank, const std::string& message) noexcept {
  try {
    const char* tag = level == Level::kTrace ? "TRACE" : level == Level::kInfo ? "INFO" : "WARN";
    std::string line = c10::str(
        hostName(), ":", ::getpid(), ":", static_cast<long>(::syscall(SYS_gettid)), " ");
    if (rank >= 0) {
      line += c10::str("[rank ", rank, "] ");
    }
    line += c10::str("DUMMY ", tag, " ", message, "\n");
    (void)!::write(outputFd(), line.data(), line.size());
  } catch (...) {
    // A log line is never worth an exception in the operation that wrote it.
  }
}

std::string bytes(uint64_t count) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(count);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof(units) / sizeof(units[0])) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (value == static_cast<double>(static_cast<uint64_t>(value))) {
    const auto whole = static_cast<unsigned long long>(value);
    std::snprintf(text, sizeof(text), "%llu %s", whole, units[unit]);
  } else {
    std::snprintf(text, sizeof(text), "%.1f %s", value, units[unit]);
  }
  return text;
}

std::string elapsedSince(std::chrono::steady_clock::time_point start) {
  const std::chrono::duration<double, std::micro> elapsed =
      std::chrono::steady_clock::now() - start;
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f us", elapsed.count());
  return text;
}

std::string inGroup(const Site& site) {
  return site.group == nullptr || site.group->empty() ? std::string() : " in group " + *site.group;
}

OpTrace::OpTrace(
    const OpDescriptor& op,
    const Site& site,
    std::chrono::steady_clock::time_point issuedAt)
    : op_(op), site_(site), issuedAt_(issuedAt), outer_(tlsNote) {
  tlsNote = &note_;
}

OpTrace::~OpTrace() {
  tlsNote = outer_;
  if (!site_.logged) {
    return;
  }
  try {
    std::string line = op_.describe();
    if (op_.dtype >= 0) {
      const auto dtype = static_cast<c10::ScalarType>(op_.dtype);
      line += " (" + bytes(static_cast<uint64_t>(op_.numel) * c10::elementSize(dtype)) + ")";
    }
    line += inGroup(site_) + ": ";
    if (!note_.empty()) {
      line += note_ + "; ";
    }
    line += (done_ ? "done in " : "failed after ") + elapsedSince(issuedAt_);
    emit(Level::kTrace, site_.rank, line);
  } catch (...) {
    // As emit(): never throw from a destructor.
  }
}

} // namespace dummy_collectives::debug_log
