#include "server/state_names.h"

#include <openssl/rand.h>

#include <cstdint>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace traind {

absl::Status CheckStateName(absl::string_view name, absl::string_view what) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  if (name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", name.size(), " characters long; at most ", kMaxNameLength, " are allowed"));
  }
  if (name[0] == '.') return absl::InvalidArgumentError(absl::StrCat(what, " must not start with '.'"));
  for (char c : name) {
    const bool allowed = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                         c == '_' || c == '-';
    if (!allowed) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", absl::CHexEscape(name), "' has a character outside [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

std::string NewRandomId(absl::string_view prefix) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    // OpenSSL's generator failed (no entropy source): the kernel's is the fallback.
    std::random_device device;
    for (unsigned char& byte : bytes) byte = static_cast<unsigned char>(device());
  }
  return absl::StrCat(prefix, absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bytes), sizeof(bytes))));
}

}  // namespace traind
