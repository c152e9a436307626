#pragma once

// A server's side of Note [PS recovery] (ps_checkpoint.h): where its checkpoints live, when it writes one, and how a
// restarted server reloads the latest into a fresh update rule. Free of ZeroMQ, like the rule.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ps_checkpoint.h"
#include "ps_options.h"
#include "ps_update_rule.h"

namespace strata::ps {

class ServerRecovery {
 public:
  // `jobId` and `restarts`: STRATA_JOB_ID and STRATA_ROLE_RESTARTS; `secretFile`: STRATA_JOB_SECRET_FILE, whose
  // directory holds the checkpoints when checkpoint_dir is not given. Creates the directory.
  ServerRecovery(const PsOptions& options, int serverIndex, int workers, std::string jobId, std::int64_t restarts,
                 const std::string& secretFile);

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::int64_t restarts() const { return restarts_; }

  // The checkpoint this server restarts from (its header; the tensors are read by restore), when one of this job's
  // exists. Another job's is ignored, saying so.
  std::optional<ServerCheckpoint> latest() const;
  // Reads `checkpoint`'s tensors into `rule` (allocated from its layout), restores the version and clocks, and
  // returns each worker's last applied sequence number.
  std::vector<std::uint64_t> restore(ServerCheckpoint& checkpoint, UpdateRule& rule);
  // After an update: every checkpoint_every versions, at a point where no sync round is half gathered, the state is
  // written and the workers learn (durable) which of their pushes it holds.
  void afterUpdate(const FlatLayout& layout, UpdateRule& rule, const std::vector<std::uint64_t>& lastSequence);
  // The last sequence number of `worker`'s that the latest checkpoint holds; every one when checkpoints are off
  // (a worker then keeps no pushes for replay).
  std::uint64_t durable(int worker) const;

 private:
  PsOptions options_;
  int serverIndex_;
  std::string jobId_;
  std::int64_t restarts_;
  std::string path_;                    // empty: no checkpoints
  std::vector<std::uint64_t> durable_;  // per worker
};

}  // namespace strata::ps
