#pragma once

#include <string>

namespace strata {

enum class DeviceType { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index) { return {DeviceType::CUDA, index}; }
  bool operator==(const Device&) const = default;
  std::string toString() const;
};

}  // namespace strata
