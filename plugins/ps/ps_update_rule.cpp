#include "ps_update_rule.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata::ps {
namespace {

// dst[i] += src[i] (or dst = src when `assign`), reading src through memcpy when it is not aligned for T
// (ZeroMQ keeps frames of up to 33 bytes inside the message object).
template <typename T>
void addInto(T* dst, const void* src, std::int64_t n, bool assign) {
  if (assign) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(T));
    return;
  }
  std::vector<T> aligned;
  const T* from = static_cast<const T*>(src);
  if (reinterpret_cast<std::uintptr_t>(src) % alignof(T) != 0) {
    aligned.resize(static_cast<std::size_t>(n));
    std::memcpy(aligned.data(), src, static_cast<std::size_t>(n) * sizeof(T));
    from = aligned.data();
  }
  for (std::int64_t i = 0; i < n; ++i) {
    dst[i] += from[i];
  }
}

void addInto(Tensor& dst, const void* src, bool assign) {
  if (dst.dtype() == DType::Float64) {
    addInto(dst.data<double>(), src, dst.numel(), assign);
  } else {
    addInto(dst.data<float>(), src, dst.numel(), assign);
  }
}

// The frame's size was checked against the tensor's by validateRequest; this guards the rule's own callers.
void addFrame(Tensor& dst, Frame frame, bool assign) {
  STRATA_CHECK(frame.size() == dst.bytes(), "a frame of {} bytes for a tensor of {} bytes", frame.size(), dst.bytes());
  addInto(dst, frame.data(), assign);
}

void scale(Tensor& t, double factor) {
  if (t.dtype() == DType::Float64) {
    double* p = t.data<double>();
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      p[i] *= factor;
    }
  } else {
    float* p = t.data<float>();
    const auto f = static_cast<float>(factor);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      p[i] *= f;
    }
  }
}

// DC-ASGD (Zheng et al., 2017): g += lambda * g * g * (w_now - w_then), compensating the delay of a stale gradient.
template <typename T>
void compensate(T* g, const T* now, const char* then, std::int64_t n, double lambda) {
  const T l = static_cast<T>(lambda);
  for (std::int64_t i = 0; i < n; ++i) {
    T old;
    std::memcpy(&old, then + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
    g[i] += l * g[i] * g[i] * (now[i] - old);
  }
}

std::size_t frameCount(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  return a.size() + b.size();
}

}  // namespace

UpdateRule::UpdateRule(const PsOptions& options, int serverIndex, int workers, bool holdsBuffers, bool keepPrevious,
                       Trace trace)
    : options_(options),
      serverIndex_(serverIndex),
      holdsBuffers_(holdsBuffers),
      keepPrevious_(keepPrevious),
      trace_(std::move(trace)),
      workers_(static_cast<std::size_t>(workers)),
      perWorker_(static_cast<std::size_t>(workers)),
      heldStaleness_(static_cast<std::size_t>(workers), 0) {}

UpdateRule::~UpdateRule() = default;

void UpdateRule::allocate(const FlatLayout& layout, const std::vector<Segment>& segments,
                          const OptimizerMaker& makeOptimizer) {
  STRATA_CHECK(!allocated(), "the update rule is allocated twice");
  std::vector<ParameterSlice> slices;
  for (const Segment& segment : segments) {
    const DType dtype = layout.groups[segment.group].dtype;
    Tensor values = Tensor::empty(dtype, {segment.count}, MemoryCategory::Parameters);
    Tensor gradients = Tensor::zeros(dtype, {segment.count}, MemoryCategory::Gradients);
    slices.push_back(ParameterSlice{values, gradients});
    values_.push_back(values);
    gradients_.push_back(gradients);
  }
  if (holdsBuffers_) {
    for (const FlatLayout::Buffer& b : layout.buffers) {
      buffers_.push_back(Tensor::empty(b.dtype, {b.numel}, MemoryCategory::Other));
      bufferSums_.push_back(Tensor::zeros(b.dtype, {b.numel}, MemoryCategory::Other));
    }
  }
  if (keepPrevious_) {
    for (const Tensor& values : values_) {
      previous_.push_back(Tensor::empty(values.dtype(), {values.numel()}, MemoryCategory::Parameters));
    }
    for (const Tensor& buffer : buffers_) {
      previousBuffers_.push_back(Tensor::empty(buffer.dtype(), {buffer.numel()}, MemoryCategory::Other));
    }
  }
  optimizer_ = makeOptimizer(std::move(slices));
}

