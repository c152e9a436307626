#include "strata/comm/gloo_process_group.h"

#include <cstring>

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

#include "gloo_store_adapter.h"
#include "strata/comm/collective_arrivals.h"
#include "strata/device_backend.h"
#include "strata/error.h"

namespace strata {

namespace {

double seconds(std::chrono::nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}

void checkTensor(const Tensor& t, const char* op, const char* what) {
  STRATA_CHECK(t.defined(), "{}: {} is undefined", op, what);
  STRATA_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::Float64,
               "{}: {} has dtype {}; Gloo collectives take float32 or float64", op, what, dtypeName(t.dtype()));
  STRATA_CHECK(t.device().type == DeviceType::CPU || deviceBackend(t.device().type) != nullptr,
               "{}: {} lives on {}, whose backend is not initialised, so Gloo cannot stage it through host memory", op,
               what, t.device().toString());
}

// Note [host staging]: Gloo reads and writes host memory only. A device tensor (DDP's gradient buckets when ranks
// share a GPU) is copied into a host buffer on the worker thread, the collective runs on that buffer, and the result
// is copied back. The request marks the device's compute stream on the caller's thread (the hook that found a
// bucket ready); the worker's copy to the host waits for the kernels queued before that mark only, so it overlaps
// the rest of the backward pass instead of queueing behind it. Both copies run on the backend's staging stream
// and are complete on return, so kernels queued after the work's wait() returns see the result. Host tensors take
// no copies.
bool onHost(const Tensor& t) {
  return t.device().type == DeviceType::CPU;
}

using StreamMark = std::shared_ptr<DeviceBackend::StreamMark>;

// Taken when a collective is requested: the work queued so far on `t`'s device produced its values.
StreamMark markReady(const Tensor& t) {
  return onHost(t) ? nullptr : deviceBackend(t.device().type)->markComputeStream(t.device());
}

// `t` itself in host memory, or a host copy of it (copyIn) / an uninitialised host buffer of its shape.
Tensor hostView(const Tensor& t, bool copyIn, const StreamMark& ready) {
  if (onHost(t)) {
    return t;
  }
  Tensor host = Tensor::empty(t.meta(), MemoryCategory::Communication);
  if (copyIn && t.bytes() > 0) {
    deviceBackend(t.device().type)
        ->stagingCopy(ready.get(), host.rawData(), Device::cpu(), t.rawData(), t.device(), t.bytes());
  }
  return host;
}

// Copies a staged result back into its device tensor (nothing to do for host tensors). The copy waits for `ready`
// too: a tensor that was not copied in (broadcast's receivers, gathered and scattered outputs) may still be written
// or read by kernels queued before the request, and the result must land after them.
void unstage(const Tensor& t, const Tensor& host, const StreamMark& ready) {
  if (!onHost(t) && t.bytes() > 0) {
    deviceBackend(t.device().type)
        ->stagingCopy(ready.get(), t.rawData(), t.device(), host.rawData(), Device::cpu(), t.bytes());
  }
}

template <typename T>
gloo::AllreduceOptions::Func sumFunction() {
  return static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>);
}

template <typename T>
void scale(T* data, std::int64_t n, T factor) {
  for (std::int64_t i = 0; i < n; ++i) {
    data[i] *= factor;
  }
}

// Runs f.template operator()<T>() with T the C++ type of dtype (float or double).
template <typename F>
void dispatchFloat(DType dtype, F&& f) {
  if (dtype == DType::Float32) {
    f.template operator()<float>();
  } else {
    f.template operator()<double>();
  }
}

}  // namespace

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                                   GlooOptions glooOptions)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      options_(options),
      prefix_(fmt::format("gloo/{}/", glooOptions.groupName)) {
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
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context->setTimeout(options_.timeout);
    detail::GlooStoreAdapter adapter(store_, prefix_, options_.timeout);
    context->connectFullMesh(adapter, device);
    context_ = std::move(context);
  } catch (const std::exception& e) {
    fail("gloo process group '{}' (rank {} of {}) could not connect within {:g} s: {}", glooOptions.groupName, rank_,
         size_, seconds(options_.timeout), e.what());
  }
  worker_ = std::thread([this] { workerLoop(); });
}

