// Python binding of the backend's Work.
#include <torch/python.h>

#include "c10d/work.hpp"

#include "c10d/bindings/bindings.hpp"

namespace py = pybind11;

namespace dummy_collectives::bindings {

void bindWork(py::module_& m) {
  // c10d hands our Work to Python as its base type; pybind then looks up the most derived type
  // first, and a type it does not know costs a failed lookup (hashing the type's name) on every
  // collective before it falls back to the base. Registered, the first lookup finds it. The
  // holder is layout-compatible with the base's (one intrusive pointer), as pybind requires for
  // casting a c10::intrusive_ptr<c10d::Work>. Unlike torch's holder for Work it does not release
  // the GIL to destroy the Work: ours never blocks in its destructor (it runs no collective).
  using dummy_collectives::DummyWork;
  py::class_<DummyWork, c10d::Work, c10::intrusive_ptr<DummyWork>>(
      m, "DummyWork", "The Work of a dummy collective (see torch.distributed.Work).");
}

} // namespace dummy_collectives::bindings
