#pragma once

// The pieces of the Python module dummy_collectives._C, one per class or concern; module.cpp's
// PYBIND11_MODULE calls them in order (Options first: the backends' constructors take it).

#include <pybind11/pybind11.h>

namespace dummy_collectives::bindings {

// options_bindings.cpp: Options, _options_table().
void bindOptions(pybind11::module_& m);
// backend_bindings.cpp: DummyBackend (its one-host and across-hosts makers).
void bindBackends(pybind11::module_& m);
// work_bindings.cpp: DummyWork.
void bindWork(pybind11::module_& m);
// flight_recorder_bindings.cpp: the flight recorder's dump and costs.
void bindFlightRecorder(pybind11::module_& m);
// process_bindings.cpp: what concerns the whole process (exit flush, debug level, CPU, shm names).
void bindProcess(pybind11::module_& m);

} // namespace dummy_collectives::bindings
