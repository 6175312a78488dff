// Python bindings of what concerns the whole process rather than a group: the exit flush, the
// debug log's level, the CPU's reduction kernels, the kernel's cross-memory copy, /dev/shm names,
// the UCX library groups across hosts load.
#include <torch/python.h>

#include "shm/cross_memory.hpp"
#include <dummy_collectives/debug_log.hpp>
#include "c10d/exit_registry.hpp"
#include "kernels/reduce_kernel.hpp"
#include "shm/shm_segment.hpp"
#include "ucx/ucx_api.hpp"

#include "c10d/bindings/bindings.hpp"

namespace py = pybind11;

namespace dummy_collectives::bindings {

void bindProcess(py::module_& m) {
  m.def(
      "_flush_at_exit",
      &dummy_collectives::flushAllForExit,
      "Interpreter exit (registered with atexit on import): runs what every live dummy group "
      "of this process still has outstanding, so no engine thread touches Python objects while "
      "the interpreter finalises.",
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "debug_level",
      &dummy_collectives::debug_log::levelName,
      "The debug log's level, read once when the library loaded: 'WARN', 'INFO' or 'TRACE' "
      "(DUMMY_COLLECTIVES_DEBUG).");
  m.def(
      "reduce_capability",
      &dummy_collectives::reduceCapability,
      "The instruction set the reduction kernels use on this CPU.");
  m.def(
      "cross_memory_copy_speed",
      &dummy_collectives::cross_memory::copySpeed,
      "How fast the kernel copies another process's memory (process_vm_readv) against memcpy "
      "in this process, as a fraction of memcpy's speed (0 where it cannot); peer access is "
      "used only at or above Options.peer_access_min_speed. Measured on the first call.",
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_set_ucx_wheel_library_dir",
      &dummy_collectives::ucx::setWheelLibraryDir,
      "Where the libucx wheel's libraries are (the package sets it at import).");
  m.def(
      "ucx_library",
      [] {
        std::string why;
        if (!dummy_collectives::ucx::available(&why)) {
          return py::dict(py::arg("loaded") = false, py::arg("why") = why);
        }
        const auto& api = dummy_collectives::ucx::api();
        return py::dict(py::arg("loaded") = true, py::arg("version") = api.version,
                        py::arg("path") = api.path, py::arg("why") = api.why);
      },
      "The UCX library groups across hosts use (loading it at the first call): {'loaded', "
      "'version', 'path', 'why'} where it loads, {'loaded': False, 'why'} where it does not.");
  m.attr("SHM_NAME_PREFIX") = std::string(dummy_collectives::ShmSegment::kNamePrefix).substr(1);
}

} // namespace dummy_collectives::bindings
