#include "strata/comm/staging_process_group.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "strata/comm/collective_arrivals.h"
#include "strata/device_backend.h"
#include "strata/error.h"

namespace strata {

namespace {

// The inner group's watchdog fails a collective after its own timeout (ProcessGroupOptions::timeout), so the worker
// waits without a limit of its own: it must not drop host buffers that the inner collective may still write.
constexpr std::chrono::hours kInnerWait{24};

bool onHost(const Tensor& t) {
  return t.device().type == DeviceType::CPU;
}

DeviceBackend& backendOf(const Tensor& t) {
  return *deviceBackend(t.device().type);  // CheckedProcessGroup made sure there is one
}

using StreamMark = std::shared_ptr<DeviceBackend::StreamMark>;

// Taken on the caller's thread when a collective is requested: the work queued so far on `t`'s device produced (or
// last reads) its values. Note [host staging] in the header.
StreamMark markReady(const Tensor& t) {
  return onHost(t) ? nullptr : backendOf(t).markComputeStream(t.device());
}

// `t`'s mark, reusing `other`'s when both tensors live on one device (one mark orders both copies).
StreamMark markReady(const Tensor& t, const Tensor& other, const StreamMark& otherMark) {
  return !onHost(t) && t.device() == other.device() ? otherMark : markReady(t);
}

// `t` itself in host memory, or a host copy of it (copyIn) / an uninitialised host buffer of its shape.
Tensor stage(const Tensor& t, bool copyIn, const StreamMark& ready) {
  if (onHost(t)) {
    return t;
  }
  Tensor host = Tensor::empty(t.meta(), MemoryCategory::Communication);
  if (copyIn && t.bytes() > 0) {
    backendOf(t).stagingCopy(ready.get(), host.rawData(), Device::cpu(), t.rawData(), t.device(), t.bytes());
  }
  return host;
}

// Copies a staged result back into its device tensor (nothing to do for host tensors).
void unstage(const Tensor& t, const Tensor& host, const StreamMark& ready) {
  if (!onHost(t) && t.bytes() > 0) {
    backendOf(t).stagingCopy(ready.get(), t.rawData(), t.device(), host.rawData(), Device::cpu(), t.bytes());
  }
}

CollectiveRules rulesFor(const ProcessGroup& inner) {
  const auto* checked = dynamic_cast<const CheckedProcessGroup*>(&inner);
  if (checked == nullptr) {
    return {"staged", {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}};
  }
  return {"staged " + checked->rules().backend, checked->rules().dtypes};
}

}  // namespace

// One collective: its work, the inner collective once issued (for a timed-out wait to describe), and the copies.
struct StagingProcessGroup::Job {
  std::shared_ptr<AsyncWork> work;
  std::function<WorkHandle(ProcessGroup&)> issue;
  std::function<void()> unstage;
  std::mutex mutex;
  WorkHandle inner;  // guarded by mutex
};

StagingProcessGroup::StagingProcessGroup(std::unique_ptr<ProcessGroup> inner)
    : CheckedProcessGroup(rulesFor(*inner)),
      inner_(std::move(inner)),
      rank_(inner_->rank()),
      size_(inner_->size()),
      queue_([](const AsyncWork& work, const std::string& message) {
        // The inner group's error already names the collective, the step and the missing ranks: passed on as it is.
        spdlog::error("{} (staged through host memory) failed: {}", work.description(), message);
      }) {}

StagingProcessGroup::~StagingProcessGroup() {
  queue_.stop();  // the running collective uses the inner group
}

void StagingProcessGroup::setStep(std::int64_t step) {
  queue_.setStep(step);
  labelStep(*inner_, step);
}

std::string StagingProcessGroup::deviceProblem(Device device) const {
  if (device.type == DeviceType::CPU || deviceBackend(device.type) != nullptr) {
    return "";
  }
  return "its backend is not initialised, so it cannot be staged through host memory";
}

WorkHandle StagingProcessGroup::enqueue(const std::string& name, std::size_t bytes,
                                        std::function<WorkHandle(ProcessGroup&)> issue, std::function<void()> unstage) {
  auto job = std::make_shared<Job>();
  job->issue = std::move(issue);
  job->unstage = std::move(unstage);
  // Every collective passes through here, so these numbers match the inner group's when it is used by this one only.
  return queue_.push(name, [&](std::int64_t seq, std::int64_t step) {
    // A timed-out wait names what the inner collective is waiting for: its own wait, for no time, says it.
    std::weak_ptr<Job> weak = job;
    job->work = std::make_shared<AsyncWork>(describeCollective(name, seq, bytes, step), [weak]() -> std::string {
      const std::shared_ptr<Job> pending = weak.lock();
      WorkHandle inner;
      if (pending != nullptr) {
        std::lock_guard<std::mutex> jobLock(pending->mutex);
        inner = pending->inner;
      }
      if (inner == nullptr) {
        return "it is queued behind earlier collectives or staging its inputs";
      }
      try {
        inner->wait(std::chrono::milliseconds(0));
        return "the inner collective has just completed; its result is being copied back";
      } catch (const std::exception& e) {
        return fmt::format("the inner collective: {}", e.what());
      }
    });
    return CollectiveQueue::Entry{job->work, nullptr, [this, job] { execute(*job); }};
  });
}

// On the queue's thread: stage, run the inner collective, wait for it, copy back. A failure's message (the inner
// group's error, unchanged) fails the work and the group.
void StagingProcessGroup::execute(Job& job) {
  WorkHandle inner = job.issue(*inner_);
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    job.inner = inner;
  }
  inner->wait(kInnerWait);
  job.unstage();
}

