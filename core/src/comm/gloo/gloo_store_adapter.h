#pragma once

#include <memory>
#include <string>

#include <gloo/rendezvous/store.h>

#include "strata/comm/store.h"

namespace strata::detail {

// Lets Gloo's rendezvous (Context::connectFullMesh) run over a Strata Store; keys get the process group's prefix so
// that several groups can share one store.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<strata::Store> store, std::string prefix, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const;

  std::shared_ptr<strata::Store> store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace strata::detail