GlooProcessGroup::~GlooProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  worker_.join();
}

WorkHandle GlooProcessGroup::enqueue(const std::string& name, std::size_t bytes,
                                     std::function<void(std::uint32_t tag)> run) {
  std::lock_guard<std::mutex> lock(mutex_);
  STRATA_CHECK(!stopping_, "{}: the process group is shutting down", name);
  const std::int64_t seq = nextSeq_++;
  const std::int64_t step = step_.load();
  const std::string description = describeCollective(name, seq, bytes, step);
  auto work = std::make_shared<AsyncWork>(description, [this, seq] { return describeMissing(seq); });
  queue_.push_back(Job{work, seq, step, std::move(run)});
  queued_.notify_one();
  return work;
}

void GlooProcessGroup::workerLoop() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {
        return;  // stopping and drained
      }
      job = std::move(queue_.front());
      queue_.pop_front();
      if (stopping_) {
        job.work->markFailed(
            fmt::format("{} was not run: the process group was destroyed first", job.work->description()));
        continue;
      }
    }
    execute(job);
  }
}

void GlooProcessGroup::execute(Job& job) {
  if (brokenBy_) {
    job.work->markFailed(fmt::format("{} was not run: the process group is unusable after an earlier failure: {}",
                                     job.work->description(), *brokenBy_));
    return;
  }
  try {
    store_->setString(collectiveArrivalKey(prefix_, rank_), std::to_string(job.seq));
  } catch (const std::exception& e) {
    spdlog::warn("{}: could not record the arrival in the store: {}", job.work->description(), e.what());
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    job.run(static_cast<std::uint32_t>(job.seq));
    job.work->markCompleted(seconds(std::chrono::steady_clock::now() - start));
  } catch (const std::exception& e) {
    const std::string message =
        fmt::format("{} failed after {:.3g} s: {}; gloo: {}", job.work->description(),
                    seconds(std::chrono::steady_clock::now() - start), describeMissing(job.seq), e.what());
    brokenBy_ = message;
    spdlog::error("{}", message);
    job.work->markFailed(message);
  }
}

std::string GlooProcessGroup::describeMissing(std::int64_t seq) const {
  return describeMissingRanks(*store_, prefix_, size_, seq, options_.timeout);
}

WorkHandle GlooProcessGroup::allReduce(Tensor tensor, ReduceOp op) {
  checkTensor(tensor, "allReduce", "tensor");
  return enqueue("allReduce", tensor.bytes(), [this, tensor, op, ready = markReady(tensor)](std::uint32_t tag) {
    if (tensor.numel() == 0) {
      return;
    }
    const Tensor host = hostView(tensor, true, ready);  // Note [host staging]
    dispatchFloat(tensor.dtype(), [&]<typename T>() {
      T* data = host.data<T>();
      const auto n = static_cast<std::size_t>(tensor.numel());
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, n);  // no input: in place
      opts.setReduceFunction(sumFunction<T>());
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::allreduce(opts);
      if (op == ReduceOp::Average) {
        scale(data, tensor.numel(), static_cast<T>(1) / static_cast<T>(size_));
      }
    });
    unstage(tensor, host, ready);
  });
}

