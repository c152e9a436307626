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

// compress=SPEC: FSDP reduce-scatters dense shards, so only the 16-bit compressors fit it; they are reduce_dtype's
// 16-bit reduce-scatter. The others are refused, each saying why (docs/compression.md).
void applyCompression(const std::string& compress, const std::map<std::string, std::string>& options,
                      FsdpOptions& parsed) {
  if (compress.empty() || compress == "none") {
    return;
  }
  const std::string name = compress.substr(0, compress.find(':'));
  if ((name == "fp16" || name == "bf16") && compress == name) {
    const DType wire = name == "fp16" ? DType::Float16 : DType::BFloat16;
    if (options.count("reduce_dtype") != 0 && parsed.reduceType != wire) {
      fail(
          "fsdp: --strategy-opt compress={} and reduce_dtype={} disagree (compress=fp16/bf16 is reduce_dtype's "
          "16-bit reduce-scatter)",
          compress, options.at("reduce_dtype"));
    }
    parsed.reduceType = wire;
    return;
  }
  const char* why = name == "topk" || name == "sign"
                        ? "it exchanges sparse or bit-packed values by all-gather, and a reduce-scatter adds dense "
                          "shards"
                    : name == "powersgd" ? "it factors whole matrices, which no rank holds after a reduce-scatter"
                    : name == "randomk"  ? "random-k over shards is not built yet"
                    : name == "fp16" || name == "bf16" ? "fp16 and bf16 take no options"
                                                       : nullptr;
  if (why == nullptr) {
    fail(
        "fsdp: --strategy-opt compress={}: unknown compressor '{}' (built in: fp16, bf16, topk, randomk, sign, "
        "powersgd)",
        compress, name);
  }
  fail(
      "fsdp: --strategy-opt compress={} cannot be used with fsdp: {}; fsdp takes compress=fp16 or bf16 (ddp takes "
      "every compressor)",
      compress, why);
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
  std::string compress;
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
    } else if (key == "compress") {
      compress = value;
    } else if (key == "offload") {
      if (value != "none" && value != "optimizer" && value != "params") {
        fail("fsdp: unknown --strategy-opt offload={} (known: none, optimizer, params)", value);
      }
      parsed.offload = value == "none" ? Offload::None : value == "optimizer" ? Offload::Optimizer : Offload::Params;
    } else {
      fail(
          "fsdp: unknown --strategy-opt '{}' (known: shard, units, unit_params, small_module_params, max_inflight, "
          "accumulate, reduce_dtype, offload, timeout_s, compress)",
          key);
    }
  }
  applyCompression(compress, options, parsed);
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
