#include "gloo_store_adapter.h"

namespace strata::detail {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<strata::Store> store, std::string prefix,
                                   std::chrono::milliseconds timeout)
    : store_(std::move(store)), prefix_(std::move(prefix)), timeout_(timeout) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(prefix_ + key, strata::Store::Bytes(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  const strata::Store::Bytes value = store_->get(prefix_ + key, timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  store_->wait(prefixed(keys), timeout_);
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  store_->wait(prefixed(keys), timeout);
}

std::vector<std::string> GlooStoreAdapter::prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) {
    out.push_back(prefix_ + key);
  }
  return out;
}

}  // namespace strata::detail
