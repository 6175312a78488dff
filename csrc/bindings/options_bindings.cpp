// Python binding of BackendOptions as dummy_collectives.Options (a subclass of torch's
// Backend.Options, so c10d takes it as pg_options).
#include <pybind11/stl.h>
#include <torch/python.h>

#include <dummy_collectives/options.hpp>

#include "bindings.hpp"

namespace py = pybind11;
using dummy_collectives::BackendOptions;

namespace dummy_collectives::bindings {

void bindOptions(py::module_& m) {
  py::class_<BackendOptions, c10d::Backend::Options, c10::intrusive_ptr<BackendOptions>>(
      m, "Options", "Options of a dummy process group; defaults come from DUMMY_COLLECTIVES_*.")
      .def(
          py::init([](std::optional<std::string> mode,
                      std::optional<size_t> bufferBytes,
                      std::optional<size_t> oneShotMaxBytes,
                      std::optional<bool> peerAccess,
                      std::optional<size_t> peerAccessMinBytes,
                      std::optional<size_t> peerAccessMaxBytes,
                      std::optional<double> peerAccessMinSpeed,
                      std::optional<long> spinUs,
                      std::optional<int> threads,
                      std::optional<bool> cudaIpc,
                      std::optional<size_t> cudaBufferBytes,
                      std::optional<bool> cudaHostWait,
                      std::optional<std::string> interHost,
                      std::optional<size_t> interHostInlineBytes,
                      std::optional<size_t> interHostChunkBytes) {
            auto options = c10::make_intrusive<BackendOptions>();
            if (mode) {
              options->mode = dummy_collectives::parseMode(*mode);
            }
            if (bufferBytes) {
              TORCH_CHECK_VALUE(*bufferBytes >= 4096, "buffer_bytes must be at least 4096");
              options->bufferBytes = *bufferBytes;
            }
            if (oneShotMaxBytes) {
              options->oneShotMaxBytes = *oneShotMaxBytes;
            }
            if (peerAccess) {
              options->peerAccess = *peerAccess;
            }
            if (peerAccessMinBytes) {
              options->peerAccessMinBytes = *peerAccessMinBytes;
            }
            if (peerAccessMaxBytes) {
              options->peerAccessMaxBytes = *peerAccessMaxBytes;
            }
            if (peerAccessMinSpeed) {
              TORCH_CHECK_VALUE(
                  *peerAccessMinSpeed >= 0.0, "peer_access_min_speed must be >= 0");
              options->peerAccessMinSpeed = *peerAccessMinSpeed;
            }
            if (spinUs) {
              options->spinMicros = *spinUs;
            }
            if (threads) {
              TORCH_CHECK_VALUE(*threads == -1 || *threads >= 1, "threads must be -1 or >= 1");
              options->threads = *threads;
            }
            if (cudaIpc) {
              options->cudaIpc = *cudaIpc;
            }
            if (cudaBufferBytes) {
              TORCH_CHECK_VALUE(
                  *cudaBufferBytes >= 65536, "cuda_buffer_bytes must be at least 65536");
              options->cudaBufferBytes = *cudaBufferBytes;
            }
            if (cudaHostWait) {
              options->cudaHostWait = *cudaHostWait;
            }
            if (interHost) {
              options->interHost = dummy_collectives::parseInterHost(*interHost);
            }
            if (interHostInlineBytes) {
              options->interHostInlineBytes = *interHostInlineBytes;
            }
            if (interHostChunkBytes) {
              TORCH_CHECK_VALUE(
                  *interHostChunkBytes >= 4096, "inter_host_chunk_bytes must be at least 4096");
              options->interHostChunkBytes = *interHostChunkBytes;
            }
            return options;
          }),
          py::kw_only(),
          py::arg("mode") = py::none(),
          py::arg("buffer_bytes") = py::none(),
          py::arg("one_shot_max_bytes") = py::none(),
          py::arg("peer_access") = py::none(),
          py::arg("peer_access_min_bytes") = py::none(),
          py::arg("peer_access_max_bytes") = py::none(),
          py::arg("peer_access_min_speed") = py::none(),
          py::arg("spin_us") = py::none(),
          py::arg("threads") = py::none(),
          py::arg("cuda_ipc") = py::none(),
          py::arg("cuda_buffer_bytes") = py::none(),
          py::arg("cuda_host_wait") = py::none(),
          py::arg("inter_host") = py::none(),
          py::arg("inter_host_inline_bytes") = py::none(),
          py::arg("inter_host_chunk_bytes") = py::none())
      .def_property(
          "mode",
          [](const BackendOptions& o) { return dummy_collectives::modeName(o.mode); },
          [](BackendOptions& o, const std::string& mode) {
            o.mode = dummy_collectives::parseMode(mode);
          })
      .def_readwrite("buffer_bytes", &BackendOptions::bufferBytes)
      .def_readwrite("one_shot_max_bytes", &BackendOptions::oneShotMaxBytes)
      .def_readwrite("peer_access", &BackendOptions::peerAccess)
      .def_readwrite("peer_access_min_bytes", &BackendOptions::peerAccessMinBytes)
      .def_readwrite("peer_access_max_bytes", &BackendOptions::peerAccessMaxBytes)
      .def_readwrite("peer_access_min_speed", &BackendOptions::peerAccessMinSpeed)
      .def_readwrite("spin_us", &BackendOptions::spinMicros)
      .def_readwrite("threads", &BackendOptions::threads)
      .def_readwrite("cuda_ipc", &BackendOptions::cudaIpc)
      .def_readwrite("cuda_buffer_bytes", &BackendOptions::cudaBufferBytes)
      .def_readwrite("cuda_host_wait", &BackendOptions::cudaHostWait)
      .def_property(
          "inter_host",
          [](const BackendOptions& o) { return o.interHost; },
          [](BackendOptions& o, const std::string& name) {
            o.interHost = dummy_collectives::parseInterHost(name);
          })
      .def_readwrite("inter_host_inline_bytes", &BackendOptions::interHostInlineBytes)
      .def_readwrite("inter_host_chunk_bytes", &BackendOptions::interHostChunkBytes);
}

} // namespace dummy_collectives::bindings
