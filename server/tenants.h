// Tenants and their bearer tokens: who may call the daemon, what they own, and how much of it.
//
// Without a tenants file the daemon has one anonymous tenant ("") and asks for no token. With one
// (--tenants_file), every TrainingService call must carry "authorization: Bearer <token>"; the token's SHA-256
// (the file stores only hashes) names the tenant, compared in constant time. A tenant may also be bound to the
// common name of a client certificate (mutual TLS): then the token is accepted only over a connection that
// presented that certificate. The file is re-read on SIGHUP (Reload): a bad file keeps the old configuration.
//
// File format (`#` comments, blank lines ignored):
//   [tenant NAME]                      NAME: [A-Za-z0-9._-]{1,128}
//   token_sha256 = <64 hex digits>     one or more (several allow rotating tokens)
//   client_cert_cn = <common name>     optional
//   max_sessions = N                   optional quotas; 0 or absent: only the daemon's own limits
//   max_stored_bytes = N
//   max_concurrent_jobs = N
//
// Everything a tenant creates (blobs, artifacts, checkpoints, sessions, jobs) lives in its own directory,
// <state_dir>/tenants/NAME/ (the anonymous tenant's: <state_dir> itself), so another tenant's ids are simply
// not found.
#ifndef TRAIND_SERVER_TENANTS_H_
#define TRAIND_SERVER_TENANTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace traind {

struct TenantQuotas {
  int64_t max_sessions = 0;  // 0: no tenant-specific limit
  int64_t max_stored_bytes = 0;
  int64_t max_concurrent_jobs = 0;
};

struct TenantConfig {
  std::string name;
  std::vector<std::string> token_sha256;  // lower-case hex
  std::string client_cert_cn;            // empty: any (or no) client certificate
  TenantQuotas quotas;
};

// InvalidArgument naming the line for a malformed file.
absl::StatusOr<std::vector<TenantConfig>> ParseTenantsFile(absl::string_view text, absl::string_view path);

// The state directory of a tenant: `state_dir` for the anonymous tenant, else state_dir/tenants/NAME.
std::string TenantDirectory(const std::string& state_dir, const std::string& tenant);

class Tenants {
 public:
  // No file: the anonymous tenant only, no token asked.
  static absl::StatusOr<std::unique_ptr<Tenants>> Load(const std::string& path);

  bool enabled() const { return !path_.empty(); }

  // The tenant a call belongs to. `authorization` is the call's "authorization" metadata value (empty when
  // absent); `client_cert_cn` the common name of the client certificate of the connection (empty without one).
  // UNAUTHENTICATED for a missing, malformed or unknown token, or a token used without its bound certificate.
  absl::StatusOr<TenantConfig> Authenticate(absl::string_view authorization, absl::string_view client_cert_cn) const;

  // Re-reads the file; on error the current configuration stays and the error is returned.
  absl::Status Reload();

  // Every configured tenant (the anonymous one when disabled).
  std::vector<TenantConfig> List() const;

 private:
  explicit Tenants(std::string path) : path_(std::move(path)) {}

  const std::string path_;
  mutable absl::Mutex mu_;
  std::vector<TenantConfig> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace traind

#endif  // TRAIND_SERVER_TENANTS_H_
