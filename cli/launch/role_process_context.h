#pragma once

#include <chrono>
#include <map>
#include <string>

#include "strata/sdk/roles.h"

namespace strata::cli {

// The RoleContext of a `strata role` process: what the command parsed, the store it connected to, and a stop flag
// raised by SIGTERM or SIGINT (the launcher's way of ending a role, or Ctrl-C by hand).
class RoleProcessContext final : public RoleContext {
 public:
  struct Fields {
    std::string role;
    int index = 0;
    int count = 1;
    int workers = 1;
    std::map<std::string, std::string> options;
    std::chrono::milliseconds timeout{std::chrono::seconds(300)};
    std::string hostAddress;
  };

  RoleProcessContext(Fields fields, Store& store);

  const std::string& role() const override { return fields_.role; }
  int index() const override { return fields_.index; }
  int count() const override { return fields_.count; }
  int workers() const override { return fields_.workers; }
  Store& store() override { return store_; }
  const std::map<std::string, std::string>& options() const override { return fields_.options; }
  std::chrono::milliseconds timeout() const override { return fields_.timeout; }
  std::string hostAddress() const override { return fields_.hostAddress; }
  // SIGTERM or SIGINT, or the job is done (Note [Role stop]).
  bool stopRequested() const override;
  std::unique_ptr<SliceOptimizer> createOptimizer(std::vector<ParameterSlice> slices) override;

  // Makes SIGTERM and SIGINT raise the stop flag instead of ending the process. The first one only: the handlers
  // reset, so a second Ctrl-C ends a role that does not poll the flag.
  static void installStopHandlers();

 private:
  Fields fields_;
  Store& store_;
  // Note [Role stop]: the job-done key, looked up at most once a second.
  mutable std::chrono::steady_clock::time_point lastDoneCheck_{};
  mutable bool jobDone_ = false;
};

// This host's address on the route to host:port (the local end a connection there would use), so that processes
// that reach the master reach this one too; the host name when the route cannot be found.
std::string localAddressTowards(const std::string& host, int port);

}  // namespace strata::cli
