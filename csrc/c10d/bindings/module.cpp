// The Python module dummy_collectives._C: the Options and Backend classes, as subclasses of
// torch's own pybind types so c10d accepts them wherever it takes a Backend or Backend.Options,
// and the process-wide functions. Each part is bound in a file of its own (bindings.hpp).
#include <torch/python.h>

#include "c10d/bindings/bindings.hpp"

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "dummy_collectives: a c10d backend over shared memory";
  // Registers torch's pybind types (Store, Backend, Backend.Options, Work) that ours derive from.
  py::module_::import("torch.distributed");

  dummy_collectives::bindings::bindOptions(m);
  dummy_collectives::bindings::bindBackends(m);
  dummy_collectives::bindings::bindWork(m);
  dummy_collectives::bindings::bindFlightRecorder(m);
  dummy_collectives::bindings::bindProcess(m);
}
