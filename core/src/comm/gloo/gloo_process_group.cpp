#include "strata/comm/gloo_process_group.h"

#include <cstring>
#include <exception>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <spdlog/spdlog.h>

#include "element_sum.h"
#include "gloo_store_adapter.h"
#include "ring_reduce_scatter.h"
#include "strata/comm/collective_arrivals.h"
#include "strata/error.h"
#include "strata/thread_names.h"

namespace strata {

namespace {

double seconds(std::chrono::nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}

template <typename T>
void sumElements(void* out, const void* a, const void* b, std::size_t n) {
  detail::addElements(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
}

template <typename T>
gloo::AllreduceOptions::Func sumFunction() {
  if constexpr (detail::kSixteenBit<T>) {
    return &sumElements<T>;  // Note [16-bit reductions] in element_sum.h
  } else {
    return static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>);
  }
}

// Runs f.template operator()<T>() with T the C++ type of dtype: float, double, or the 16-bit storage types.
template <typename F>
void dispatchFloat(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32:
      f.template operator()<float>();
      break;
    case DType::Float16:
      f.template operator()<Half>();
      break;
    case DType::BFloat16:
      f.template operator()<BFloat16Bits>();
      break;
    default:
      f.template operator()<double>();
  }
}

}  // namespace

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                                   GlooOptions glooOptions)
    : CheckedProcessGroup({"gloo", {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}}),
      store_(std::move(store)),
      rank_(rank),
      size_(size),
      options_(options),
      prefix_(keyPrefix(glooOptions.groupName)),
      queue_([](const AsyncWork& /*work*/, const std::string& message) { spdlog::error("{}", message); }) {
  STRATA_CHECK(store_ != nullptr, "GlooProcessGroup needs a store");
  STRATA_CHECK(size_ > 0 && rank_ >= 0 && rank_ < size_, "GlooProcessGroup: rank {} is not in a group of {}", rank_,
               size_);
  try {
    gloo::transport::tcp::attr attr;
    if (!glooOptions.iface.empty()) {
      attr.iface = glooOptions.iface;
    } else {
      attr.hostname = glooOptions.hostname;
    }
    // Gloo's event loop thread takes the name of the thread that creates the device (Note [Thread names]).
    std::shared_ptr<gloo::transport::Device> device;
    std::exception_ptr deviceError;
    std::thread([&] {
      nameThisThread(kCommunicationThread);
      try {
        device = gloo::transport::tcp::CreateDevice(attr);
      } catch (...) {
        deviceError = std::current_exception();
      }
    }).join();
    if (deviceError) {
      std::rethrow_exception(deviceError);
    }
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context->setTimeout(options_.timeout);
    detail::GlooStoreAdapter adapter(store_, prefix_, options_.timeout);
    context->connectFullMesh(adapter, device);
    context_ = std::move(context);
  } catch (const std::exception& e) {
    fail("gloo process group '{}' (rank {} of {}) could not connect within {:g} s: {}", glooOptions.groupName, rank_,
         size_, seconds(options_.timeout), e.what());
  }
  heartbeatPeriod_ = heartbeatPeriodFor(options_.timeout);
  heartbeat_ = std::make_unique<Heartbeat>(store_, prefix_, rank_, heartbeatPeriod_);
}

GlooProcessGroup::~GlooProcessGroup() {
  queue_.stop();  // the running collective uses the context and the store
}

WorkHandle GlooProcessGroup::enqueue(const std::string& name, std::size_t bytes,
                                     std::function<void(std::uint32_t tag)> run) {
  return queue_.push(name, [&](std::int64_t seq, std::int64_t step) {
    const std::string description = describeCollective(name, seq, bytes, step);
    auto work = std::make_shared<AsyncWork>(description, [this, seq] { return describeMissing(seq); });
    auto prologue = [this, seq, description] {
      try {
        store_->setString(collectiveArrivalKey(prefix_, rank_), std::to_string(seq));
      } catch (const std::exception& e) {
        spdlog::warn("{}: could not record the arrival in the store: {}", description, e.what());
      }
    };
    auto timed = [this, seq, description, run = std::move(run)] {
      const auto start = std::chrono::steady_clock::now();
      try {
        run(static_cast<std::uint32_t>(seq));
      } catch (const std::exception& e) {
        throw Error(fmt::format("{} failed after {:.3g} s: {}; gloo: {}", description,
                                seconds(std::chrono::steady_clock::now() - start), describeMissing(seq), e.what()));
      }
    };
    return CollectiveQueue::Entry{std::move(work), std::move(prologue), std::move(timed)};
  });
}

