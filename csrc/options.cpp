#include <dummy_collectives/options.hpp>

#include <cstdlib>
#include <string>

#include <c10/util/Exception.h>

namespace dummy_collectives {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

// Raises for an environment variable whose text did not parse whole as a value >= minimum.
template <typename T>
void checkParsed(
    const char* name, const char* text, const char* end, T value, T minimum, const char* kind) {
  TORCH_CHECK_VALUE(
      end != text && end != nullptr && *end == '\0' && value >= minimum,
      "dummy_collectives: environment variable ",
      name,
      "='",
      text,
      "' is not ",
      kind,
      " >= ",
      minimum);
}

long long envInteger(const char* name, long long fallback, long long minimum) {
  const char* text = env(name);
  if (text == nullptr) {
    return fallback;
  }
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  // Accept a binary suffix for sizes: 4M, 256K.
  if (end != nullptr && (*end == 'K' || *end == 'k')) {
    value <<= 10, ++end;
  } else if (end != nullptr && (*end == 'M' || *end == 'm')) {
    value <<= 20, ++end;
  }
  checkParsed(name, text, end, value, minimum, "an integer");
  return value;
}

double envNumber(const char* name, double fallback, double minimum) {
  const char* text = env(name);
  if (text == nullptr) {
    return fallback;
  }
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  checkParsed(name, text, end, value, minimum, "a number");
  return value;
}

} // namespace

Mode parseMode(const std::string& text) {
  if (text == "real") {
    return Mode::kReal;
  }
  if (text == "zero") {
    return Mode::kZero;
  }
  TORCH_CHECK_VALUE(
      false, "dummy_collectives: mode must be 'real' or 'zero', got '", text, "'");
}

std::string parseInterHost(const std::string& text) {
  TORCH_CHECK_VALUE(
      text == "auto" || text == "gloo" || text == "nccl",
      "dummy_collectives: the cross-host engine (DUMMY_COLLECTIVES_INTER_HOST or "
      "pg_options.inter_host) must be 'auto', 'gloo' or 'nccl', got '",
      text,
      "'");
  return text;
}

std::string modeName(Mode mode) {
  return mode == Mode::kZero ? "zero" : "real";
}

BackendOptions::BackendOptions() : c10d::Backend::Options("dummy") {
  if (const char* text = env("DUMMY_COLLECTIVES_MODE")) {
    mode = parseMode(text);
  }
  bufferBytes = static_cast<size_t>(
      envInteger("DUMMY_COLLECTIVES_BUFFER_BYTES", static_cast<long long>(bufferBytes), 4096));
  oneShotMaxBytes = static_cast<size_t>(envInteger(
      "DUMMY_COLLECTIVES_ONE_SHOT_MAX_BYTES", static_cast<long long>(oneShotMaxBytes), 0));
  peerAccess = envInteger("DUMMY_COLLECTIVES_PEER_ACCESS", peerAccess ? 1 : 0, 0) != 0;
  peerAccessMinBytes = static_cast<size_t>(envInteger(
      "DUMMY_COLLECTIVES_PEER_ACCESS_MIN_BYTES", static_cast<long long>(peerAccessMinBytes), 0));
  peerAccessMaxBytes = static_cast<size_t>(envInteger(
      "DUMMY_COLLECTIVES_PEER_ACCESS_MAX_BYTES", static_cast<long long>(peerAccessMaxBytes), 0));
  peerAccessMinSpeed =
      envNumber("DUMMY_COLLECTIVES_PEER_ACCESS_MIN_SPEED", peerAccessMinSpeed, 0.0);
  spinMicros = static_cast<long>(envInteger("DUMMY_COLLECTIVES_SPIN_US", spinMicros, -1));
  threads = static_cast<int>(envInteger("DUMMY_COLLECTIVES_THREADS", threads, -1));
  cudaIpc = envInteger("DUMMY_COLLECTIVES_CUDA_IPC", cudaIpc ? 1 : 0, 0) != 0;
  cudaBufferBytes = static_cast<size_t>(envInteger(
      "DUMMY_COLLECTIVES_CUDA_BUFFER_BYTES", static_cast<long long>(cudaBufferBytes), 1 << 16));
  cudaHostWait = envInteger("DUMMY_COLLECTIVES_CUDA_HOST_WAIT", cudaHostWait ? 1 : 0, 0) != 0;
  if (const char* text = env("DUMMY_COLLECTIVES_INTER_HOST")) {
    interHost = parseInterHost(text);
  }
  interHostInlineBytes = static_cast<size_t>(envInteger(
      "DUMMY_COLLECTIVES_INTER_HOST_INLINE_BYTES",
      static_cast<long long>(interHostInlineBytes),
      0));
  interHostChunkBytes = static_cast<size_t>(envInteger(
      "DUMMY_COLLECTIVES_INTER_HOST_CHUNK_BYTES",
      static_cast<long long>(interHostChunkBytes),
      4096));
}

} // namespace dummy_collectives
