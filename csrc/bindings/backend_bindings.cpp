// Python bindings of the backends: DummyBackend (one host) and HierarchicalBackend (a group that
// spans hosts), as subclasses of torch's c10d.Backend.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include <dummy_collectives/backend.hpp>
#include <dummy_collectives/hierarchy/hierarchical_backend.hpp>

#include "bindings.hpp"

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

namespace dummy_collectives::bindings {

void bindBackends(py::module_& m) {
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
                dummy_collectives::HostLevelOf{std::move(groupRanks), ranksOnMachine},
                std::move(globalRanks),
                std::move(pids));
          }),
          py::arg("store"),
          py::arg("rank"),
          py::arg("size"),
          py::arg("timeout"),
          py::arg("options"),
          // The host level of a group that spans hosts (HostLevelOf): its ranks' group ranks and
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
}

} // namespace dummy_collectives::bindings
