#pragma once

#include <string>

#include <ucp/api/ucp.h>

namespace dummy_collectives::ucx {

// UCX's ucp, loaded at run time (dlopen): importing the package needs no UCX, and the library
// used is the one this process should use, found in this order:
//  1. a libucp this process has loaded already (MPI, UCC or ucx-py did): a second copy of UCX
//     in one process fights the first over its memory hooks;
//  2. DUMMY_COLLECTIVES_UCX_LIBRARY, a path to a libucp.so (a cluster's own UCX, for RDMA);
//  3. the system's libucp.so.0 where RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY says so (the libucx
//     wheel's own switch);
//  4. the libucx-cu* wheel's, a dependency of this package (TCP and shared memory: no verbs);
//  5. the system's libucp.so.0.
// The wheel's is preferred to an unnamed system one because a system UCX may be an old one an
// MPI package pulled in; a cluster names its own with the variable above.
struct Api {
#define DC_UCX_FUNCTION(name) decltype(&::name) name = nullptr;
#include "ucx/ucx_functions.def"
#undef DC_UCX_FUNCTION
  std::string path;    // the file loaded
  std::string version; // "1.22.0"
  std::string why;     // which rule above chose it
};

// The loaded API, loading it at the first call; throws std::runtime_error saying what was tried
// and why each failed. Thread-safe.
const Api& api();
// Whether UCX loads here (loads it); `why` gets the reason it does not.
bool available(std::string* why = nullptr);
// Where the libucx wheel's libraries are (set by the Python package at import; "" where it is
// not installed).
void setWheelLibraryDir(const std::string& dir);

// Throws std::runtime_error "<what>: <UCX's status string>" unless `status` is UCS_OK.
void check(ucs_status_t status, const char* what);

} // namespace dummy_collectives::ucx
