#include "server/tenant_spaces.h"

#include <filesystem>

#include "engine/core/status_macros.h"
#include "server/tenants.h"

namespace traind {

absl::StatusOr<TenantSpace*> TenantSpaces::Get(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  auto it = spaces_.find(tenant);
  if (it != spaces_.end()) return it->second.get();
  auto space = std::make_unique<TenantSpace>();
  space->tenant = tenant;
  space->directory = TenantDirectory(state_dir_, tenant);
  TRAIND_ASSIGN_OR_RETURN(space->blobs, BlobStore::Open(space->directory, max_blob_bytes_));
  TRAIND_ASSIGN_OR_RETURN(space->artifacts, ArtifactStore::Open(space->directory, max_file_bytes_));
  TenantSpace* opened = space.get();
  spaces_.emplace(tenant, std::move(space));
  return opened;
}

int64_t TenantSpaces::StoredBytes(const std::string& tenant) const {
  const std::filesystem::path root = TenantDirectory(state_dir_, tenant);
  const std::filesystem::path others = root / "tenants";
  int64_t total = 0;
  std::error_code error;
  for (auto it = std::filesystem::recursive_directory_iterator(root, error);
       !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
    if (tenant.empty() && it->path() == others) {
      it.disable_recursion_pending();
      continue;
    }
    std::error_code size_error;
    if (it->is_regular_file(size_error)) {
      const auto size = it->file_size(size_error);
      if (!size_error) total += static_cast<int64_t>(size);
    }
  }
  return total;
}

}  // namespace traind
