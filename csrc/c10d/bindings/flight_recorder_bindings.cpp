// Python bindings of the flight recorder (dummy_collectives.flight_recorder reads them).
#include <torch/python.h>

#include <dummy_collectives/flight_recorder.hpp>
#include "observe/flight_recorder_ring.hpp"

#include "c10d/bindings/bindings.hpp"

namespace py = pybind11;

namespace dummy_collectives::bindings {

void bindFlightRecorder(py::module_& m) {
  m.def(
      "_dump_fr_trace",
      [](bool includeCollectives, bool includeStackTraces, bool onlyActive) {
        std::string dump;
        {
          py::gil_scoped_release release;
          dump = dummy_collectives::flight_recorder::dumpPickle(
              includeCollectives, includeStackTraces, onlyActive);
        }
        return py::bytes(dump);
      },
      py::arg("include_collectives"),
      py::arg("include_stack_traces"),
      py::arg("only_active"),
      "The flight recorder's dump of this process's dummy groups, pickled in the format of "
      "torch's flight recorder (see dummy_collectives.flight_recorder).");
  m.def(
      "_fr_hot_path_ns",
      &dummy_collectives::flight_recorder::hotPathNanos,
      "What recording costs one small collective, in ns (the benchmark's --recorder-cost; fills "
      "the ring with entries of a group of its own: for a process that measures only).",
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_fr_buffer_size",
      &dummy_collectives::flight_recorder::capacity,
      "Entries the flight recorder keeps (TORCH_FR_BUFFER_SIZE, read once; 0: off).");
}

} // namespace dummy_collectives::bindings
