#pragma once

#include <string>
#include <vector>

namespace dummy_collectives::inter_host {

// Which ranks of a group share a host (found at group creation, dummy_collectives/topology.py):
// ranks on one host share memory; hosts reach each other only through a cross-host engine.
class Topology {
 public:
  // hosts[h]: the group ranks on host h, ascending; hosts ordered by their smallest rank.
  Topology(
      int rank,
      std::vector<std::vector<int>> hosts,
      std::vector<std::string> hostNames,
      std::vector<std::string> hostAddresses);

  int rank() const {
    return rank_;
  }
  int size() const {
    return static_cast<int>(hostOf_.size());
  }
  int hostCount() const {
    return static_cast<int>(hosts_.size());
  }
  // This rank's host, and its index among that host's ranks.
  int host() const {
    return hostOf_[rank_];
  }
  int localRank() const {
    return localOf_[rank_];
  }
  int localSize() const {
    return static_cast<int>(hosts_[host()].size());
  }
  int hostOf(int rank) const {
    return hostOf_[rank];
  }
  int localRankOf(int rank) const {
    return localOf_[rank];
  }
  const std::vector<int>& ranksOn(int host) const {
    return hosts_[host];
  }
  // Every host runs the same number of ranks: then every rank carries a share of the cross-host
  // traffic on its rail; otherwise one leader per host (its local rank 0) carries it all.
  bool uniform() const {
    return uniform_;
  }
  // Every host runs one rank (the usual CPU layout): there is no in-host stage at all.
  bool oneRankPerHost() const {
    return uniform_ && localSize() == 1;
  }
  // The ranks with local rank k on each host that has one, in host order.
  std::vector<int> rail(int k) const;
  // The most ranks any host runs.
  int maxLocalSize() const;

  // "host h1 (10.0.0.2, ranks 2, 3)" and "rank 3 (host h1)", for messages.
  std::string describeHost(int host) const;
  std::string describeRank(int rank) const;
  // The address the cross-host engine binds to on each host ("" where it is not known).
  const std::vector<std::string>& addresses() const {
    return addresses_;
  }
  // The host whose engine address is `address`, or -1 (also where several hosts share it:
  // hosts made of one machine's ranks).
  int hostAt(const std::string& address) const;

 private:
  int rank_;
  std::vector<std::vector<int>> hosts_;
  std::vector<std::string> names_;
  std::vector<std::string> addresses_;
  std::vector<int> hostOf_;
  std::vector<int> localOf_;
  bool uniform_;
};

} // namespace dummy_collectives::inter_host
