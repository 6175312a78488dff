#include <dummy_collectives/param_comms.hpp>

#include <tuple>

#include <torch/csrc/distributed/c10d/ParamCommsUtils.hpp>

#include <dummy_collectives/argument_checks.hpp>

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

} // namespace dummy_collectives
