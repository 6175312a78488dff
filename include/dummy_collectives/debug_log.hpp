#pragma once

// The debug log, in NCCL_DEBUG's convention: DUMMY_COLLECTIVES_DEBUG=WARN (the default), INFO
// (what each group found and chose when it was made) or TRACE (also a line per finished
// operation), each line prefixed `<host>:<pid>:<tid> [rank <r>] DUMMY <LEVEL>`, written to
// stderr or to DUMMY_COLLECTIVES_DEBUG_FILE (`%h`: host, `%p`: pid).
//
// Off must cost nothing on the collectives' path: the level is read once, when the library is
// loaded, and every log site tests it inline (DC_LOG_ENABLED) before it builds any string.

#include <chrono>
#include <cstdint>
#include <string>

#include <c10/util/StringUtil.h>

#include <dummy_collectives/op_descriptor.hpp>

namespace dummy_collectives::debug_log {

enum class Level : int { kWarn = 1, kInfo = 2, kTrace = 3 };

namespace detail {
// Set once, by the library's static initialiser (debug_log.cpp); never written again.
extern Level level;
// The note of the operation this thread is running (OpTrace), or null.
std::string* currentNote();
void addNote(const std::string& text);
} // namespace detail

inline bool enabled(Level level) {
  return static_cast<int>(detail::level) >= static_cast<int>(level);
}

// "WARN", "INFO" or "TRACE": the level in effect.
const char* levelName();

// Writes one line: the prefix (rank < 0: none), then `message`. One write(2) per line, so lines
// of ranks and threads sharing a file never interleave. Never throws.
void emit(Level level, int rank, const std::string& message) noexcept;

// "512 B", "64 KiB", "4.5 MiB": sizes as the README writes them.
std::string bytes(uint64_t count);
// "12.3 us": the time since `start`.
std::string elapsedSince(std::chrono::steady_clock::time_point start);

// What an algorithm chose for the operation its thread runs ("one-shot", "peer access",
// "4 chunks"), for the operation's TRACE line. Builds nothing unless TRACE is on; pass cheap
// arguments (literals, numbers).
template <typename... Args>
inline void note(const Args&... args) {
  if (enabled(Level::kTrace) && detail::currentNote() != nullptr) {
    detail::addNote(c10::str(args...));
  }
}

// Who writes a group's TRACE lines: set once per backend, copied into each operation.
struct Site {
  int rank = 0;                        // the group rank the prefix names
  const std::string* group = nullptr;  // the group's name (lives as long as the backend), or null
  bool logged = true; // false: a step of a larger operation (a host level's collective)
};

// " in group 0", or nothing for a group without a name.
std::string inGroup(const Site& site);

// The TRACE line of one collective: made where the operation runs, under TRACE only (traced()
// below), it collects the notes of the algorithms it runs and writes the line when it goes out
// of scope: finished (done() was called) or failed. A site that is not `logged` still collects
// its notes, so they do not land in the operation around it, but writes nothing.
class OpTrace {
 public:
  OpTrace(const OpDescriptor& op, const Site& site, std::chrono::steady_clock::time_point issuedAt);
  ~OpTrace();
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

  void done() {
    done_ = true;
  }

 private:
  OpDescriptor op_;
  Site site_;
  std::chrono::steady_clock::time_point issuedAt_;
  bool done_ = false;
  std::string note_;
  std::string* outer_;
};

// The clock reading a traced operation starts from; no clock read when TRACE is off.
inline std::chrono::steady_clock::time_point issueTime() {
  return enabled(Level::kTrace) ? std::chrono::steady_clock::now()
                                : std::chrono::steady_clock::time_point();
}

// Runs `fn`, the whole of one operation, inside an OpTrace under TRACE; else just runs it.
template <typename Fn>
inline void traced(
    const OpDescriptor& op,
    const Site& site,
    std::chrono::steady_clock::time_point issuedAt,
    Fn&& fn) {
  if (!enabled(Level::kTrace)) {
    fn();
    return;
  }
  OpTrace trace(op, site, issuedAt);
  fn();
  trace.done();
}

} // namespace dummy_collectives::debug_log

#define DC_LOG_ENABLED(level) \
  (::dummy_collectives::debug_log::enabled(::dummy_collectives::debug_log::Level::level))

// DC_LOG(kInfo, rank, "text ", value, ...): the message is built only when the level is on.
#define DC_LOG(level, rank, ...)                                                     \
  do {                                                                               \
    if (DC_LOG_ENABLED(level)) {                                                     \
      ::dummy_collectives::debug_log::emit(                                          \
          ::dummy_collectives::debug_log::Level::level, (rank), ::c10::str(__VA_ARGS__)); \
    }                                                                                \
  } while (false)
