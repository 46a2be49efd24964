// New initializers (int64, float, centered copies), and the data of changed initializers
// stored: in the model, in the side file, or streamed into the output as it is written.
// A part of the FoldWriter of onnx/fold_writer_internal.h.
#include "onnx/fold_writer_internal.h"

namespace lnv::onnx_import::fold_write {

std::string FoldWriter::int64_initializer(const std::string& base, const std::vector<int64_t>& values) {
  ox::TensorProto t;
  t.set_name(fresh(base));
  t.set_data_type(ox::TensorProto::INT64);
  t.add_dims(int64_t(values.size()));
  for (int64_t v : values) t.add_int64_data(v);
  new_initializers_.push_back(t);
  return t.name();
}

// A new float initializer: inline when small or when the input keeps no external data,
// else in the side file.
std::string FoldWriter::float_initializer(const std::string& base, const Shape& dims,
                                          const std::vector<double>& values, int32_t type,
                                          bool was_external) {
  ox::TensorProto t;
  t.set_name(fresh(base));
  t.set_data_type(type);
  for (int64_t d : dims) t.add_dims(d);
  store(t, values, was_external);
  new_initializers_.push_back(std::move(t));
  ++summary_.centered_copies;
  return new_initializers_.back().name();
}

bool FoldWriter::uses_external_data() const { return !input_data_files_.empty(); }

// A new initializer holding `src` (dims `dims`) centered as `c` says over `shape`.
std::string FoldWriter::centered_initializer(const std::string& base, const Shape& dims,
                                             const ox::TensorProto& src, const Shape& shape, const Centering& c) {
  ox::TensorProto t;
  t.set_name(fresh(base));
  t.set_data_type(src.data_type());
  for (int64_t d : dims) t.add_dims(d);
  if (!c.scale.empty()) store_scaled_centered(t, src, shape, c, is_external(src));
  else store_centered(t, src, shape, c.axes, c.remove, is_external(src));
  new_initializers_.push_back(std::move(t));
  ++summary_.centered_copies;
  return new_initializers_.back().name();
}

// The values of float initializer `src` (row-major, `shape`) centered over `axes`, or
// zeroed, as the data of `t` (of src's type). An external float32 `src` is streamed
// chunk by chunk from its data file into the side file (stream_centered: the same
// arithmetic as centered_values, rounded once to float); others are centered in memory.
void FoldWriter::store_centered(ox::TensorProto& t, const ox::TensorProto& src, const Shape& shape,
                                const Axes& axes, bool remove, bool was_external) {
  const int64_t n = numel_of(src);
  const size_t width = elem_bytes(src.data_type());
  const size_t nbytes = size_t(n) * width;
  if (remove) {
    store_bytes(t, nbytes, [nbytes](const ByteSink& sink) {
      const std::string zeros(std::min<size_t>(nbytes, size_t{1} << 20), '\0');
      for (size_t done = 0; done < nbytes; done += zeros.size())
        sink(zeros.data(), std::min(zeros.size(), nbytes - done));
    }, was_external);
    return;
  }
  if (!is_external(src) || src.data_type() != ox::TensorProto::FLOAT ||
      std::endian::native != std::endian::little) {
    store(t, centered_values(decode_floats(src, model_dir_), shape, axes, false), was_external);
    return;
  }
  const std::string where = "initializer " + in_quotes(src.name());
  const fs::path data = model_dir_ / external_key(src, "location");
  const std::string off = external_key(src, "offset");
  const int64_t base = off.empty() ? 0 : std::stoll(off);
  store_bytes(t, nbytes, [data, base, where, shape, axes, n](const ByteSink& sink) {
    std::ifstream in(data, std::ios::binary);
    auto read = [&](uint64_t done, uint64_t count, float* dst) {
      in.seekg(base + int64_t(done * 4));
      in.read(reinterpret_cast<char*>(dst), std::streamsize(count * 4));
      if (!in) throw ModelError(where, "its external data cannot be read");
    };
    auto append = [&](const float* v, uint64_t count) {
      sink(reinterpret_cast<const char*>(v), count * 4);
    };
    stream_centered<float, float>(shape, axes, uint64_t(n), read, append, where);
  }, was_external);
}

// The values of float initializer `src` (row-major, `shape`) multiplied by a LayerScale
// and centered, as `c` says, as the data of `t` (in memory).
void FoldWriter::store_scaled_centered(ox::TensorProto& t, const ox::TensorProto& src, const Shape& shape,
                                       const Centering& c, bool was_external) {
  Param p;
  p.name = src.name();
  p.shape = shape;
  p.values = decode_floats(src, model_dir_);
  p.scale = c.scale;
  p.scale_axis = c.scale_axis;
  p.center_axes = c.axes;
  store(t, effective_values(p), was_external);
}

// `values` as the data of `t` (see store_bytes).
void FoldWriter::store(ox::TensorProto& t, const std::vector<double>& values, bool was_external) {
  auto bytes = std::make_shared<const std::string>(encode_floats(values, t.data_type()));
  store_bytes(t, bytes->size(), [bytes](const ByteSink& sink) { sink(bytes->data(), bytes->size()); },
              was_external);
}

// The `nbytes` bytes `emit` hands to its sink, in order, as the data of `t`: in the side
// file when the input keeps external data and the tensor was external or is 1 KiB or
// more (streamed: never held whole); inline otherwise, streamed into the output by
// write() when of options_.stream_min_bytes or more. `emit` owns what it reads.
void FoldWriter::store_bytes(ox::TensorProto& t, size_t nbytes, const std::function<void(const ByteSink&)>& emit,
                             bool was_external) {
  was_external = was_external || is_external(t);
  t.clear_raw_data();
  t.clear_float_data();
  t.clear_double_data();
  t.clear_int32_data();
  t.clear_external_data();
  t.clear_data_location();
  if (!uses_external_data() || (!was_external && nbytes < 1024)) {
    if (nbytes >= options_.stream_min_bytes) {
      streamed_[t.name()] = {nbytes, emit, 0};
      return;
    }
    std::string bytes;
    bytes.reserve(nbytes);
    emit([&](const char* b, size_t n) { bytes.append(b, n); });
    if (bytes.size() != nbytes) throw InternalError("store_bytes: " + t.name() + ": wrong byte count");
    t.set_raw_data(std::move(bytes));
    return;
  }
  if (!side_) side_ = std::make_unique<AtomicFileWriter>(side_path().string());
  const size_t offset = (side_size_ + kSideAlign - 1) / kSideAlign * kSideAlign;
  side_->write(std::string(offset - side_size_, '\0'));
  size_t written = 0;
  emit([&](const char* b, size_t n) {
    side_->write(std::string_view(b, n));
    written += n;
  });
  if (written != nbytes) throw InternalError("store_bytes: " + t.name() + ": wrong byte count");
  side_size_ = offset + nbytes;
  t.set_data_location(ox::TensorProto::EXTERNAL);
  auto add = [&](const char* key, const std::string& value) {
    auto* kv = t.add_external_data();
    kv->set_key(key);
    kv->set_value(value);
  };
  add("location", side_path().filename().string());
  add("offset", std::to_string(offset));
  add("length", std::to_string(nbytes));
}

}  // namespace lnv::onnx_import::fold_write
