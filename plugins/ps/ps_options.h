#pragma once

// The `ps` strategy's options (--strategy-opt key=value), parsed and checked in every process: the launcher calls
// requirements() first, so a bad option fails there, before any rank or server starts.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata::ps {

enum class Mode {
  Sync,   // one update per step from the average of every worker's gradients (DDP's result)
  Async,  // each push applied at once, pulls answered with the newest values
  Ssp,    // async, but a worker more than `staleness` pushes ahead of the slowest waits (Petuum's SSP)
};

const char* modeName(Mode mode);

struct PsOptions {
  int servers = 1;
  Mode mode = Mode::Sync;
  int staleness = 2;                     // ssp's bound K; ssp with K = 0 runs as sync
  bool lrStaleness = false;              // lr / staleness per push (Zhang et al., IJCAI 2016)
  double dcAsgd = 0.0;                   // DC-ASGD's lambda (0: off): g + lambda g*g*(w_now - w_pulled)
  bool auth = true;                      // ZeroMQ CURVE between workers and servers
  std::string keyFile;                   // the job's CURVE secret (default: the launcher's per-job file)
  std::int64_t checkpointEvery = 0;      // servers write their ranges every N updates (0: never)
  int maxRestarts = 3;                   // with checkpoints: how often the launcher restarts a dead server
  std::vector<int> serverNodes;          // server_nodes=1,1: the node rank each server runs on (default: all on 0)
  std::vector<std::string> serverHosts;  // server_hosts=a,b: the host name of the node each server runs on
  std::string checkpointDir;             // where servers write (default: a per-job directory the launcher removes)
  std::string trace;                     // a server writes one JSON line per update to TRACE.<server>.jsonl
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// Throws Error naming the option and the values it takes.
PsOptions parsePsOptions(const std::map<std::string, std::string>& options);

}  // namespace strata::ps
