#include "engine/model/traind_schemas.h"

#include <functional>
#include <vector>

#include "absl/base/call_once.h"
#include "onnx/defs/schema.h"

namespace traind::engine {
namespace {

using SchemaFactory = onnx::OpSchema (*)();

// One function per op, returning its complete schema (SetName, SetDomain(kTraindTrainingDomain),
// SinceVersion(kTraindTrainingVersion), inputs, outputs, attributes, type constraints and a shape-inference
// function). Add each new op to kSchemas below.

const std::vector<SchemaFactory>& Schemas() {
  static const auto* schemas = new std::vector<SchemaFactory>{
      // Gradient kernels:
      // Optimizers and gradient accumulation:
  };
  return *schemas;
}

}  // namespace

void RegisterTraindSchemas() {
  static absl::once_flag once;
  absl::call_once(once, [] {
    onnx::OpSchemaRegistry::DomainToVersionRange::Instance().AddDomainToVersion(
        kTraindTrainingDomain, kTraindTrainingVersion, kTraindTrainingVersion);
    for (SchemaFactory factory : Schemas()) {
      onnx::RegisterSchema(factory(), 0);
    }
  });
}

}  // namespace traind::engine
