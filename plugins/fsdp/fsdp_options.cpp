#include "fsdp_options.h"

#include "strata/error.h"

namespace strata::plugins::fsdp {
namespace {

std::int64_t positiveInteger(const std::string& key, const std::string& value) {
  std::size_t used = 0;
  long long parsed = 0;
  try {
    parsed = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || parsed <= 0) {
    fail("fsdp: --strategy-opt {}={} must be a positive integer", key, value);
  }
  return parsed;
}

}  // namespace

const char* levelName(ShardLevel level) {
  switch (level) {
    case ShardLevel::Full:
      return "full";
    case ShardLevel::GradOp:
      return "grad_op";
    case ShardLevel::None:
      return "none";
  }
  return "?";
}

FsdpOptions parseFsdpOptions(const std::map<std::string, std::string>& options) {
  FsdpOptions parsed;
  for (const auto& [key, value] : options) {
    if (key == "shard") {
      if (value == "full") {
        parsed.level = ShardLevel::Full;
      } else if (value == "grad_op") {
        parsed.level = ShardLevel::GradOp;
      } else if (value == "none") {
        parsed.level = ShardLevel::None;
      } else if (value == "hybrid") {
        fail(
            "fsdp: shard=hybrid (sharded within a node, replicated across nodes) is not implemented yet; use full, "
            "grad_op or none");
      } else {
        fail("fsdp: unknown --strategy-opt shard={} (known: full, grad_op, none)", value);
      }
    } else if (key == "unit_params") {
      parsed.unitParams = positiveInteger(key, value);
      parsed.unitsByModule = false;
    } else if (key == "units") {
      if (value != "module" && value != "size") {
        fail("fsdp: unknown --strategy-opt units={} (known: size, module)", value);
      }
      parsed.unitsByModule = value == "module";
      if (!parsed.unitsByModule && parsed.unitParams == 0) {
        parsed.unitParams = 1000000;  // units=size without unit_params
      }
    } else if (key == "max_inflight") {
      parsed.maxInflight = static_cast<int>(positiveInteger(key, value));
    } else if (key == "accumulate") {
      if (value != "local" && value != "sharded") {
        fail("fsdp: unknown --strategy-opt accumulate={} (known: local, sharded)", value);
      }
      parsed.accumulate = value == "local" ? AccumulateIn::Local : AccumulateIn::Sharded;
    } else if (key == "timeout_s") {
      parsed.timeout = std::chrono::milliseconds(positiveInteger(key, value) * 1000);
    } else if (key == "offload") {
      fail("fsdp: offload={} is not implemented yet (shards and optimizer state stay on the training device)", value);
    } else {
      fail("fsdp: unknown --strategy-opt '{}' (known: shard, units, unit_params, max_inflight, accumulate, timeout_s)",
           key);
    }
  }
  return parsed;
}

}  // namespace strata::plugins::fsdp
