#include "engine/ops/spatial_attributes.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"

namespace traind::engine {
namespace {

absl::Status CheckAllAtLeast(const KernelInit& init, const char* name, const std::vector<int64_t>& values,
                             int64_t minimum) {
  for (int64_t v : values) {
    if (v < minimum) {
      return init.Error(
          absl::StrCat("attribute '", name, "' must be >= ", minimum, ", got [", absl::StrJoin(values, ","), "]"));
    }
  }
  return absl::OkStatus();
}

// Largest spatial size accepted: keeps every window computation far from int64 overflow.
constexpr int64_t kMaxWindowValue = int64_t{1} << 31;

}  // namespace

absl::StatusOr<SpatialAttributes> SpatialAttributes::Parse(const KernelInit& init, bool allow_dilations) {
  SpatialAttributes attributes;
  TRAIND_ASSIGN_OR_RETURN(std::string auto_pad, init.GetString("auto_pad", "NOTSET"));
  if (auto_pad == "NOTSET") {
    attributes.auto_pad = AutoPad::kNotSet;
  } else if (auto_pad == "VALID") {
    attributes.auto_pad = AutoPad::kValid;
  } else if (auto_pad == "SAME_UPPER") {
    attributes.auto_pad = AutoPad::kSameUpper;
  } else if (auto_pad == "SAME_LOWER") {
    attributes.auto_pad = AutoPad::kSameLower;
  } else {
    return init.Error(
        absl::StrCat("attribute 'auto_pad' must be NOTSET, VALID, SAME_UPPER or "
                     "SAME_LOWER, got '",
                     auto_pad, "'"));
  }
  TRAIND_ASSIGN_OR_RETURN(attributes.kernel_shape, init.GetInts("kernel_shape"));
  TRAIND_ASSIGN_OR_RETURN(attributes.strides, init.GetInts("strides"));
  TRAIND_ASSIGN_OR_RETURN(attributes.pads, init.GetInts("pads"));
  if (allow_dilations) {
    TRAIND_ASSIGN_OR_RETURN(attributes.dilations, init.GetInts("dilations"));
  } else if (init.HasAttribute("dilations")) {
    return init.Error("attribute 'dilations' is not defined for this op and opset");
  }
  TRAIND_RETURN_IF_ERROR(CheckAllAtLeast(init, "kernel_shape", attributes.kernel_shape, 1));
  TRAIND_RETURN_IF_ERROR(CheckAllAtLeast(init, "strides", attributes.strides, 1));
  TRAIND_RETURN_IF_ERROR(CheckAllAtLeast(init, "dilations", attributes.dilations, 1));
  TRAIND_RETURN_IF_ERROR(CheckAllAtLeast(init, "pads", attributes.pads, 0));
  for (const auto* list : {&attributes.kernel_shape, &attributes.strides, &attributes.dilations, &attributes.pads}) {
    for (int64_t v : *list) {
      if (v > kMaxWindowValue) return init.Error("window attribute value too large");
    }
  }
  if (attributes.pads.size() % 2 != 0) {
    return init.Error(absl::StrCat("attribute 'pads' needs 2 values per spatial dim, got ", attributes.pads.size()));
  }
  if (!attributes.pads.empty() && attributes.auto_pad != AutoPad::kNotSet) {
    return init.Error("attributes 'pads' and 'auto_pad' (other than NOTSET) are exclusive");
  }
  // Lengths that are present must agree with each other; the input rank is checked at run time.
  size_t rank = 0;
  for (size_t n : {attributes.kernel_shape.size(), attributes.strides.size(), attributes.dilations.size(),
                   attributes.pads.size() / 2}) {
    if (n == 0) continue;
    if (rank != 0 && n != rank) {
      return init.Error("kernel_shape, strides, dilations and pads disagree on the spatial rank");
    }
    rank = n;
  }
  return attributes;
}

absl::StatusOr<WindowGeometry> ResolveForwardWindow(const SpatialAttributes& attributes,
                                                    absl::Span<const int64_t> input, absl::Span<const int64_t> kernel,
                                                    bool ceil_mode) {
  const size_t rank = input.size();
  auto check_length = [&](const std::vector<int64_t>& list, size_t per_dim, const char* name) -> absl::Status {
    if (!list.empty() && list.size() != rank * per_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute '", name, "' has ", list.size(), " values for ", rank, " spatial dims"));
    }
    return absl::OkStatus();
  };
  TRAIND_RETURN_IF_ERROR(check_length(attributes.strides, 1, "strides"));
  TRAIND_RETURN_IF_ERROR(check_length(attributes.dilations, 1, "dilations"));
  TRAIND_RETURN_IF_ERROR(check_length(attributes.pads, 2, "pads"));
  if (kernel.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("kernel has ", kernel.size(), " dims for ", rank, " spatial dims"));
  }
  WindowGeometry g;
  g.input.assign(input.begin(), input.end());
  g.kernel.assign(kernel.begin(), kernel.end());
  g.strides = attributes.strides.empty() ? std::vector<int64_t>(rank, 1) : attributes.strides;
  g.dilations = attributes.dilations.empty() ? std::vector<int64_t>(rank, 1) : attributes.dilations;
  g.pad_begin.assign(rank, 0);
  g.pad_end.assign(rank, 0);
  g.output.assign(rank, 0);
  for (size_t i = 0; i < rank; ++i) {
    if (g.input[i] > kMaxWindowValue || g.kernel[i] > kMaxWindowValue || g.kernel[i] < 1) {
      return absl::InvalidArgumentError("spatial dim or kernel size out of range");
    }
    const int64_t extent = g.Extent(i);
    const int64_t stride = g.strides[i];
    switch (attributes.auto_pad) {
      case AutoPad::kNotSet: {
        if (!attributes.pads.empty()) {
          g.pad_begin[i] = attributes.pads[i];
          g.pad_end[i] = attributes.pads[i + rank];
        }
        const int64_t span = g.input[i] + g.pad_begin[i] + g.pad_end[i] - extent;
        if (span < 0) {
          return absl::InvalidArgumentError(absl::StrCat("kernel extent ", extent, " exceeds padded input ",
                                                         g.input[i] + g.pad_begin[i] + g.pad_end[i], " in spatial dim ",
                                                         i));
        }
        g.output[i] = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
        // A window must start inside the input or its begin padding (PyTorch, ONNX >= 1.15).
        if (ceil_mode && (g.output[i] - 1) * stride >= g.input[i] + g.pad_begin[i]) {
          --g.output[i];
        }
        break;
      }
      case AutoPad::kValid:
        if (g.input[i] < extent) {
          return absl::InvalidArgumentError(
              absl::StrCat("kernel extent ", extent, " exceeds input ", g.input[i], " in spatial dim ", i));
        }
        g.output[i] = (g.input[i] - extent) / stride + 1;
        break;
      case AutoPad::kSameUpper:
      case AutoPad::kSameLower: {
        g.output[i] = (g.input[i] + stride - 1) / stride;
        const int64_t total = std::max<int64_t>(0, (g.output[i] - 1) * stride + extent - g.input[i]);
        // SAME_UPPER puts the odd pad at the end, SAME_LOWER at the beginning.
        g.pad_begin[i] = attributes.auto_pad == AutoPad::kSameUpper ? total / 2 : (total + 1) / 2;
        g.pad_end[i] = total - g.pad_begin[i];
        break;
      }
    }
  }
  return g;
}

}  // namespace traind::engine
