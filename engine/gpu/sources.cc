#include "engine/gpu/sources.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace traind::engine::gpu {
namespace {

std::map<std::string, const char*, std::less<>>& Sources() {
  static auto* sources = new std::map<std::string, const char*, std::less<>>();
  return *sources;
}

}  // namespace

bool RegisterClSources(std::initializer_list<std::pair<const char*, const char*>> sources) {
  for (const auto& [name, text] : sources) {
    if (!Sources().emplace(name, text).second) {
      std::fprintf(stderr, "traind: two embedded OpenCL sources are named %s\n", name);
      std::abort();
    }
  }
  return true;
}

absl::string_view ClSource(absl::string_view file_name) {
  auto it = Sources().find(file_name);
  return it == Sources().end() ? absl::string_view() : absl::string_view(it->second);
}

}  // namespace traind::engine::gpu
