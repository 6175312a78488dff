// Python bindings of the backend: DummyBackend, a subclass of torch's c10d.Backend, over a
// shared-memory lowering (one host) or a two-level one (DummyBackend._across_hosts).
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include <dummy_collectives/backend.hpp>
#include "hierarchy/two_level_lowering.hpp"
#include "inter_host/topology.hpp"
#include "shm/shm_lowering.hpp"

#include "c10d/bindings/bindings.hpp"

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

// The group maker (dummy_collectives/_regroup.py) as C++ holds it: called with the GIL taken,
// and released with it (a Python object must not be dropped without it; once the interpreter
// is gone it is left alone).
DummyBackend::GroupFactory groupFactory(py::function make) {
  std::shared_ptr<py::function> held(new py::function(std::move(make)), [](py::function* f) {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      delete f;
    }
  });
  return [held](
             const std::string& storePrefix,
             int rank,
             int size,
             const std::vector<int64_t>& globalRanks,
             const c10::intrusive_ptr<BackendOptions>& options) {
    py::gil_scoped_acquire gil;
    return (*held)(storePrefix, rank, size, globalRanks, options)
        .cast<c10::intrusive_ptr<c10d::Backend>>();
  };
}

constexpr const char* kWaitTotalsDoc =
    "This rank's window of who made whom wait: (collectives, times_last, waited_for_ns), the "
    "last two per group rank (how often it arrived last; how long this rank waited for it). "
    "Local to this rank; dummy_collectives.wait_summary() gathers every rank's.";
constexpr const char* kResetWaitsDoc = "Starts this rank's new window of _wait_totals().";

} // namespace