void UpdateRule::assign(std::span<const Frame> data) {
  STRATA_CHECK(data.size() >= frameCount(values_, buffers_), "{} frames for {} values and {} buffers", data.size(),
               values_.size(), buffers_.size());
  std::size_t frame = 0;
  for (Tensor& values : values_) {
    addFrame(values, data[frame++], true);
  }
  for (Tensor& buffer : buffers_) {
    addFrame(buffer, data[frame++], true);
  }
}

std::vector<Release> UpdateRule::push(int worker, const Header& request, std::span<const Frame> data) {
  STRATA_CHECK(allocated(), "a push before the values were initialised");
  STRATA_CHECK(data.size() >= frameCount(gradients_, buffers_), "a push of {} frames for {} gradients and {} buffers",
               data.size(), gradients_.size(), buffers_.size());
  WorkerClock& state = workers_.at(static_cast<std::size_t>(worker));
  STRATA_CHECK(!state.waiting, "worker {} pushed while its previous push is unanswered", worker);
  state.idle = false;
  if (options_.mode == Mode::Sync) {
    return pushSync(worker, request, data);
  }
  const int staleness = pushAsync(worker, request, data);
  state.waiting = true;
  heldStaleness_[static_cast<std::size_t>(worker)] = staleness;
  return releaseHeld();
}

std::vector<Release> UpdateRule::pushSync(int worker, const Header& request, std::span<const Frame> data) {
  const bool first = arrived_ == 0;
  std::size_t frame = 0;
  for (Tensor& gradients : gradients_) {
    addFrame(gradients, data[frame++], first);
  }
  for (Tensor& sum : bufferSums_) {
    addFrame(sum, data[frame++], first);
  }
  roundLr_ = request.lr;
  WorkerClock& state = workers_.at(static_cast<std::size_t>(worker));
  state.waiting = true;
  ++state.clock;
  if (++arrived_ < workers()) {
    return {};
  }
  // Every worker has pushed: one update from the average.
  for (Tensor& gradients : gradients_) {
    if (workers() > 1) {
      scale(gradients, 1.0 / workers());
    }
  }
  if (keepPrevious_) {
    for (std::size_t k = 0; k < values_.size(); ++k) {
      previous_[k].copyFrom(values_[k]);
    }
    for (std::size_t b = 0; b < buffers_.size(); ++b) {
      previousBuffers_[b].copyFrom(buffers_[b]);
    }
    hasPrevious_ = true;
  }
  optimizer_->step(roundLr_);
  for (std::size_t b = 0; b < buffers_.size(); ++b) {
    buffers_[b].copyFrom(bufferSums_[b]);
    scale(buffers_[b], 1.0 / workers());
  }
  ++version_;
  arrived_ = 0;
  if (trace_) {
    trace_(fmt::format(R"({{"server":{},"event":"update","version":{},"lr":{}}})", serverIndex_, version_, roundLr_));
  }
  std::vector<Release> due;
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    if (workers_[w].waiting) {
      workers_[w].waiting = false;
      due.push_back({static_cast<int>(w), 0});
    }
  }
  return due;
}

int UpdateRule::pushAsync(int worker, const Header& request, std::span<const Frame> data) {
  const std::int64_t staleness = std::max<std::int64_t>(0, version_ - request.modelVersion);
  PerWorker& mine = perWorker_.at(static_cast<std::size_t>(worker));
  std::size_t frame = 0;
  std::int64_t offset = 0;  // of segment k's values in the DC-ASGD backup
  for (std::size_t k = 0; k < gradients_.size(); ++k) {
    Tensor& g = gradients_[k];
    addFrame(g, data[frame++], true);
    if (options_.dcAsgd > 0 && mine.pulledValues.defined()) {
      const char* then = static_cast<const char*>(mine.pulledValues.rawData()) + offset;
      if (g.dtype() == DType::Float64) {
        compensate(g.data<double>(), values_[k].data<double>(), then, g.numel(), options_.dcAsgd);
      } else {
        compensate(g.data<float>(), values_[k].data<float>(), then, g.numel(), options_.dcAsgd);
      }
    }
    offset += static_cast<std::int64_t>(values_[k].bytes());
  }
  // Buffers: the mean of every worker's latest values (a worker's push replaces its previous contribution).
  if (!buffers_.empty()) {
    if (mine.latestBuffers.empty()) {
      for (const Tensor& buffer : buffers_) {
        mine.latestBuffers.push_back(Tensor::empty(buffer.dtype(), {buffer.numel()}));
      }
    }
    for (Tensor& latest : mine.latestBuffers) {
      addFrame(latest, data[frame++], true);
    }
    averageLatestBuffers();
  }
  double lr = request.lr;
  if (options_.lrScale == LrScale::Workers) {
    lr /= static_cast<double>(workers_.size());  // Note [Async learning rate]: every worker the job started with
  }
  if (options_.lrStaleness) {
    lr /= static_cast<double>(std::max<std::int64_t>(1, staleness));
  }
  optimizer_->step(lr);
  ++version_;
  WorkerClock& state = workers_.at(static_cast<std::size_t>(worker));
  ++state.clock;
  ++state.pushes;
  state.stalenessSum += static_cast<double>(staleness);
  state.stalenessMax = std::max(state.stalenessMax, staleness);
  if (trace_) {
    trace_(fmt::format(R"({{"server":{},"event":"push","worker":{},"clock":{},"min_clock":{},"version":{},)"
                       R"("staleness":{},"lr":{}}})",
                       serverIndex_, worker, state.clock, slowestClock(), version_, staleness, lr));
  }
  return static_cast<int>(std::min<std::int64_t>(staleness, std::numeric_limits<int>::max()));
}

