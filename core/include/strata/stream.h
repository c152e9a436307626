#pragma once

#include <functional>
#include <memory>
#include <string>

#include "strata/device.h"

namespace strata {

// Device work recorded once and replayed as a whole (a CUDA graph). A replay reads and writes the very buffers the
// recorded work used, so whoever replays copies new inputs into those buffers first.
class RecordedWork {
 public:
  virtual ~RecordedWork() = default;
  // Enqueues the recorded work on the stream it was recorded from.
  virtual void replay() = 0;
};

// An ordered queue of device work. Kernels enqueue on a stream; host code reads results only after synchronize().
// The CPU stream runs work as it is enqueued, so its synchronize() returns at once; the CUDA backend wraps
// cudaStream_t behind the same interface.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  virtual void synchronize() = 0;
  // Calls `work` and records the device work it enqueues on this stream instead of running it. Returns nullptr, with
  // the reason in *whyNot, when this stream cannot record or `work` did something a recording cannot hold (a host
  // synchronisation, an exception). Device memory `work` allocates stays reserved for the replays until the
  // recording is destroyed. The host side of `work` runs once: replays repeat only its device work.
  virtual std::unique_ptr<RecordedWork> record(const std::function<void()>& work, std::string* whyNot);
};

// The default stream of a device (the CPU one always exists; CUDA ones are registered by that backend).
Stream& defaultStream(Device device);
void registerDefaultStream(Device device, Stream* stream);

}  // namespace strata