WorkHandle StagingProcessGroup::doAllReduce(Tensor tensor, ReduceOp op) {
  const StreamMark ready = markReady(tensor);
  auto host = std::make_shared<Tensor>();
  return enqueue(
      "allReduce", tensor.bytes(),
      [tensor, op, ready, host](ProcessGroup& inner) {
        *host = stage(tensor, true, ready);
        return inner.allReduce(*host, op);
      },
      [tensor, ready, host] { unstage(tensor, *host, ready); });
}

WorkHandle StagingProcessGroup::doReduceScatter(Tensor input, Tensor output, ReduceOp op) {
  const StreamMark inputReady = markReady(input);
  const StreamMark outputReady = markReady(output, input, inputReady);
  auto hostOutput = std::make_shared<Tensor>();
  return enqueue(
      "reduceScatter", input.bytes(),
      [input, output, op, inputReady, hostOutput](ProcessGroup& inner) {
        // The output needs no copy in: every element is written. The host input is kept alive by the inner work.
        *hostOutput = stage(output, false, nullptr);
        return inner.reduceScatter(stage(input, true, inputReady), *hostOutput, op);
      },
      [output, outputReady, hostOutput] { unstage(output, *hostOutput, outputReady); });
}

WorkHandle StagingProcessGroup::doAllGather(Tensor input, Tensor output) {
  const StreamMark inputReady = markReady(input);
  const StreamMark outputReady = markReady(output, input, inputReady);
  auto hostOutput = std::make_shared<Tensor>();
  return enqueue(
      "allGather", output.bytes(),
      [input, output, inputReady, hostOutput](ProcessGroup& inner) {
        // Staged separately even when the input is the output's part rank (in place): the inner group copies it in.
        *hostOutput = stage(output, false, nullptr);
        return inner.allGather(stage(input, true, inputReady), *hostOutput);
      },
      [output, outputReady, hostOutput] { unstage(output, *hostOutput, outputReady); });
}

WorkHandle StagingProcessGroup::doBroadcast(Tensor tensor, int root) {
  const StreamMark ready = markReady(tensor);
  const bool isRoot = root == rank_;
  auto host = std::make_shared<Tensor>();
  return enqueue(
      fmt::format("broadcast(root {})", root), tensor.bytes(),
      [tensor, root, isRoot, ready, host](ProcessGroup& inner) {
        // Only the root's values are read, and only the other ranks' are written.
        *host = stage(tensor, isRoot, ready);
        return inner.broadcast(*host, root);
      },
      [tensor, isRoot, ready, host] {
        if (!isRoot) {
          unstage(tensor, *host, ready);
        }
      });
}

WorkHandle StagingProcessGroup::doBarrier() {
  return enqueue(
      "barrier", 0, [](ProcessGroup& inner) { return inner.barrier(); }, [] {});
}

}  // namespace strata
