#pragma once

// Note [job secret]: the launcher makes one secret per job (32 random bytes as 40 Z85 characters: a CURVE secret
// key) in a directory only the user can enter, hands its path to every rank and role as STRATA_JOB_SECRET_FILE,
// and removes it when the job ends. Strategies that authenticate their own transport use it (the parameter
// server's CURVE keys, Note [PS authentication]); a job whose environment already names a file keeps that one.

#include <filesystem>
#include <string>
#include <vector>

namespace strata::cli {

inline constexpr const char* kJobSecretVariable = "STRATA_JOB_SECRET_FILE";

// Writes a fresh secret to `path` (mode 0600; refuses to overwrite an existing file).
void writeJobSecret(const std::filesystem::path& path);

class JobSecret {
 public:
  // Makes the secret unless the environment already names one.
  JobSecret();
  ~JobSecret();
  JobSecret(const JobSecret&) = delete;
  JobSecret& operator=(const JobSecret&) = delete;
  // For the children: STRATA_JOB_ID=<random hex> (a job's identity, e.g. in a parameter server's checkpoints) and
  // STRATA_JOB_SECRET_FILE=PATH unless the environment's own is inherited.
  std::vector<std::string> environment() const;

 private:
  std::filesystem::path directory_;  // ours to remove; empty when inherited
  std::filesystem::path file_;
  std::string id_;
};

}  // namespace strata::cli
