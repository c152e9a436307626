#include "ps_options.h"

#include <exception>

#include "strata/error.h"

namespace strata::ps {
namespace {

constexpr const char* kKnown =
    "servers, mode, staleness, lr_scale, lr_staleness, dc_asgd, auth, key_file, checkpoint_every, checkpoint_dir, "
    "max_restarts, server_nodes, server_hosts, trace, timeout_s";

std::int64_t integer(const std::string& key, const std::string& value, std::int64_t least) {
  try {
    std::size_t used = 0;
    const long long result = std::stoll(value, &used);
    if (used == value.size() && result >= least) {
      return result;
    }
  } catch (const std::exception&) {
  }
  fail("ps: --strategy-opt {}={} is not an integer >= {}", key, value, least);
}

double real(const std::string& key, const std::string& value) {
  try {
    std::size_t used = 0;
    const double result = std::stod(value, &used);
    if (used == value.size() && result >= 0) {
      return result;
    }
  } catch (const std::exception&) {
  }
  fail("ps: --strategy-opt {}={} is not a non-negative number", key, value);
}

bool onOff(const std::string& key, const std::string& value) {
  if (value == "on" || value == "1" || value == "true") {
    return true;
  }
  if (value == "off" || value == "0" || value == "false") {
    return false;
  }
  fail("ps: --strategy-opt {}={}: expected on or off", key, value);
}

}  // namespace

const char* modeName(Mode mode) {
  switch (mode) {
    case Mode::Sync:
      return "sync";
    case Mode::Async:
      return "async";
    case Mode::Ssp:
      return "ssp";
  }
  return "sync";
}

PsOptions parsePsOptions(const std::map<std::string, std::string>& options) {
  PsOptions o;
  for (const auto& [key, value] : options) {
    if (key == "servers") {
      o.servers = static_cast<int>(integer(key, value, 1));
    } else if (key == "mode") {
      if (value == "sync") {
        o.mode = Mode::Sync;
      } else if (value == "async") {
        o.mode = Mode::Async;
      } else if (value == "ssp") {
        o.mode = Mode::Ssp;
      } else {
        fail("ps: --strategy-opt mode={}: expected sync, async or ssp", value);
      }
    } else if (key == "staleness") {
      o.staleness = static_cast<int>(integer(key, value, 0));
    } else if (key == "lr_scale") {
      if (value == "workers") {
        o.lrScale = LrScale::Workers;
      } else if (value == "none") {
        o.lrScale = LrScale::None;
      } else {
        fail("ps: --strategy-opt lr_scale={}: expected workers (lr / W per push) or none (lr per push)", value);
      }
    } else if (key == "lr_staleness") {
      o.lrStaleness = onOff(key, value);
    } else if (key == "dc_asgd") {
      o.dcAsgd = real(key, value);
    } else if (key == "auth") {
      o.auth = onOff(key, value);
    } else if (key == "key_file") {
      o.keyFile = value;
    } else if (key == "checkpoint_every") {
      o.checkpointEvery = integer(key, value, 0);
    } else if (key == "server_nodes") {
      std::size_t start = 0;
      while (start <= value.size()) {
        const std::size_t comma = std::min(value.find(',', start), value.size());
        o.serverNodes.push_back(static_cast<int>(integer(key, value.substr(start, comma - start), 0)));
        start = comma + 1;
      }
    } else if (key == "server_hosts") {
      std::size_t start = 0;
      while (start <= value.size()) {
        const std::size_t comma = std::min(value.find(',', start), value.size());
        const std::string host = value.substr(start, comma - start);
        if (host.empty() || host.find_first_of(" \t") != std::string::npos) {
          fail("ps: --strategy-opt server_hosts={}: '{}' is not a host name (a comma-separated list, one per server)",
               value, host);
        }
        o.serverHosts.push_back(host);
        start = comma + 1;
      }
    } else if (key == "max_restarts") {
      o.maxRestarts = static_cast<int>(integer(key, value, 0));
    } else if (key == "checkpoint_dir") {
      o.checkpointDir = value;
    } else if (key == "trace") {
      o.trace = value;
    } else if (key == "timeout_s") {
      o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(real(key, value) * 1000));
    } else if (key == "compress") {
      // Named apart from unknown keys: ddp takes it, and a user comparing strategies passes it here too.
      fail(
          "ps: --strategy-opt compress={}: the parameter server does not compress its pushes and pulls yet (ddp "
          "does: docs/compression.md)",
          value);
    } else {
      fail("ps: unknown --strategy-opt '{}' (known: {})", key, kKnown);
    }
  }
  if (!o.serverNodes.empty() && o.serverNodes.size() != static_cast<std::size_t>(o.servers)) {
    fail("ps: --strategy-opt server_nodes names {} node(s) for {} server(s); give one node rank per server",
         o.serverNodes.size(), o.servers);
  }
  if (!o.serverHosts.empty() && o.serverHosts.size() != static_cast<std::size_t>(o.servers)) {
    fail("ps: --strategy-opt server_hosts names {} host(s) for {} server(s); give one host name per server",
         o.serverHosts.size(), o.servers);
  }
  if (!o.serverHosts.empty() && !o.serverNodes.empty()) {
    fail("ps: --strategy-opt server_nodes and server_hosts both place the servers; give one of them");
  }
  if (o.servers > 1024) {
    fail("ps: --strategy-opt servers={} is more than 1024", o.servers);
  }
  if (options.count("staleness") != 0 && o.mode != Mode::Ssp) {
    fail("ps: --strategy-opt staleness applies to mode=ssp only (mode={})", modeName(o.mode));
  }
  if ((o.lrStaleness || o.dcAsgd > 0) && o.mode == Mode::Sync) {
    fail(
        "ps: lr_staleness and dc_asgd correct stale gradients, which mode=sync does not have; use mode=async or "
        "mode=ssp");
  }
  if (options.count("lr_scale") != 0 && o.mode == Mode::Sync) {
    fail(
        "ps: --strategy-opt lr_scale scales the learning rate of each push in mode=async or mode=ssp; mode=sync "
        "applies one update per round of every worker's gradients");
  }
  if (options.count("lr_scale") == 0 && o.lrStaleness) {
    o.lrScale = LrScale::None;  // the staleness divides the step already (Note [Async learning rate])
  }
  if (o.mode == Mode::Ssp && o.staleness == 0) {
    o.mode = Mode::Sync;  // SSP with a bound of 0 is bulk-synchronous
  }
  return o;
}

}  // namespace strata::ps