WorkHandle GlooProcessGroup::reduceScatter(Tensor input, Tensor output, ReduceOp op) {
  checkTensor(input, "reduceScatter", "input");
  checkTensor(output, "reduceScatter", "output");
  STRATA_CHECK(input.dtype() == output.dtype(), "reduceScatter: input is {} but output is {}", dtypeName(input.dtype()),
               dtypeName(output.dtype()));
  STRATA_CHECK(input.numel() == output.numel() * size_,
               "reduceScatter: input has {} elements, expected {} parts of {} (the output)", input.numel(), size_,
               output.numel());
  StreamMark ready = markReady(input);
  return enqueue("reduceScatter", input.bytes(), [this, input, output, op, ready](std::uint32_t tag) {
    if (input.numel() == 0) {
      return;
    }
    // See Note [reduceScatter] in the header.
    Tensor scratch = Tensor::empty(input.dtype(), {input.numel()}, MemoryCategory::Communication);
    const Tensor hostInput = hostView(input, true, ready);       // Note [host staging]
    const Tensor hostOutput = hostView(output, false, nullptr);  // every element is written below
    dispatchFloat(input.dtype(), [&]<typename T>() {
      gloo::AllreduceOptions opts(context_);
      opts.setInput(hostInput.data<T>(), static_cast<std::size_t>(input.numel()));
      opts.setOutput(scratch.data<T>(), static_cast<std::size_t>(input.numel()));
      opts.setReduceFunction(sumFunction<T>());
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::allreduce(opts);
      const std::int64_t part = output.numel();
      std::memcpy(hostOutput.rawData(), scratch.data<T>() + part * rank_, output.bytes());
      if (op == ReduceOp::Average) {
        scale(hostOutput.data<T>(), part, static_cast<T>(1) / static_cast<T>(size_));
      }
    });
    unstage(output, hostOutput, ready);
  });
}

WorkHandle GlooProcessGroup::allGather(Tensor input, Tensor output) {
  checkTensor(input, "allGather", "input");
  checkTensor(output, "allGather", "output");
  STRATA_CHECK(input.dtype() == output.dtype(), "allGather: input is {} but output is {}", dtypeName(input.dtype()),
               dtypeName(output.dtype()));
  STRATA_CHECK(output.numel() == input.numel() * size_,
               "allGather: output has {} elements, expected {} parts of {} (the input)", output.numel(), size_,
               input.numel());
  return enqueue("allGather", output.bytes(), [this, input, output, ready = markReady(input)](std::uint32_t tag) {
    if (input.numel() == 0) {
      return;
    }
    // Note [host staging]: the staged output needs no copy in, its every part is written below.
    const Tensor hostInput = hostView(input, true, ready);
    const Tensor hostOutput = hostView(output, false, nullptr);
    dispatchFloat(input.dtype(), [&]<typename T>() {
      const auto n = static_cast<std::size_t>(input.numel());
      T* out = hostOutput.data<T>();
      T* localPart = out + n * static_cast<std::size_t>(rank_);
      // Note [in-place allGather]: sharded strategies gather into the buffer that holds their shard; copy the input
      // into its part first (unless it already is that part) so both layouts take the same path.
      if (hostInput.data<T>() != localPart) {
        std::memmove(localPart, hostInput.data<T>(), n * sizeof(T));
      }
      gloo::AllgatherOptions opts(context_);
      opts.setOutput(out, n * static_cast<std::size_t>(size_));
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::allgather(opts);
    });
    unstage(output, hostOutput, ready);
  });
}

WorkHandle GlooProcessGroup::broadcast(Tensor tensor, int root) {
  checkTensor(tensor, "broadcast", "tensor");
  STRATA_CHECK(root >= 0 && root < size_, "broadcast: root {} is not in a group of {}", root, size_);
  StreamMark ready = markReady(tensor);
  const std::string name = fmt::format("broadcast(root {})", root);
  return enqueue(name, tensor.bytes(), [this, tensor, root, ready](std::uint32_t tag) {
    if (tensor.numel() == 0) {
      return;
    }
    // Note [host staging]: only the root's values are read, and only the other ranks' are written.
    const bool isRoot = root == rank_;
    const Tensor host = hostView(tensor, isRoot, ready);
    dispatchFloat(tensor.dtype(), [&]<typename T>() {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(host.data<T>(), static_cast<std::size_t>(tensor.numel()));
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::broadcast(opts);
    });
    if (!isRoot) {
      unstage(tensor, host, ready);
    }
  });
}

WorkHandle GlooProcessGroup::barrier() {
  return enqueue("barrier", 0, [this](std::uint32_t tag) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::barrier(opts);
  });
}

}  // namespace strata
