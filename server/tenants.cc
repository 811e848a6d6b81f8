#include "server/tenants.h"

#include <openssl/crypto.h>

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/io/file_util.h"
#include "server/blob_store.h"  // IsSha256Hex
#include "server/state_names.h"

namespace traind {
namespace {

constexpr int64_t kMaxTenantsFileBytes = 1 << 20;

absl::Status LineError(absl::string_view path, int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", message));
}

}  // namespace

absl::StatusOr<std::vector<TenantConfig>> ParseTenantsFile(absl::string_view text, absl::string_view path) {
  std::vector<TenantConfig> tenants;
  std::set<std::string> names, hashes;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    if (absl::ConsumePrefix(&line, "[")) {
      if (!absl::ConsumeSuffix(&line, "]") || !absl::ConsumePrefix(&line, "tenant ")) {
        return LineError(path, line_number, "a section must be [tenant NAME]");
      }
      const std::string name(absl::StripAsciiWhitespace(line));
      if (absl::Status valid = CheckStateName(name, "tenant name"); !valid.ok()) {
        return LineError(path, line_number, valid.message());
      }
      if (!names.insert(name).second) return LineError(path, line_number, absl::StrCat("tenant '", name, "' twice"));
      tenants.emplace_back().name = name;
      continue;
    }
    const size_t equals = line.find('=');
    if (equals == absl::string_view::npos) return LineError(path, line_number, "expected `key = value`");
    if (tenants.empty()) return LineError(path, line_number, "a setting before the first [tenant NAME]");
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, equals)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(equals + 1)));
    TenantConfig& tenant = tenants.back();
    if (key == "token_sha256") {
      const std::string hash = absl::AsciiStrToLower(value);
      if (!IsSha256Hex(hash)) return LineError(path, line_number, "token_sha256 must be 64 hex digits");
      if (!hashes.insert(hash).second) {
        return LineError(path, line_number, "this token hash is already given (to this or another tenant)");
      }
      tenant.token_sha256.push_back(hash);
    } else if (key == "client_cert_cn") {
      if (value.empty()) return LineError(path, line_number, "client_cert_cn is empty");
      tenant.client_cert_cn = value;
    } else if (key == "max_sessions" || key == "max_stored_bytes" || key == "max_concurrent_jobs") {
      int64_t number = 0;
      if (!absl::SimpleAtoi(value, &number) || number < 0) {
        return LineError(path, line_number, absl::StrCat(key, " must be a non-negative integer"));
      }
      (key == "max_sessions"       ? tenant.quotas.max_sessions
       : key == "max_stored_bytes" ? tenant.quotas.max_stored_bytes
                                   : tenant.quotas.max_concurrent_jobs) = number;
    } else {
      return LineError(path, line_number, absl::StrCat("unknown setting '", key, "'"));
    }
  }
  for (const TenantConfig& tenant : tenants) {
    if (tenant.token_sha256.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tenant '", tenant.name, "' has no token_sha256"));
    }
  }
  return tenants;
}

std::string TenantDirectory(const std::string& state_dir, const std::string& tenant) {
  return tenant.empty() ? state_dir : absl::StrCat(state_dir, "/tenants/", tenant);
}

absl::StatusOr<std::unique_ptr<Tenants>> Tenants::Load(const std::string& path) {
  std::unique_ptr<Tenants> tenants(new Tenants(path));
  if (path.empty()) {
    absl::MutexLock lock(&tenants->mu_);
    tenants->tenants_.emplace_back();  // the anonymous tenant
    return tenants;
  }
  if (absl::Status loaded = tenants->Reload(); !loaded.ok()) return loaded;
  return tenants;
}

absl::Status Tenants::Reload() {
  if (path_.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> text = engine::ReadFileLimited(path_, kMaxTenantsFileBytes);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<TenantConfig>> parsed = ParseTenantsFile(*text, path_);
  if (!parsed.ok()) return parsed.status();
  absl::MutexLock lock(&mu_);
  tenants_ = *std::move(parsed);
  return absl::OkStatus();
}

std::vector<TenantConfig> Tenants::List() const {
  absl::MutexLock lock(&mu_);
  return tenants_;
}

absl::StatusOr<TenantConfig> Tenants::Authenticate(absl::string_view authorization,
                                                   absl::string_view client_cert_cn) const {
  if (!enabled()) {
    absl::MutexLock lock(&mu_);
    return tenants_.front();
  }
  absl::string_view token = authorization;
  if (!absl::ConsumePrefix(&token, "Bearer ") || token.empty()) {
    return absl::UnauthenticatedError(authorization.empty() ? "this daemon needs a bearer token (authorization metadata)"
                                                            : "the authorization metadata is not `Bearer <token>`");
  }
  const std::string hash = engine::Sha256Hex(token);
  absl::MutexLock lock(&mu_);
  // Every stored hash is compared, in constant time each, so the time taken says nothing about which matched.
  const TenantConfig* match = nullptr;
  for (const TenantConfig& tenant : tenants_) {
    for (const std::string& stored : tenant.token_sha256) {
      if (CRYPTO_memcmp(stored.data(), hash.data(), hash.size()) == 0) match = &tenant;
    }
  }
  if (match == nullptr) return absl::UnauthenticatedError("unknown token");
  if (!match->client_cert_cn.empty() && match->client_cert_cn != client_cert_cn) {
    return absl::UnauthenticatedError("this token is bound to a client certificate the connection did not present");
  }
  return *match;
}

}  // namespace traind
