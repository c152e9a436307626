#pragma once

// Extra process roles a strategy asks for (the parameter server's `ps-server`). The launcher starts `count`
// processes of each role beside the workers; `strata role <name> --index I ...` runs one by hand. A role process
// gets a RoleContext and runs Strategy::runRole; it tells the workers where it listens through the store.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "strata/comm/store.h"
#include "strata/sdk/optimizer.h"

namespace strata {

struct RoleRequest {
  std::string name;  // a command-line word: lower case, digits and '-'
  int count = 1;
  // How often the launcher starts a process of this role again when it dies before the workers are done (it can
  // recover: a parameter server reloading its checkpoint); 0: its death ends the job. A restarted process sees
  // STRATA_ROLE_RESTARTS=n in its environment.
  int maxRestarts = 0;
  // The node rank (--node-rank) whose launcher runs each process of the role, by index; empty: all on node 0.
  std::vector<int> nodes = {};
  // Or the host name of the node each process runs on, by index (Note [Placing roles by host] in
  // cli/launch/node_hosts.h): every node's launcher publishes its host name in the job's store and the node of that
  // name starts the process. At most one of `nodes` and `hosts` is given.
  std::vector<std::string> hosts = {};
  int nodeOf(int index) const {
    return index < static_cast<int>(nodes.size()) ? nodes[static_cast<std::size_t>(index)] : 0;
  }
};

class RoleContext {
 public:
  virtual ~RoleContext() = default;
  virtual const std::string& role() const = 0;
  virtual int index() const = 0;  // 0 .. count-1 within the role
  virtual int count() const = 0;
  virtual int workers() const = 0;  // the job's worker ranks (world size)
  virtual Store& store() = 0;
  virtual const std::map<std::string, std::string>& options() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  // The address other hosts reach this process at (MASTER_ADDR's side of the job: the node's host name or IP).
  virtual std::string hostAddress() const = 0;
  // Set by the launcher when the job ends: a role loop polls it and returns.
  virtual bool stopRequested() const = 0;
  // The run's update rule (--optimizer and its flags, exactly as the workers were given them) over slices the role
  // owns (a parameter server's key ranges), with state for those slices only. Rank 0 publishes the rule when
  // training starts, so this waits for it up to timeout(). Refuses --clip-grad-norm (it needs the global norm).
  virtual std::unique_ptr<SliceOptimizer> createOptimizer(std::vector<ParameterSlice> slices) = 0;
};

// The store key under which process `index` of `role` publishes where it listens ("host:port" or any string).
inline std::string roleEndpointKey(const std::string& role, int index) {
  return fmt::format("roles/{}/{}/endpoint", role, index);
}

inline void publishRoleEndpoint(Store& store, const std::string& role, int index, const std::string& endpoint) {
  store.setString(roleEndpointKey(role, index), endpoint);
}

// Note [Role stop]: rank 0 writes this key when the job no longer needs its roles (the summary is written, the
// ranks are leaving; Note [Leaving the store]). `strata train`'s launcher stops the roles it started with SIGTERM
// once the ranks have exited; a role process that no launcher of Strata's started (a srun task, Note [Slurm roles];
// `strata role` by hand) stops when the key appears (RoleContext::stopRequested).
inline constexpr const char* kJobDoneKey = "summary/done";

// Note [Role figures]: the store key under which process `index` of `role` publishes what it measured of itself, a
// JSON object: `peak_memory_bytes`, `memory_breakdown` (peak bytes by memory category, from Strata's allocator, as
// the ranks report theirs), `resident_peak_bytes` (the process's peak resident set), and whatever else the role
// adds. A role publishes before it answers the requests that changed them, so what the workers have seen answered
// is in it; `strata train`'s rank 0 copies every role process's figures into summary.json ("servers").
inline std::string roleFiguresKey(const std::string& role, int index) {
  return fmt::format("roles/{}/{}/figures", role, index);
}

// Blocks until process `index` of `role` has published its endpoint; throws Error naming the key after `timeout`.
inline std::string lookupRoleEndpoint(Store& store, const std::string& role, int index,
                                      std::chrono::milliseconds timeout) {
  return store.getString(roleEndpointKey(role, index), timeout);
}

}  // namespace strata
