#include "engine/ops/dnnl_util.h"

#include <algorithm>

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace traind::engine {

const dnnl::engine& DnnlCpuEngine() {
  static const auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::stream& DnnlThreadStream() {
  thread_local dnnl::stream stream(DnnlCpuEngine());
  return stream;
}

dnnl::memory::desc PlainDesc(absl::Span<const int64_t> dims, dnnl::memory::data_type type) {
  using tag = dnnl::memory::format_tag;
  static constexpr tag kPlainTags[] = {tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde, tag::abcdef};
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), type, kPlainTags[dims.size() - 1]);
}

dnnl::memory::desc ActivationDesc(absl::Span<const int64_t> dims, dnnl::memory::data_type type, bool channels_last) {
  if (!channels_last) return PlainDesc(dims, type);
  using tag = dnnl::memory::format_tag;
  static constexpr tag kChannelsLastTags[] = {tag::acb, tag::acdb, tag::acdeb};
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), type, kChannelsLastTags[dims.size() - 3]);
}

dnnl::primitive_attr UserScratchpadAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

absl::Status CatchDnnlError(absl::string_view what, absl::StatusCode code, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const dnnl::error& error) {
    return absl::Status(code, absl::StrCat(what, ": oneDNN: ", error.what()));
  }
  return absl::OkStatus();
}

dnnl::memory WrapMemory(const dnnl::memory::desc& desc, const void* data) {
  return dnnl::memory(desc, DnnlCpuEngine(), const_cast<void*>(data));
}

absl::Status ExecuteDnnl(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad,
                         std::unordered_map<int, dnnl::memory> args, KernelContext& context) {
  std::shared_ptr<Buffer> scratch_buffer;  // Held until the primitive has finished.
  const size_t scratch_bytes = scratchpad.get_size();
  if (scratch_bytes > 0) {
    TRAIND_ASSIGN_OR_RETURN(scratch_buffer, context.buffers().Acquire(scratch_bytes));
    args.emplace(DNNL_ARG_SCRATCHPAD, WrapMemory(scratchpad, scratch_buffer->data()));
  }
  return CatchDnnlError("execute", absl::StatusCode::kInternal, [&] {
    dnnl::stream& stream = DnnlThreadStream();
    primitive.execute(stream, args);
    stream.wait();
  });
}

std::optional<DnnlLayoutChange> MakeLayoutChange(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  if (from == to) return std::nullopt;
  dnnl::reorder::primitive_desc pd(DnnlCpuEngine(), from, DnnlCpuEngine(), to, UserScratchpadAttr());
  return DnnlLayoutChange{from, to, dnnl::reorder(pd), pd.scratchpad_desc()};
}

absl::Status RunLayoutChange(const DnnlLayoutChange& change, const void* from_data, void* to_data,
                             KernelContext& context) {
  return ExecuteDnnl(
      change.primitive, change.scratchpad,
      {{DNNL_ARG_FROM, WrapMemory(change.from, from_data)}, {DNNL_ARG_TO, WrapMemory(change.to, to_data)}}, context);
}

DnnlConvGeometry MakeDnnlConvGeometry(absl::Span<const int64_t> weight_shape, int64_t group,
                                      const WindowGeometry& window, int64_t input_channels) {
  DnnlConvGeometry geometry;
  geometry.weight_dims.assign(weight_shape.begin(), weight_shape.end());
  if (group > 1) {
    geometry.weight_dims[0] /= group;
    geometry.weight_dims.insert(geometry.weight_dims.begin(), group);
  }
  for (int64_t d : window.dilations) geometry.dilations.push_back(d - 1);
  const bool pointwise = std::all_of(window.kernel.begin(), window.kernel.end(), [](int64_t k) { return k == 1; });
  geometry.plain_activations = pointwise || input_channels == 1;
  return geometry;
}

}  // namespace traind::engine
