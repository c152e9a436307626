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

// Note [Async learning rate]: how the server scales the learning rate of one push in async and ssp mode.
// A synchronous round applies lr to the mean gradient of W workers' batches; async applies every push on its own,
// so at the same --lr an async epoch takes W times as many steps, each on 1/W of the round's samples, and each
// stale by about W - 1 updates, on top of the server's momentum (asynchrony adds implicit momentum: Mitliagkas et
// al., 2016). With the defaults (lr 0.05, momentum 0.9) the bundled CNN then diverged in two of three 2-worker runs,
// depending on timing. `workers` (the default in async and ssp) applies each push at lr / W, the same learning rate
// per sample as sync and DDP, so --lr means one thing across strategies (the linear scaling rule read per push);
// `none` applies lr as given, the setting under which docs/study.md reports async diverging at lr 0.05. With
// lr_staleness=on the staleness already divides the step (about W - 1 on average), so the default is `none` there.
enum class LrScale {
  Workers,  // lr / W per push
  None,     // lr per push
};

struct PsOptions {
  int servers = 1;
  Mode mode = Mode::Sync;
  int staleness = 2;                     // ssp's bound K; ssp with K = 0 runs as sync
  bool lrStaleness = false;              // lr / staleness per push (Zhang et al., IJCAI 2016)
  LrScale lrScale = LrScale::Workers;    // async and ssp (Note [Async learning rate]); sync: one update per round
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
