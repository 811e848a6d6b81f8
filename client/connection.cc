#include "client/connection.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace traind {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " '", path, "'"));
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const ConnectionOptions& options) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  arguments.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 1 << 20);
  arguments.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  arguments.SetInt(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 8 << 20);
  const bool tls = !options.tls_ca_path.empty() || !options.tls_cert_path.empty() ||
                   !options.tls_key_path.empty() || !options.tls_server_name.empty();
  if (!tls) return grpc::CreateCustomChannel(options.address, grpc::InsecureChannelCredentials(), arguments);

  if (options.tls_cert_path.empty() != options.tls_key_path.empty()) {
    return absl::InvalidArgumentError("a client certificate needs both --tls-cert and --tls-key");
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_ca_path.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(options.tls_ca_path, "CA certificate");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  if (!options.tls_cert_path.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(options.tls_cert_path, "client certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(options.tls_key_path, "client key");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  if (!options.tls_server_name.empty()) {
    arguments.SetSslTargetNameOverride(options.tls_server_name);
  }
  return grpc::CreateCustomChannel(options.address, grpc::SslCredentials(ssl), arguments);
}

}  // namespace traind
