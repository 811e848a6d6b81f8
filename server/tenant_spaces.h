// The per-tenant stores: each tenant's blobs, artifact sets and named checkpoints live under its own directory
// (tenants.h TenantDirectory), created on first use. Spaces are never removed while the daemon runs (a tenant
// dropped from the tenants file can no longer authenticate; its data stays on disk).
#ifndef TRAIND_SERVER_TENANT_SPACES_H_
#define TRAIND_SERVER_TENANT_SPACES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/artifact_store.h"
#include "server/blob_store.h"

namespace traind {

struct TenantSpace {
  std::string tenant;
  std::string directory;
  std::unique_ptr<BlobStore> blobs;
  std::unique_ptr<ArtifactStore> artifacts;
};

class TenantSpaces {
 public:
  TenantSpaces(std::string state_dir, int64_t max_blob_bytes, int64_t max_file_bytes)
      : state_dir_(std::move(state_dir)), max_blob_bytes_(max_blob_bytes), max_file_bytes_(max_file_bytes) {}

  // The tenant's space, opened (directories made, leftovers of interrupted writes removed) on first use.
  absl::StatusOr<TenantSpace*> Get(const std::string& tenant);

  // Bytes of every file under the tenant's directory (the anonymous tenant's excludes tenants/): what
  // max_stored_bytes limits.
  int64_t StoredBytes(const std::string& tenant) const;

  const std::string& state_dir() const { return state_dir_; }

 private:
  const std::string state_dir_;
  const int64_t max_blob_bytes_;
  const int64_t max_file_bytes_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<TenantSpace>> spaces_ ABSL_GUARDED_BY(mu_);
};

}  // namespace traind

#endif  // TRAIND_SERVER_TENANT_SPACES_H_
