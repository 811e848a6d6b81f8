#include "server/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"

namespace traind {
namespace {

std::string OpenSslErrorString() {
  const unsigned long code = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "no PEM data found";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
}

absl::StatusOr<X509Ptr> ParseFirstCertificate(const std::string& pem, const std::string& path) {
  BioPtr bio = MemoryBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a PEM certificate: ", OpenSslErrorString()));
  }
  return cert;
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string reason = absl::StrCat("cannot read '", path, "': ", std::strerror(error));
    return error == ENOENT ? absl::NotFoundError(reason) : absl::InvalidArgumentError(reason);
  }
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& files) {
  if (files.cert_path.empty() && files.key_path.empty() && files.client_ca_path.empty()) {
    return grpc::InsecureServerCredentials();
  }
  if (files.cert_path.empty() || files.key_path.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls_cert and --tls_key (mutual TLS adds --tls_client_ca)");
  }
  absl::StatusOr<std::string> cert_pem = ReadFileToString(files.cert_path);
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = ReadFileToString(files.key_path);
  if (!key_pem.ok()) return key_pem.status();

  absl::StatusOr<X509Ptr> cert = ParseFirstCertificate(*cert_pem, files.cert_path);
  if (!cert.ok()) return cert.status();
  BioPtr key_bio = MemoryBio(*key_pem);
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", files.key_path, "' is not a PEM private key: ", OpenSslErrorString()));
  }
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("the private key '", files.key_path,
                                                   "' does not match the certificate '", files.cert_path, "'"));
  }

  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key_pem, *cert_pem});
  if (!files.client_ca_path.empty()) {
    absl::StatusOr<std::string> ca_pem = ReadFileToString(files.client_ca_path);
    if (!ca_pem.ok()) return ca_pem.status();
    absl::StatusOr<X509Ptr> ca = ParseFirstCertificate(*ca_pem, files.client_ca_path);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca_pem;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace traind