std::string GlooProcessGroup::describeMissing(std::int64_t seq) const {
  return describeMissingRanks(*store_, prefix_, size_, seq, options_.timeout, heartbeatPeriod_);
}

std::string GlooProcessGroup::deviceProblem(Device device) const {
  if (device.type == DeviceType::CPU) {
    return "";
  }
  return "Gloo reads and writes host memory only; wrap the group in a StagingProcessGroup to stage device tensors";
}

WorkHandle GlooProcessGroup::doAllReduce(Tensor tensor, ReduceOp op) {
  return enqueue("allReduce", tensor.bytes(), [this, tensor, op](std::uint32_t tag) {
    if (tensor.numel() == 0) {
      return;
    }
    dispatchFloat(tensor.dtype(), [&]<typename T>() {
      T* data = tensor.data<T>();
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, static_cast<std::size_t>(tensor.numel()));  // no input: in place
      opts.setReduceFunction(sumFunction<T>());
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::allreduce(opts);
      if (op == ReduceOp::Average) {
        detail::scaleElements(data, tensor.numel(), 1.0 / size_);
      }
    });
  });
}

WorkHandle GlooProcessGroup::doReduceScatter(Tensor input, Tensor output, ReduceOp op) {
  return enqueue("reduceScatter", input.bytes(), [this, input, output, op](std::uint32_t tag) {
    if (output.numel() == 0) {
      return;
    }
    dispatchFloat(input.dtype(), [&]<typename T>() {
      // Note [ring reduce-scatter] in ring_reduce_scatter.h.
      detail::ringReduceScatter<T>(context_, input.data<T>(), output.data<T>(),
                                   static_cast<std::size_t>(output.numel()), tag, options_.timeout);
      if (op == ReduceOp::Average) {
        detail::scaleElements(output.data<T>(), output.numel(), 1.0 / size_);
      }
    });
  });
}

WorkHandle GlooProcessGroup::doAllGather(Tensor input, Tensor output) {
  return enqueue("allGather", output.bytes(), [this, input, output](std::uint32_t tag) {
    if (input.numel() == 0) {
      return;
    }
    dispatchFloat(input.dtype(), [&]<typename T>() {
      const auto n = static_cast<std::size_t>(input.numel());
      T* out = output.data<T>();
      T* localPart = out + n * static_cast<std::size_t>(rank_);
      // Note [in-place allGather]: sharded strategies gather into the buffer that holds their shard; copy the input
      // into its part first (unless it already is that part) so both layouts take the same path, Gloo's ring
      // all-gather over the output alone.
      if (input.data<T>() != localPart) {
        std::memcpy(localPart, input.data<T>(), n * sizeof(T));  // no overlap: CheckedProcessGroup checked it
      }
      gloo::AllgatherOptions opts(context_);
      opts.setOutput(out, n * static_cast<std::size_t>(size_));
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::allgather(opts);
    });
  });
}

WorkHandle GlooProcessGroup::doBroadcast(Tensor tensor, int root) {
  return enqueue(fmt::format("broadcast(root {})", root), tensor.bytes(), [this, tensor, root](std::uint32_t tag) {
    if (tensor.numel() == 0) {
      return;
    }
    dispatchFloat(tensor.dtype(), [&]<typename T>() {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(tensor.data<T>(), static_cast<std::size_t>(tensor.numel()));
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::broadcast(opts);
    });
  });
}

WorkHandle GlooProcessGroup::doBarrier() {
  return enqueue("barrier", 0, [this](std::uint32_t tag) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::barrier(opts);
  });
}

}  // namespace strata
