#include "strata/comm/in_memory_store.h"

#include <charconv>

#include "strata/error.h"

namespace strata {

void InMemoryStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    data_[key] = value;
  }
  changed_.notify_all();
}

Store::Bytes InMemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool found = changed_.wait_for(lock, timeout, [&] { return data_.contains(key); });
  STRATA_CHECK(found, "store get of key '{}' timed out after {:g} s", key,
               static_cast<double>(timeout.count()) / 1000.0);
  return data_.at(key);
}

std::int64_t InMemoryStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Bytes& stored = data_[key];
    if (!stored.empty()) {
      const char* begin = reinterpret_cast<const char*>(stored.data());
      const auto [end, ec] = std::from_chars(begin, begin + stored.size(), value);
      STRATA_CHECK(ec == std::errc() && end == begin + stored.size(), "store add: key '{}' does not hold a counter",
                   key);
    }
    value += delta;
    const std::string text = std::to_string(value);
    stored.assign(text.begin(), text.end());
  }
  changed_.notify_all();
  return value;
}

std::vector<std::string> InMemoryStore::missingLocked(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!data_.contains(key)) {
      missing.push_back(key);
    }
  }
  return missing;
}

bool InMemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  return missingLocked(keys).empty();
}

std::vector<std::string> InMemoryStore::tryWait(const std::vector<std::string>& keys,
                                                std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return missingLocked(keys).empty(); });
  return missingLocked(keys);
}

}  // namespace strata
