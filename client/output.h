// How trainctl prints: protobuf messages as JSON (protobuf's own printer: field names as in the .proto, every
// field present, 64-bit integers as strings, enums by name), aligned text tables, numbers and times for people,
// and failures (a JSON document on stdout with --json, a line on stderr otherwise).
#ifndef TRAIND_CLIENT_OUTPUT_H_
#define TRAIND_CLIENT_OUTPUT_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "google/protobuf/struct.pb.h"

namespace traind::cli {

std::string MessageToJson(const google::protobuf::Message& message);
// The same JSON as a google.protobuf.Value, to place a message inside a larger document.
google::protobuf::Value MessageToValue(const google::protobuf::Message& message);
google::protobuf::Value StringValue(const std::string& text);
google::protobuf::Value NumberValue(double number);
google::protobuf::Value BoolValue(bool value);
// {"name": value, ...}.
google::protobuf::Struct Document(std::initializer_list<std::pair<std::string, google::protobuf::Value>> fields);

// Rows of cells, the first row the header; columns padded to their widest cell, the last column unpadded.
void PrintTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows);

// Seconds since the epoch as local "2026-11-24 07:43:05"; "-" for 0.
std::string FormatUnixTime(double seconds);
// Six significant digits ("0.0123457", "1.37690"); "nan" / "inf" spelled out.
std::string FormatNumber(double value);
// The first 12 hex digits of a digest, for tables.
std::string ShortDigest(const std::string& sha256_hex);

// Prints a failed command: with `json` one document {"command", "address", "error": {"kind", "code", "message",
// "detail"?}} on `out`; otherwise "trainctl <command>: CODE: message" (and the daemon's reason) on `err`.
void ReportFailure(std::ostream& out, std::ostream& err, bool json, const std::string& command,
                   const std::string& address, const absl::Status& status);

}  // namespace traind::cli

#endif  // TRAIND_CLIENT_OUTPUT_H_
