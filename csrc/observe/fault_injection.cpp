#include <dummy_collectives/fault_injection.hpp>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

namespace dummy_collectives::fault_injection {

std::optional<Fault> fromEnv() {
  const char* raw = std::getenv(kVariable);
  if (raw == nullptr || *raw == '\0') {
    return std::nullopt;
  }
  const std::string value(raw);
  std::vector<std::string> fields;
  std::stringstream in(value);
  for (std::string field; std::getline(in, field, ':');) {
    fields.push_back(field);
  }
  const auto bad = [&](const std::string& why) {
    TORCH_CHECK_VALUE(
        false, "dummy_collectives: ", kVariable, "=", value, " is malformed (", why,
        "); expected rank:collective:step:raise|die, e.g. 1:3:2:raise");
  };
  if (fields.size() != 4) {
    bad(c10::str(fields.size(), " fields"));
  }
  Fault fault;
  try {
    size_t used = 0;
    fault.rank = std::stoi(fields[0], &used);
    if (used != fields[0].size() || fault.rank < 0) {
      bad("the rank");
    }
    const long long collective = std::stoll(fields[1], &used);
    if (used != fields[1].size() || collective < 0) {
      bad("the collective number");
    }
    fault.collective = static_cast<uint64_t>(collective);
    fault.step = std::stoi(fields[2], &used);
    if (used != fields[2].size() || fault.step < (collective == 0 ? 0 : 1)) {
      bad("the step: 1 or more");
    }
  } catch (const std::logic_error&) { // std::invalid_argument, std::out_of_range
    bad("not a number");
  }
  if (fields[3] == "raise") {
    fault.action = Action::kRaise;
  } else if (fields[3] == "die") {
    fault.action = Action::kDie;
  } else {
    bad("the action: raise or die");
  }
  if (fault.collective == 0) {
    fault.step = 0; // the group's creation has no steps
  }
  return fault;
}

void fire(const Fault& fault, const std::string& where) {
  if (fault.action == Action::kDie) {
    ::kill(::getpid(), SIGKILL); // as the OOM killer would: no handler, no message
    ::_exit(137); // not reached
  }
  throw std::runtime_error(c10::str(
      "fault injected by ", kVariable, " (rank ", fault.rank, ", collective ", fault.collective,
      ", step ", fault.step, ") ", where));
}

} // namespace dummy_collectives::fault_injection
