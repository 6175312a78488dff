// Python bindings: the Options and Backend classes, as subclasses of torch's own pybind types
// so c10d accepts them wherever it takes a Backend or Backend.Options.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include <dummy_collectives/backend.hpp>
#include <dummy_collectives/cross_memory.hpp>
#include <dummy_collectives/debug_log.hpp>
#include <dummy_collectives/exit_registry.hpp>
#include <dummy_collectives/flight_recorder.hpp>
#include <dummy_collectives/hierarchy/hierarchical_backend.hpp>
#include <dummy_collectives/work.hpp>
#include "flight_recorder_ring.hpp"
#include <dummy_collectives/reduce_kernel.hpp>
#include <dummy_collectives/shm_segment.hpp>

namespace py = pybind11;
using dummy_collectives::BackendOptions;
using dummy_collectives::DummyBackend;

namespace {

// A group's own copy of the options it was created with: its timeout and name must not leak
// into the caller's options object (one may serve several groups).
c10::intrusive_ptr<BackendOptions> groupOptions(
    const BackendOptions& options, std::chrono::milliseconds timeout, const std::string& name) {
  auto own = c10::make_intrusive<BackendOptions>(options);
  own->timeout = timeout;
  own->group_name = name;
  return own;
}

// A ledger's window for Python (dummy_collectives/_waits.py makes the summary of it).
py::tuple waitTotals(const dummy_collectives::WaitLedger::Totals& totals) {
  return py::make_tuple(totals.collectives, totals.timesLast, totals.waitedForNs);
}

constexpr const char* kWaitTotalsDoc =
    "This rank's window of who made whom wait: (collectives, times_last, waited_for_ns), the "
    "last two per group rank (how often it arrived last; how long this rank waited for it). "
    "Local to this rank; dummy_collectives.wait_summary() gathers every rank's.";
constexpr const char* kResetWaitsDoc = "Starts this rank's new window of _wait_totals().";

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "dummy_collectives: a c10d backend over shared memory";
  // Registers torch's pybind types (Store, Backend, Backend.Options) that ours derive from.
  py::module_::import("torch.distributed");

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

  py::class_<DummyBackend, c10d::Backend, c10::intrusive_ptr<DummyBackend>>(m, "DummyBackend")
      .def(
          py::init([](const c10::intrusive_ptr<c10d::Store>& store,
                      int rank,
                      int size,
                      std::chrono::milliseconds timeout,
                      const c10::intrusive_ptr<BackendOptions>& options,
                      std::vector<int> groupRanks,
                      int ranksOnMachine,
                      const std::string& groupName,
                      std::vector<int64_t> globalRanks,
                      std::vector<int32_t> pids) {
            auto own = groupOptions(*options, timeout, groupName);
            return c10::make_intrusive<DummyBackend>(
                store,
                rank,
                size,
                own,
                dummy_collectives::Placement{std::move(groupRanks), ranksOnMachine},
                std::move(globalRanks),
                std::move(pids));
          }),
          py::arg("store"),
          py::arg("rank"),
          py::arg("size"),
          py::arg("timeout"),
          py::arg("options"),
          // The host level of a group that spans hosts (Placement): its ranks' group ranks and
          // how many of the group's ranks run on this machine.
          py::arg("group_ranks") = std::vector<int>(),
          py::arg("ranks_on_machine") = 0,
          // c10d's name of the group (the debug log's INFO lines and the flight recorder show it).
          py::arg("group_name") = std::string(),
          // The group's ranks in the world, by group rank (the flight recorder's pg_config);
          // empty: the world.
          py::arg("global_ranks") = std::vector<int64_t>(),
          // Every rank's pid as the group's discovery found it (0: another pid namespace), so a
          // rank that dies before it maps the group's shared memory is known dead; empty: unknown.
          py::arg("pids") = std::vector<int32_t>(),
          py::call_guard<py::gil_scoped_release>())
      .def_property_readonly(
          "mode", [](const DummyBackend& b) { return dummy_collectives::modeName(b.mode()); })
      .def_property_readonly(
          "peer_access",
          &DummyBackend::peerAccess,
          "Whether large allreduces and gathers reach the peers' tensors directly (cross memory "
          "attach): 'on', 'off', or 'undecided' until the group's first one.")
      .def_property_readonly(
          "shares_cores",
          &DummyBackend::sharesCores,
          "Whether the group's ranks outnumber the CPUs they may run on (the union of their CPU "
          "affinities), in which case a waiting rank hands its core over rather than polling; "
          "None until the group's first collective.")
      .def_property_readonly(
          "broken_reason",
          &DummyBackend::brokenReason,
          "Why the group can no longer be used (a dead peer, a timeout, an abort); '' while it "
          "can.")
      .def(
          "_wait_totals",
          [](const DummyBackend& b) { return waitTotals(b.waitTotals()); },
          kWaitTotalsDoc)
      .def("_reset_waits", &DummyBackend::resetWaits, kResetWaitsDoc);

