#include "tests/testing/test_certs.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

namespace traind::testing {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "test PKI generation failed: %s\n", what);
    std::abort();
  }
}

using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using CertPtr = std::unique_ptr<X509, decltype(&X509_free)>;

KeyPtr NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
  Check(key != nullptr, "EVP_EC_gen");
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  Check(extension != nullptr, "X509V3_EXT_conf_nid");
  Check(X509_add_ext(cert, extension, -1) == 1, "X509_add_ext");
  X509_EXTENSION_free(extension);
}

// Issues a certificate for `key` named `common_name`; self-signed when issuer is null.
CertPtr Issue(EVP_PKEY* key, const char* common_name, X509* issuer, EVP_PKEY* issuer_key, bool is_ca,
              const char* subject_alt_names, long serial) {
  CertPtr cert(X509_new(), &X509_free);
  Check(cert != nullptr, "X509_new");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 7 * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("traind tests"), -1,
                             -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name), -1, -1,
                             0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  if (is_ca) {
    AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
    AddExtension(cert.get(), signer, NID_key_usage, "critical,digitalSignature,keyEncipherment");
    AddExtension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  if (subject_alt_names != nullptr) AddExtension(cert.get(), signer, NID_subject_alt_name, subject_alt_names);
  Check(X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) > 0, "X509_sign");
  return cert;
}

void WriteCert(const std::string& path, X509* cert) {
  FILE* file = std::fopen(path.c_str(), "w");
  Check(file != nullptr, "fopen cert");
  Check(PEM_write_X509(file, cert) == 1, "PEM_write_X509");
  std::fclose(file);
}

void WriteKey(const std::string& path, EVP_PKEY* key) {
  FILE* file = std::fopen(path.c_str(), "w");
  Check(file != nullptr, "fopen key");
  Check(PEM_write_PrivateKey(file, key, nullptr, nullptr, 0, nullptr, nullptr) == 1, "PEM_write_PrivateKey");
  std::fclose(file);
}

}  // namespace

PemFiles GenerateTestPki(const std::string& directory, const std::string& name_prefix) {
  std::filesystem::create_directories(directory);
  const std::string base = directory + "/" + name_prefix;
  PemFiles files{base + "ca.pem",     base + "server.pem",       base + "server.key",      base + "client.pem",
                 base + "client.key", base + "client2.pem", base + "client2.key"};

  KeyPtr ca_key = NewKey();
  CertPtr ca = Issue(ca_key.get(), "traind test CA", nullptr, nullptr, /*is_ca=*/true, nullptr, 1);
  KeyPtr server_key = NewKey();
  CertPtr server = Issue(server_key.get(), "localhost", ca.get(), ca_key.get(), /*is_ca=*/false,
                         "DNS:localhost,IP:127.0.0.1", 2);
  KeyPtr client_key = NewKey();
  CertPtr client = Issue(client_key.get(), "traind test client", ca.get(), ca_key.get(), /*is_ca=*/false, nullptr, 3);

  WriteCert(files.ca_cert, ca.get());
  WriteCert(files.server_cert, server.get());
  WriteKey(files.server_key, server_key.get());
  WriteCert(files.client_cert, client.get());
  WriteKey(files.client_key, client_key.get());
  KeyPtr other_key = NewKey();
  CertPtr other = Issue(other_key.get(), "traind other client", ca.get(), ca_key.get(), /*is_ca=*/false, nullptr, 4);
  WriteCert(files.other_client_cert, other.get());
  WriteKey(files.other_client_key, other_key.get());
  return files;
}

}  // namespace traind::testing
