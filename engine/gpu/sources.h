// The OpenCL C sources compiled into the binary by cl_sources (engine/gpu/cl_sources.bzl), by file name.
#ifndef TRAIND_ENGINE_GPU_SOURCES_H_
#define TRAIND_ENGINE_GPU_SOURCES_H_

#include <initializer_list>
#include <utility>

#include "absl/strings/string_view.h"

namespace traind::engine::gpu {

// Called by the generated code at static initialisation; names must be unique across the binary.
bool RegisterClSources(std::initializer_list<std::pair<const char*, const char*>> sources);

// The text of an embedded .cl file; empty if no such file was embedded.
absl::string_view ClSource(absl::string_view file_name);

}  // namespace traind::engine::gpu

#endif  // TRAIND_ENGINE_GPU_SOURCES_H_
