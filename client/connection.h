// How clients (trainctl, tests, fleet tools written in C++) reach a traind: plaintext, TLS, or mutual TLS.
#ifndef TRAIND_CLIENT_CONNECTION_H_
#define TRAIND_CLIENT_CONNECTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"

namespace traind {

struct ConnectionOptions {
  std::string address = "127.0.0.1:50051";
  // Any of the TLS fields set => TLS. tls_ca: PEM roots to verify the server (default: the system roots).
  std::string tls_ca_path;
  // Both set => the client presents this certificate (mutual TLS).
  std::string tls_cert_path;
  std::string tls_key_path;
  // Verify the server certificate against this name instead of the address's host.
  std::string tls_server_name;
  int64_t max_message_bytes = int64_t{64} << 20;
};

// Creates a channel (lazily connecting, as gRPC channels do). Errors name a missing/unreadable file or a
// half-given client certificate.
absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const ConnectionOptions& options);

}  // namespace traind

#endif  // TRAIND_CLIENT_CONNECTION_H_