void UpdateRule::averageLatestBuffers() {
  int contributors = 0;
  for (const PerWorker& w : perWorker_) {
    if (w.latestBuffers.empty()) {
      continue;
    }
    for (std::size_t b = 0; b < buffers_.size(); ++b) {
      if (contributors == 0) {
        buffers_[b].copyFrom(w.latestBuffers[b]);
      } else {
        addInto(buffers_[b], w.latestBuffers[b].rawData(), false);
      }
    }
    ++contributors;
  }
  for (Tensor& buffer : buffers_) {
    scale(buffer, 1.0 / std::max(contributors, 1));
  }
}

std::int64_t UpdateRule::slowestClock() const {
  std::int64_t slowest = std::numeric_limits<std::int64_t>::max();
  for (const WorkerClock& w : workers_) {
    if (!w.departed && !w.idle) {
      slowest = std::min(slowest, w.clock);
    }
  }
  return slowest;
}

// async: every held answer goes out at once; ssp: a worker's only when it is at most K pushes ahead. sync answers
// only full rounds (pushSync): a half-gathered round is never released.
std::vector<Release> UpdateRule::releaseHeld() {
  std::vector<Release> due;
  if (options_.mode == Mode::Sync) {
    return due;
  }
  const std::int64_t slowest = slowestClock();
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    WorkerClock& state = workers_[w];
    if (!state.waiting) {
      continue;
    }
    if (options_.mode == Mode::Ssp && state.clock - slowest > options_.staleness) {
      continue;
    }
    state.waiting = false;
    if (trace_) {
      trace_(fmt::format(R"({{"server":{},"event":"release","worker":{},"clock":{},"min_clock":{}}})", serverIndex_, w,
                         state.clock, slowest));
    }
    due.push_back({static_cast<int>(w), heldStaleness_[w]});
  }
  return due;
}

std::vector<Release> UpdateRule::markIdle(int worker) {
  workers_.at(static_cast<std::size_t>(worker)).idle = true;
  return releaseHeld();
}

std::vector<Release> UpdateRule::markDeparted(int worker) {
  WorkerClock& state = workers_.at(static_cast<std::size_t>(worker));
  state.departed = true;
  state.waiting = false;
  return releaseHeld();
}

void UpdateRule::recordSent(int worker) {
  if (options_.dcAsgd <= 0) {
    return;
  }
  // DC-ASGD's backup of the values a worker pulled is part of the update rule's state.
  PerWorker& mine = perWorker_.at(static_cast<std::size_t>(worker));
  std::int64_t bytes = 0;
  for (const Tensor& values : values_) {
    bytes += static_cast<std::int64_t>(values.bytes());
  }
  if (!mine.pulledValues.defined()) {
    mine.pulledValues = Tensor::empty(DType::UInt8, {bytes}, MemoryCategory::OptimizerState);
  }
  char* into = static_cast<char*>(mine.pulledValues.rawData());
  for (const Tensor& values : values_) {
    std::memcpy(into, values.rawData(), values.bytes());
    into += values.bytes();
  }
}

void UpdateRule::restore(std::int64_t version, const std::vector<std::int64_t>& clocks) {
  STRATA_CHECK(clocks.size() == workers_.size(), "{} clocks for {} workers", clocks.size(), workers_.size());
  version_ = version;
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    workers_[w].clock = clocks[w];
  }
}

}  // namespace strata::ps
