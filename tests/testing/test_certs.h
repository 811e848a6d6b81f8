// Generates X.509 test PKIs at test time with OpenSSL (no committed keys): a CA, a server certificate for
// localhost/127.0.0.1 and a client certificate, all ECDSA P-256.
#ifndef TRAIND_TESTS_TESTING_TEST_CERTS_H_
#define TRAIND_TESTS_TESTING_TEST_CERTS_H_

#include <string>

namespace traind::testing {

struct PemFiles {
  std::string ca_cert;      // path of the CA certificate
  std::string server_cert;  // path of the server certificate (SAN localhost, 127.0.0.1), signed by the CA
  std::string server_key;
  std::string client_cert;  // path of a client certificate signed by the CA, common name "traind test client"
  std::string client_key;
  std::string other_client_cert;  // another one, common name "traind other client"
  std::string other_client_key;
};

// Writes a fresh PKI into `directory` (created if needed); files are named "<name_prefix>ca.pem" etc.
// Aborts the test binary on OpenSSL failure (it cannot happen with valid inputs).
PemFiles GenerateTestPki(const std::string& directory, const std::string& name_prefix);

}  // namespace traind::testing

#endif  // TRAIND_TESTS_TESTING_TEST_CERTS_H_
