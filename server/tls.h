// Server-side TLS and mutual TLS through gRPC's OpenSSL-backed credentials. Certificates are checked with
// OpenSSL at start-up so that a wrong file gives a clear error instead of gRPC's handshake failures later.
#ifndef TRAIND_SERVER_TLS_H_
#define TRAIND_SERVER_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

namespace traind {

struct TlsFiles {
  std::string cert_path;       // PEM certificate chain of the server
  std::string key_path;        // PEM private key of the server
  std::string client_ca_path;  // PEM CA bundle; set => mutual TLS, clients must present a certificate it signed
};

// Plaintext credentials when no file is set; TLS with cert+key; mutual TLS with cert+key+client CA.
// Errors (INVALID_ARGUMENT / NOT_FOUND) name the file and what is wrong with it.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& files);

// Reads a whole file; NOT_FOUND / PERMISSION_DENIED style errors name the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace traind

#endif  // TRAIND_SERVER_TLS_H_