namespace dummy_collectives::bindings {

void bindBackends(py::module_& m) {
  using dummy_collectives::GroupJoin;
  using dummy_collectives::Placement;
  using dummy_collectives::Lowering;
  using dummy_collectives::ShmLowering;
  using dummy_collectives::inter_host::Topology;
  using dummy_collectives::hierarchy::TwoLevelLowering;
  py::class_<DummyBackend, c10d::Backend, c10::intrusive_ptr<DummyBackend>>(
      m,
      "DummyBackend",
      "A dummy group: the c10d face over its lowering (shared memory on one host, two levels "
      "across hosts: DummyBackend._across_hosts).")
      .def(
          py::init([](const c10::intrusive_ptr<c10d::Store>& store,
                      int rank,
                      int size,
                      std::chrono::milliseconds timeout,
                      const c10::intrusive_ptr<BackendOptions>& options,
                      const std::string& groupName,
                      std::vector<int64_t> globalRanks,
                      std::vector<int32_t> pids) {
            auto own = groupOptions(*options, timeout, groupName);
            std::shared_ptr<Lowering> lowering;
            if (own->mode == dummy_collectives::Mode::kReal) {
              lowering = std::make_shared<ShmLowering>(
                  store, rank, size, own, GroupJoin{own->timeout, std::move(pids)}, Placement{},
                  dummy_collectives::debug_log::Site{rank, &own->group_name, true});
            }
            return c10::make_intrusive<DummyBackend>(
                rank, size, own, std::move(lowering), std::move(globalRanks));
          }),
          py::arg("store"),
          py::arg("rank"),
          py::arg("size"),
          py::arg("timeout"),
          py::arg("options"),
          // c10d's name of the group (the debug log's INFO lines and the flight recorder show it).
          py::arg("group_name") = std::string(),
          // The group's ranks in the world, by group rank (the flight recorder's pg_config);
          // empty: the world.
          py::arg("global_ranks") = std::vector<int64_t>(),
          // Every rank's pid as the group's discovery found it (0: another pid namespace), so a
          // rank that dies before it maps the group's shared memory is known dead; empty: unknown.
          py::arg("pids") = std::vector<int32_t>(),
          py::call_guard<py::gil_scoped_release>())
      .def_static(
          "_across_hosts",
          [](const c10::intrusive_ptr<c10d::Store>& store,
             const c10::intrusive_ptr<c10d::Store>& hostStore,
             int rank,
             int size,
             std::chrono::milliseconds timeout,
             const c10::intrusive_ptr<BackendOptions>& options,
             std::vector<std::vector<int>> hosts,
             std::vector<std::string> hostNames,
             std::vector<std::string> hostAddresses,
             int ranksOnMachine,
             std::optional<c10::intrusive_ptr<c10d::Backend>> rail,
             c10::intrusive_ptr<c10d::Backend> everyone,
             std::optional<c10::intrusive_ptr<c10d::Backend>> linkProbe,
             const std::string& groupName,
             std::vector<int64_t> globalRanks) {
            auto own = groupOptions(*options, timeout, groupName);
            auto lowering = std::make_shared<TwoLevelLowering>(
                store,
                hostStore,
                own,
                Topology(rank, std::move(hosts), std::move(hostNames), std::move(hostAddresses)),
                ranksOnMachine,
                rail ? *rail : c10::intrusive_ptr<c10d::Backend>(),
                std::move(everyone),
                linkProbe ? *linkProbe : c10::intrusive_ptr<c10d::Backend>());
            return c10::make_intrusive<DummyBackend>(
                rank, size, own, std::move(lowering), std::move(globalRanks));
          },
          "The backend of a group whose ranks span hosts (made by _hierarchy.create): shared "
          "memory among this host's ranks through `host_store`, the cross-host engines `rail` "
          "(None for a non-leader where hosts differ in size) and `everyone` between hosts; "
          "`link_probe`, on the hosts' leaders where a host runs several ranks, times the link "
          "at creation and is closed after.",
          py::arg("store"),
          py::arg("host_store"),
          py::arg("rank"),
          py::arg("size"),
          py::arg("timeout"),
          py::arg("options"),
          py::arg("hosts"),
          py::arg("host_names"),
          py::arg("host_addresses"),
          py::arg("ranks_on_machine"),
          py::arg("rail"),
          py::arg("everyone"),
          py::arg("link_probe") = py::none(),
          py::arg("group_name") = std::string(),
          py::arg("global_ranks") = std::vector<int64_t>(),
          py::call_guard<py::gil_scoped_release>())
      .def_property_readonly(
          "mode", [](const DummyBackend& b) { return dummy_collectives::modeName(b.mode()); })
      .def_property_readonly(
          "lowering",
          [](const DummyBackend& b) {
            return std::string(b.lowering() ? b.lowering()->name() : "none");
          },
          "How the group moves data: 'shm' (one host), 'two_level' (across hosts), or 'none' "
          "(zero mode).")
      .def_property_readonly(
          "hosts",
          [](const DummyBackend& b) {
            if (!b.lowering()) {
              std::vector<int> all(b.getSize());
              for (int r = 0; r < b.getSize(); ++r) {
                all[r] = r;
              }
              return std::vector<std::vector<int>>{all};
            }
            return b.lowering()->hosts();
          },
          "The group ranks on each host, hosts ordered by their smallest rank.")
      .def_property_readonly(
          "algorithms",
          [](const DummyBackend& b) {
            return b.lowering() ? b.lowering()->algorithms() : std::vector<std::string>{};
          },
          "A group spanning hosts: which cross-host algorithm runs each collective at each size, "
          "a line per collective (the defaults for its layout, with DUMMY_COLLECTIVES_ALGO's "
          "rules over them); empty on one host.")
      .def_property_readonly(
          "peer_access",
          [](const DummyBackend& b) {
            return b.lowering() ? b.lowering()->peerAccess() : std::string("off");
          },
          "Whether large allreduces and gathers reach the peers' tensors directly (cross memory "
          "attach): 'on', 'off', or 'undecided' until the group's first one (this host's ranks).")
      .def_property_readonly(
          "shares_cores",
          [](const DummyBackend& b) {
            return b.lowering() ? b.lowering()->sharesCores() : std::nullopt;
          },
          "Whether the host's ranks outnumber the CPUs they may run on (the union of their CPU "
          "affinities), in which case a waiting rank hands its core over rather than polling; "
          "None until the group's first collective.")
      .def_property_readonly(
          "broken_reason",
          &DummyBackend::brokenReason,
          "Why the group can no longer be used (a dead peer, a timeout, an abort), agreed by "
          "every rank; '' while it can.")
      .def(
          "_set_group_factory",
          [](DummyBackend& b, py::function make) { b.setGroupFactory(groupFactory(make)); },
          "Lets the group shrink and reconfigure: make(store_prefix, rank, size, global_ranks, "
          "options) returns a backend of a group made through that prefix of this group's store "
          "(dummy_collectives._regroup).",
          py::arg("make"))
      .def(
          "get_error",
          &DummyBackend::getError,
          "SUCCESS while the group is usable; once it failed, TIMEOUT (a collective timed out), "
          "COMM_ERROR (this rank failed or aborted it) or REMOTE_ERROR (another rank did, or "
          "died). torch >= 2.15 binds it on every Backend; this makes it available on older "
          "torch too.",
          py::call_guard<py::gil_scoped_release>())
      .def_property_readonly(
          "dead_ranks",
          py::cpp_function(
              &DummyBackend::deadRanks, py::call_guard<py::gil_scoped_release>()),
          "The group ranks this rank knows to be gone (their process ended, a rank that saw it "
          "said so, or their host's connection was lost), ascending: the ranks_to_exclude of "
          "torch.distributed.shrink_group. One store request per other rank across hosts.")
      .def(
          "_wait_totals",
          [](const DummyBackend& b) { return waitTotals(b.waitTotals()); },
          kWaitTotalsDoc)
      .def("_reset_waits", &DummyBackend::resetWaits, kResetWaitsDoc);
}

} // namespace dummy_collectives::bindings