  using dummy_collectives::hierarchy::HierarchicalBackend;
  using dummy_collectives::hierarchy::Topology;
  py::class_<HierarchicalBackend, c10d::Backend, c10::intrusive_ptr<HierarchicalBackend>>(
      m,
      "HierarchicalBackend",
      "A dummy group whose ranks span hosts: shared memory inside each host (host_backend), a "
      "cross-host engine between hosts. Made by the backend's creator; see _hierarchy.py.")
      .def(
          py::init([](const c10::intrusive_ptr<c10d::Store>& store,
                      int rank,
                      int size,
                      std::chrono::milliseconds timeout,
                      const c10::intrusive_ptr<BackendOptions>& options,
                      std::vector<std::vector<int>> hosts,
                      std::vector<std::string> hostNames,
                      std::vector<std::string> hostAddresses,
                      c10::intrusive_ptr<DummyBackend> hostBackend,
                      std::optional<c10::intrusive_ptr<c10d::Backend>> rail,
                      c10::intrusive_ptr<c10d::Backend> everyone,
                      const std::string& groupName,
                      std::vector<int64_t> globalRanks,
                      std::vector<int> peerPids) {
            auto own = groupOptions(*options, timeout, groupName);
            return c10::make_intrusive<HierarchicalBackend>(
                store,
                rank,
                size,
                own,
                Topology(
                    rank, std::move(hosts), std::move(hostNames), std::move(hostAddresses),
                    std::move(peerPids)),
                std::move(hostBackend),
                rail ? *rail : c10::intrusive_ptr<c10d::Backend>(),
                std::move(everyone),
                std::move(globalRanks));
          }),
          py::arg("store"),
          py::arg("rank"),
          py::arg("size"),
          py::arg("timeout"),
          py::arg("options"),
          py::arg("hosts"),
          py::arg("host_names"),
          py::arg("host_addresses"),
          py::arg("host_backend"),
          py::arg("rail"),
          py::arg("everyone"),
          py::arg("group_name") = std::string(),
          py::arg("global_ranks") = std::vector<int64_t>(),
          py::arg("peer_pids") = std::vector<int>(),
          py::call_guard<py::gil_scoped_release>())
      .def_property_readonly(
          "hosts",
          [](const HierarchicalBackend& b) {
            std::vector<std::vector<int>> hosts;
            for (int h = 0; h < b.topology().hostCount(); ++h) {
              hosts.push_back(b.topology().ranksOn(h));
            }
            return hosts;
          },
          "The group ranks on each host, hosts ordered by their smallest rank.")
      .def_property_readonly(
          "host_backend",
          &HierarchicalBackend::hostBackend,
          "The DummyBackend of this rank's host (its ranks numbered by local rank).")
      .def_property_readonly(
          "broken_reason",
          &HierarchicalBackend::brokenReason,
          "Why the group can no longer be used, agreed by every rank; '' while it can.")
      .def(
          "_wait_totals",
          [](const HierarchicalBackend& b) { return waitTotals(b.waitTotals()); },
          kWaitTotalsDoc)
      .def("_reset_waits", &HierarchicalBackend::resetWaits, kResetWaitsDoc);

  // c10d hands our Work to Python as its base type; pybind then looks up the most derived type
  // first, and a type it does not know costs a failed lookup (hashing the type's name) on every
  // collective before it falls back to the base. Registered, the first lookup finds it. The
  // holder is layout-compatible with the base's (one intrusive pointer), as pybind requires for
  // casting a c10::intrusive_ptr<c10d::Work>. Unlike torch's holder for Work it does not release
  // the GIL to destroy the Work: ours never blocks in its destructor (it runs no collective).
  using dummy_collectives::DummyWork;
  py::class_<DummyWork, c10d::Work, c10::intrusive_ptr<DummyWork>>(
      m, "DummyWork", "The Work of a dummy collective (see torch.distributed.Work).");

  m.def(
      "_flush_at_exit",
      &dummy_collectives::flushAllForExit,
      "Interpreter exit (registered with atexit on import): runs what every live dummy group "
      "of this process still has outstanding, so no engine thread touches Python objects while "
      "the interpreter finalises.",
      py::call_guard<py::gil_scoped_release>());
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
  m.attr("SHM_NAME_PREFIX") = std::string(dummy_collectives::ShmSegment::kNamePrefix).substr(1);
}
