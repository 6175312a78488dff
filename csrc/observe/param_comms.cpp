#include <dummy_collectives/param_comms.hpp>

#include <string>
#include <tuple>
#include <unordered_map>

#include <ATen/record_function.h>
#include <torch/csrc/distributed/c10d/ParamCommsUtils.hpp>

#include "c10d/argument_checks.hpp"

namespace dummy_collectives {

void recordParamComms(
    const c10d::Backend& group,
    uint64_t seq,
    bool p2p,
    const std::string& name,
    int rank,
    at::ScalarType dtype,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs,
    const SplitSizes& splits) {
  RECORD_PARAM_COMMS_DATA(
      std::make_tuple(static_cast<int64_t>(seq), p2p),
      std::make_tuple(group.getGroupUid(), group.getGroupDesc()),
      inputs,
      outputs,
      rank,
      std::string(name), // the macro takes its strings and vectors by value (rvalues)
      totalNumel(inputs),
      totalNumel(outputs),
      dtype,
      std::vector<int64_t>(splits.in),
      std::vector<int64_t>(splits.out),
      -1,
      -1,
      group.getSize());
}

void recordArrival(
    const at::ThreadLocalState& issuer,
    const std::string& groupUid,
    uint64_t seq,
    const char* profilingTitle,
    const Arrival& arrival) {
  if (!arrival.known() || profilingTitle == nullptr) {
    return;
  }
  // "dummy:all_reduce" -> "dummy.wait:all_reduce": not "dummy:*", which trace tools take for
  // the collective itself. (Declared before the record, which may keep a view of it.)
  const std::string title(profilingTitle);
  const std::string name = "dummy.wait:" + title.substr(title.find(':') + 1);
  at::ThreadLocalStateGuard onIssuersCallbacks(issuer);
  at::RecordFunction record(at::RecordScope::USER_SCOPE);
  if (!record.isActive()) {
    return;
  }
  // Integers only: torch's exporter writes a double such as 0.0 as "0.", which no JSON parser
  // reads. waited_us is rounded; waited_ns is exact (trace.py prefers it).
  const std::unordered_map<std::string, c10::IValue> args{
      {"last_arrival", static_cast<int64_t>(arrival.lastRank)},
      {"waited_us", static_cast<int64_t>((arrival.waitedNs + 500) / 1000)},
      {"waited_ns", static_cast<int64_t>(arrival.waitedNs)},
      {"Seq", static_cast<int64_t>(seq)},
      {"Process Group Name", groupUid},
  };
  record.before(name.c_str(), &args);
}

} // namespace dummy_collectives
