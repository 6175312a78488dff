#include "inter_host/topology.hpp"

#include <algorithm>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

namespace dummy_collectives::inter_host {

Topology::Topology(
    int rank,
    std::vector<std::vector<int>> hosts,
    std::vector<std::string> hostNames,
    std::vector<std::string> hostAddresses)
    : rank_(rank),
      hosts_(std::move(hosts)),
      names_(std::move(hostNames)),
      addresses_(std::move(hostAddresses)) {
  TORCH_CHECK(
      !hosts_.empty() && names_.size() == hosts_.size() && addresses_.size() == hosts_.size(),
      "dummy_collectives: a topology needs a name and an address per host");
  size_t size = 0;
  for (const auto& ranks : hosts_) {
    size += ranks.size();
  }
  hostOf_.assign(size, -1);
  localOf_.assign(size, -1);
  for (int h = 0; h < hostCount(); ++h) {
    TORCH_CHECK(!hosts_[h].empty(), "dummy_collectives: host ", h, " has no ranks");
    for (int i = 0; i < static_cast<int>(hosts_[h].size()); ++i) {
      const int r = hosts_[h][i];
      TORCH_CHECK(
          r >= 0 && r < static_cast<int>(size) && hostOf_[r] == -1,
          "dummy_collectives: rank ", r, " appears twice or is out of range in the topology");
      hostOf_[r] = h;
      localOf_[r] = i;
    }
  }
  TORCH_CHECK(
      rank_ >= 0 && rank_ < static_cast<int>(size),
      "dummy_collectives: rank ", rank_, " is not in the topology");
  uniform_ = std::all_of(hosts_.begin(), hosts_.end(), [&](const std::vector<int>& ranks) {
    return ranks.size() == hosts_[0].size();
  });
}

std::vector<int> Topology::rail(int k) const {
  std::vector<int> ranks;
  for (const auto& host : hosts_) {
    if (k < static_cast<int>(host.size())) {
      ranks.push_back(host[k]);
    }
  }
  return ranks;
}

int Topology::maxLocalSize() const {
  size_t most = 0;
  for (const auto& host : hosts_) {
    most = std::max(most, host.size());
  }
  return static_cast<int>(most);
}

std::string Topology::describeHost(int host) const {
  std::string where = names_[host];
  if (!addresses_[host].empty()) {
    where += c10::str(" (", addresses_[host], ")");
  }
  return c10::str(
      "host ", where, ", rank", hosts_[host].size() > 1 ? "s " : " ",
      c10::Join(", ", hosts_[host]));
}

std::string Topology::describeRank(int rank) const {
  return c10::str("rank ", rank, " (host ", names_[hostOf_[rank]], ")");
}

int Topology::hostAt(const std::string& address) const {
  int found = -1;
  for (int h = 0; h < hostCount(); ++h) {
    if (!address.empty() && addresses_[h] == address) {
      if (found >= 0) {
        return -1; // several hosts on one address: it names none of them
      }
      found = h;
    }
  }
  return found;
}

} // namespace dummy_collectives::inter_host
