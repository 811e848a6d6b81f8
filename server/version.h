#ifndef TRAIND_SERVER_VERSION_H_
#define TRAIND_SERVER_VERSION_H_

namespace traind {

// Semantic version of the daemon and its wire schema (traind.v1).
inline constexpr char kTraindVersion[] = "0.1.0";

}  // namespace traind

#endif  // TRAIND_SERVER_VERSION_H_
