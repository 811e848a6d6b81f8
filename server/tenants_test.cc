#include "server/tenants.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/io/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind {
namespace {

using ::testing::HasSubstr;

const std::string kAliceHash = engine::Sha256Hex("alice-token");
const std::string kBobHash = engine::Sha256Hex("bob-token");

std::string WriteTenants(const std::string& text) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/tenants.conf");
  EXPECT_TRUE(engine::WriteFileAtomically(path, text).ok());
  return path;
}

TEST(TenantsTest, TokensNameTheirTenantAndBoundCertificatesAreChecked) {
  const std::string path = WriteTenants(absl::StrCat(
      "# two tenants\n[tenant alice]\ntoken_sha256 = ", kAliceHash, "\nmax_sessions = 2\nmax_stored_bytes=1000\n\n",
      "[tenant bob]\ntoken_sha256 = ", kBobHash, "  # rotated below\ntoken_sha256 = ", engine::Sha256Hex("bob-new"),
      "\nclient_cert_cn = bob.example\nmax_concurrent_jobs = 1\n"));
  auto tenants = Tenants::Load(path);
  ASSERT_TRUE(tenants.ok()) << tenants.status();
  ASSERT_TRUE((*tenants)->enabled());
  auto alice = (*tenants)->Authenticate("Bearer alice-token", "");
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->quotas.max_sessions, 2);
  EXPECT_EQ(alice->quotas.max_stored_bytes, 1000);
  EXPECT_TRUE((*tenants)->Authenticate("Bearer bob-new", "bob.example").ok());
  EXPECT_EQ((*tenants)->Authenticate("Bearer bob-token", "bob.example")->quotas.max_concurrent_jobs, 1);
  for (const auto& [authorization, cn] : std::vector<std::pair<std::string, std::string>>{
           {"", ""}, {"alice-token", ""}, {"Bearer ", ""}, {"Bearer mallory", ""}, {"Basic alice-token", ""},
           {"Bearer bob-token", ""}, {"Bearer bob-token", "mallory.example"}}) {
    auto refused = (*tenants)->Authenticate(authorization, cn);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << authorization << " / " << cn;
  }
}

TEST(TenantsTest, ReloadKeepsTheOldConfigurationWhenTheNewFileIsBad) {
  const std::string path = WriteTenants(absl::StrCat("[tenant alice]\ntoken_sha256 = ", kAliceHash, "\n"));
  auto tenants = Tenants::Load(path);
  ASSERT_TRUE(tenants.ok()) << tenants.status();
  WriteTenants("[tenant alice]\ntoken_sha256 = nothex\n");
  EXPECT_EQ((*tenants)->Reload().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*tenants)->Authenticate("Bearer alice-token", "").ok());
  WriteTenants(absl::StrCat("[tenant bob]\ntoken_sha256 = ", kBobHash, "\n"));
  ASSERT_TRUE((*tenants)->Reload().ok());
  EXPECT_FALSE((*tenants)->Authenticate("Bearer alice-token", "").ok());
  EXPECT_EQ((*tenants)->Authenticate("Bearer bob-token", "")->name, "bob");
}

TEST(TenantsTest, MalformedFilesNameTheLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"token_sha256 = " + kAliceHash, ":1: a setting before the first [tenant NAME]"},
      {"[tenant ../x]\n", ":1: tenant name"},
      {"[tenant a]\n[tenant a]\n", ":2: tenant 'a' twice"},
      {"[tenant a]\ncolour = red\n", ":2: unknown setting 'colour'"},
      {"[tenant a]\nmax_sessions = -1\n", ":2: max_sessions must be"},
      {"[tenant a]\n", "tenant 'a' has no token_sha256"},
      {"[tenant a]\ntoken_sha256 = " + kAliceHash + "\n[tenant b]\ntoken_sha256 = " + kAliceHash, ":4: this token"},
      {"[tenant a]\njust words\n", ":2: expected `key = value`"},
  };
  for (const auto& [text, message] : cases) {
    auto parsed = ParseTenantsFile(text, "tenants.conf");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(message)) << text;
  }
}

TEST(TenantsTest, WithoutAFileEveryCallIsTheAnonymousTenant) {
  auto tenants = Tenants::Load("");
  ASSERT_TRUE(tenants.ok());
  EXPECT_FALSE((*tenants)->enabled());
  auto anonymous = (*tenants)->Authenticate("", "");
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ(anonymous->name, "");
  EXPECT_EQ(TenantDirectory("/s", ""), "/s");
  EXPECT_EQ(TenantDirectory("/s", "alice"), "/s/tenants/alice");
}

}  // namespace
}  // namespace traind
