#include "fsdp_options.h"

#include "strata/error.h"

namespace strata::plugins::fsdp {
namespace {

std::int64_t integerAtLeast(const std::string& key, const std::string& value, std::int64_t minimum) {
  std::size_t used = 0;
  long long parsed = 0;
  try {
    parsed = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || parsed < minimum) {
    fail("fsdp: --strategy-opt {}={} must be a {} integer", key, value, minimum > 0 ? "positive" : "non-negative");
  }
  return parsed;
}

std::int64_t positiveInteger(const std::string& key, const std::string& value) {
  return integerAtLeast(key, value, 1);
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

const char* offloadName(Offload offload) {
  switch (offload) {
    case Offload::None:
      return "none";
    case Offload::Optimizer:
      return "optimizer";
    case Offload::Params:
      return "params";
  }
  return "?";
}

FsdpOptions parseFsdpOptions(const std::map<std::string, std::string>& options) {
  FsdpOptions parsed;
  for (const auto& [key, value] : options) {
    if (key == "shard") {
      parsed.hybrid = false;
      if (value == "full") {
        parsed.level = ShardLevel::Full;
      } else if (value == "grad_op") {
        parsed.level = ShardLevel::GradOp;
      } else if (value == "none") {
        parsed.level = ShardLevel::None;
      } else if (value == "hybrid") {
        parsed.level = ShardLevel::Full;
        parsed.hybrid = true;
      } else {
        fail("fsdp: unknown --strategy-opt shard={} (known: full, grad_op, none, hybrid)", value);
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
    } else if (key == "small_module_params") {
      parsed.smallModuleParams = integerAtLeast(key, value, 0);
    } else if (key == "max_inflight") {
      parsed.maxInflight = static_cast<int>(positiveInteger(key, value));
    } else if (key == "accumulate") {
      if (value != "local" && value != "sharded") {
        fail("fsdp: unknown --strategy-opt accumulate={} (known: local, sharded)", value);
      }
      parsed.accumulate = value == "local" ? AccumulateIn::Local : AccumulateIn::Sharded;
    } else if (key == "timeout_s") {
      parsed.timeout = std::chrono::milliseconds(positiveInteger(key, value) * 1000);
    } else if (key == "reduce_dtype") {
      if (value == "bf16") {
        parsed.reduceType = DType::BFloat16;
      } else if (value == "fp16") {
        parsed.reduceType = DType::Float16;
      } else if (value == "fp32") {
        parsed.reduceType.reset();
      } else {
        fail("fsdp: unknown --strategy-opt reduce_dtype={} (known: fp32, bf16, fp16)", value);
      }
    } else if (key == "offload") {
      if (value != "none" && value != "optimizer" && value != "params") {
        fail("fsdp: unknown --strategy-opt offload={} (known: none, optimizer, params)", value);
      }
      parsed.offload = value == "none" ? Offload::None : value == "optimizer" ? Offload::Optimizer : Offload::Params;
    } else {
      fail(
          "fsdp: unknown --strategy-opt '{}' (known: shard, units, unit_params, small_module_params, max_inflight, "
          "accumulate, reduce_dtype, offload, timeout_s)",
          key);
    }
  }
  // Combinations, refused here so that the launcher stops before any rank starts.
  if (parsed.accumulate == AccumulateIn::Sharded && parsed.level == ShardLevel::None) {
    fail("fsdp: accumulate=sharded needs shard=full or shard=grad_op (shard=none keeps full gradients)");
  }
  if (parsed.offload != Offload::None && parsed.level == ShardLevel::None) {
    fail(
        "fsdp: offload={} needs shard=full or shard=grad_op: shard=none keeps every rank's parameters and optimizer "
        "state whole, so there is no shard to offload",
        offloadName(parsed.offload));
  }
  return parsed;
}

}  // namespace strata::plugins::fsdp
