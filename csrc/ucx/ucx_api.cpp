#include "ucx/ucx_api.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

#include <c10/util/StringUtil.h>

namespace dummy_collectives::ucx {
namespace {

// The oldest libucp whose API this build uses (the nbx calls, tag probes with messages).
constexpr unsigned kMinimumMinor = 12;

std::mutex& loadMutex() {
  static std::mutex mu;
  return mu;
}
std::string& wheelLibraryDir() {
  static std::string dir;
  return dir;
}

bool truthy(const char* value) {
  if (value == nullptr) {
    return false;
  }
  const std::string text(value);
  return !text.empty() && text != "0" && text != "false" && text != "False" && text != "no";
}

// Opens `file` (a path or a soname), resolves every function and checks the version; throws
// saying why not. RTLD_LOCAL keeps UCX's symbols out of the process's namespace.
Api open(const std::string& file, int extraFlags, const std::string& why) {
  void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL | extraFlags);
  if (handle == nullptr) {
    const char* error = ::dlerror();
    throw std::runtime_error(error ? error : "not loaded");
  }
  // A refused library is closed again, so its libucs/libuct do not stand in for the next
  // candidate's (they share sonames).
  auto refuse = [&](const std::string& why) {
    ::dlclose(handle);
    throw std::runtime_error(why);
  };
  Api api;
#define DC_UCX_FUNCTION(name)                                                    \
  api.name = reinterpret_cast<decltype(api.name)>(::dlsym(handle, #name));       \
  if (api.name == nullptr) {                                                     \
    refuse(c10::str(file, " has no ", #name));                                   \
  }
#include "ucx/ucx_functions.def"
#undef DC_UCX_FUNCTION
  unsigned major = 0, minor = 0, release = 0;
  api.ucp_get_version(&major, &minor, &release);
  api.version = c10::str(major, ".", minor, ".", release);
  if (major != UCP_API_MAJOR || minor < kMinimumMinor) {
    refuse(c10::str(file, " is UCX ", api.version, "; dummy_collectives needs ", UCP_API_MAJOR,
                    ".", kMinimumMinor, " or newer"));
  }
  Dl_info info{};
  api.path = ::dladdr(reinterpret_cast<void*>(api.ucp_get_version), &info) && info.dli_fname
      ? info.dli_fname
      : file;
  api.why = why;
  return api;
}

Api load() {
  std::vector<std::string> tried;
  auto attempt = [&](const std::string& file, int flags, const std::string& why)
      -> std::optional<Api> {
    try {
      return open(file, flags, why);
    } catch (const std::exception& e) {
      tried.push_back(c10::str(why, ": ", e.what()));
      return std::nullopt;
    }
  };
  if (auto api = attempt("libucp.so.0", RTLD_NOLOAD, "already loaded in this process")) {
    return *api;
  }
  if (const char* path = std::getenv("DUMMY_COLLECTIVES_UCX_LIBRARY")) {
    if (auto api = attempt(path, 0, "DUMMY_COLLECTIVES_UCX_LIBRARY")) {
      return *api;
    }
    throw std::runtime_error(c10::str("UCX did not load: ", tried.back()));
  }
  const bool preferSystem = truthy(std::getenv("RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY"));
  if (preferSystem) {
    if (auto api = attempt("libucp.so.0", 0, "the system's (RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY)")) {
      return *api;
    }
  }
  if (!wheelLibraryDir().empty()) {
    if (auto api = attempt(wheelLibraryDir() + "/libucp.so.0", 0, "the libucx wheel's")) {
      return *api;
    }
  } else {
    tried.push_back("the libucx wheel's: not installed");
  }
  if (!preferSystem) {
    if (auto api = attempt("libucp.so.0", 0, "the system's")) {
      return *api;
    }
  }
  std::string text = "UCX did not load (";
  for (size_t i = 0; i < tried.size(); ++i) {
    text += (i ? "; " : "") + tried[i];
  }
  throw std::runtime_error(text + ")");
}

struct Loaded {
  std::optional<Api> api;
  std::string error;
};

const Loaded& loaded() {
  static Loaded state = [] {
    std::lock_guard<std::mutex> lock(loadMutex());
    Loaded result;
    try {
      result.api = load();
    } catch (const std::exception& e) {
      result.error = e.what();
    }
    return result;
  }();
  return state;
}

} // namespace

const Api& api() {
  const Loaded& state = loaded();
  if (!state.api) {
    throw std::runtime_error(state.error);
  }
  return *state.api;
}

bool available(std::string* why) {
  const Loaded& state = loaded();
  if (!state.api && why != nullptr) {
    *why = state.error;
  }
  return state.api.has_value();
}

void setWheelLibraryDir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(loadMutex());
  wheelLibraryDir() = dir;
}

void check(ucs_status_t status, const char* what) {
  if (status != UCS_OK) {
    throw std::runtime_error(c10::str(what, ": ", api().ucs_status_string(status)));
  }
}

} // namespace dummy_collectives::ucx
