#include "core/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace lnv {
namespace {

uint64_t load_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

template <class W>
W swap_bytes(W w) {
  W out = 0;
  for (size_t i = 0; i < sizeof(W); ++i, w >>= 8) out = static_cast<W>((out << 8) | (w & 0xff));
  return out;
}

void store_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Exact conversion of an IEEE half to double.
double half_to_double(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? std::nan("") : sign * INFINITY;
  return sign * std::ldexp(mant + 1024, exp - 25);
}

double bf16_to_double(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// Bytes per element of a supported dtype, 0 for others.
int dtype_size(const std::string& dtype) {
  if (dtype == "F64") return 8;
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

uint64_t nonnegative_int(const nlohmann::json& j, const std::string& path,
                         const std::string& what) {
  if (!j.is_number_unsigned() && !(j.is_number_integer() && j.get<int64_t>() >= 0))
    // Integers beyond 64 bits reach here as doubles.
    throw ModelError(path, what + ": " +
                               (j.is_number_float() && j.get<double>() >= 0x1p64
                                    ? "integer " + j.dump() + " is too large"
                                    : "expected a non-negative integer, got " + excerpt(j)));
  return j.get<uint64_t>();
}

}  // namespace

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path_, ec))
    throw ModelError(path_, "no such file (or not a regular file)");
  const uint64_t size = std::filesystem::file_size(path_, ec);
  if (ec) throw ModelError(path_, "cannot read the file size: " + ec.message());
  if (size < 8)
    throw ModelError(path_, "not a safetensors file: " + std::to_string(size) +
                                " bytes, too short for the 8-byte header length");
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw ModelError(path_, "cannot open file");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  const uint64_t header_len = load_le(len_bytes, 8);
  if (header_len > size - 8)
    throw ModelError(path_, "header length " + std::to_string(header_len) +
                                " reaches beyond the end of the file (" + std::to_string(size) +
                                " bytes)");
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  if (!in) throw ModelError(path_, "cannot read the header");
  header_ = std::make_unique<const nlohmann::json>(parse_json(header, path_, "header is not valid JSON"));
  if (!header_->is_object())
    throw ModelError(path_, "header is not a JSON object (got " +
                                std::string(header_->type_name()) + ")");
  data_start_ = 8 + header_len;
  data_size_ = size - data_start_;
}

int dtype_significand_bits(const std::string& dtype) {
  if (dtype == "F32") return 24;
  if (dtype == "F16") return 11;
  if (dtype == "BF16") return 8;
  return 53;
}

SafetensorsReader::~SafetensorsReader() = default;

bool SafetensorsReader::has(const std::string& key) const {
  return key != "__metadata__" && header_->contains(key);
}

std::string SafetensorsReader::dtype(const std::string& key) const {
  if (!has(key)) return "";
  const nlohmann::json& e = header_->at(key);
  if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string()) return "";
  return e["dtype"].get<std::string>();
}

std::vector<std::string> SafetensorsReader::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : header_->items())
    if (k != "__metadata__") out.push_back(k);
  return out;
}

SafetensorsSpan SafetensorsReader::span(const std::string& key) const {
  if (!has(key)) {
    std::string known;
    for (const std::string& k : keys()) known += (known.empty() ? "'" : ", '") + k + "'";
    throw ModelError(path_, "no tensor '" + key + "' in the file (it holds " +
                                (known.empty() ? std::string("none") : known) + ")");
  }
  const std::string where = path_ + " [" + key + "]";
  const nlohmann::json& e = header_->at(key);
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
      !e.contains("data_offsets"))
    throw ModelError(where, "expected an object with dtype, shape and data_offsets, got " +
                                excerpt(e));
  if (!e["dtype"].is_string()) throw ModelError(where, "dtype: expected a string");
  SafetensorsSpan s;
  s.key = key;
  s.dtype = e["dtype"].get<std::string>();
  s.element_size = dtype_size(s.dtype);
  if (s.element_size == 0)
    throw ModelError(where, "unsupported dtype '" + s.dtype + "' (expected F64, F32, F16 or BF16)");
  if (!e["shape"].is_array()) throw ModelError(where, "shape: expected an array");
  uint64_t count = 1;
  for (const auto& d : e["shape"]) {
    const uint64_t dim = nonnegative_int(d, where, "shape");
    if (dim != 0 && count > (uint64_t{1} << 60) / dim)
      throw ModelError(where, "shape " + excerpt(e["shape"]) + " is impossibly large");
    s.shape.push_back(static_cast<int64_t>(dim));
    count *= dim;
  }
  s.count = count;
  const nlohmann::json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    throw ModelError(where, "data_offsets: expected [begin, end], got " + excerpt(off));
  const uint64_t begin = nonnegative_int(off[0], where, "data_offsets");
  const uint64_t end = nonnegative_int(off[1], where, "data_offsets");
  if (begin > end)
    throw ModelError(where, "data_offsets [" + std::to_string(begin) + ", " +
                                std::to_string(end) + "] begin after they end");
  if (end - begin != count * s.element_size)
    throw ModelError(where, "data_offsets [" + std::to_string(begin) + ", " +
                                std::to_string(end) + "] span " + std::to_string(end - begin) +
                                " bytes, but shape " + to_string(s.shape) + " of " + s.dtype +
                                " needs " + std::to_string(count * s.element_size));
  if (end > data_size_)
    throw ModelError(where, "data_offsets [" + std::to_string(begin) + ", " +
                                std::to_string(end) + "] reach beyond the data section (" +
                                std::to_string(data_size_) +
                                " bytes): the file is truncated or the offsets are wrong");
  s.offset = data_start_ + begin;
  return s;
}

namespace {

// A read-only descriptor of a file, closed on scope exit.
class InputFile {
 public:
  InputFile(const std::string& path, const std::string& where) : where_(where) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw ModelError(where_, std::string("cannot open file: ") + std::strerror(errno));
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Exactly `bytes` bytes at `offset`, or ModelError (file shorter than its header says).
  void read(char* dst, uint64_t bytes, uint64_t offset) const {
    while (bytes > 0) {
      const ssize_t n = ::pread(fd_, dst, bytes, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw ModelError(where_, std::string("cannot read the tensor data: ") + std::strerror(errno));
      if (n == 0) throw ModelError(where_, "cannot read the tensor data (file truncated?)");
      dst += n;
      bytes -= static_cast<uint64_t>(n);
      offset += static_cast<uint64_t>(n);
    }
  }

 private:
  std::string where_;
  int fd_ = -1;
};

// Stored values converted exactly to double, `count` of them from `raw`.
void decode(const std::string& dtype, const char* raw, uint64_t count, double* out) {
  if constexpr (std::endian::native == std::endian::little) {
    if (dtype == "F64") {
      std::memcpy(out, raw, 8 * count);
      return;
    }
    if (dtype == "F32") {
      for (uint64_t i = 0; i < count; ++i) {
        float f;
        std::memcpy(&f, raw + 4 * i, 4);
        out[i] = f;
      }
      return;
    }
  }
  const auto* p = reinterpret_cast<const unsigned char*>(raw);
  const int esize = dtype_size(dtype);
  auto convert = [&](auto decode_one) {
    for (uint64_t i = 0; i < count; ++i, p += esize) out[i] = decode_one(load_le(p, esize));
  };
  if (dtype == "F64")
    convert([](uint64_t bits) { return std::bit_cast<double>(bits); });
  else if (dtype == "F32")
    convert([](uint64_t bits) -> double { return std::bit_cast<float>(static_cast<uint32_t>(bits)); });
  else if (dtype == "F16")
    convert([](uint64_t bits) { return half_to_double(static_cast<uint16_t>(bits)); });
  else
    convert([](uint64_t bits) { return bf16_to_double(static_cast<uint16_t>(bits)); });
}

// Whether any of `count` little-endian W-bit words at `raw` has all exponent bits set
// (NaN or infinity). Branch-free over the chunk, so that it vectorizes.
template <class W>
bool any_exponent_all_ones(const char* raw, size_t count, W mask) {
  W bad = 0;
  for (size_t i = 0; i < count; ++i) {
    W w;
    std::memcpy(&w, raw + sizeof(W) * i, sizeof(W));
    if constexpr (std::endian::native == std::endian::big) w = swap_bytes(w);
    bad |= static_cast<W>((w & mask) == mask);
  }
  return bad != 0;
}

bool chunk_has_non_finite(const std::string& dtype, const char* raw, size_t count) {
  if (dtype == "F64") return any_exponent_all_ones<uint64_t>(raw, count, 0x7ff0000000000000ull);
  if (dtype == "F32") return any_exponent_all_ones<uint32_t>(raw, count, 0x7f800000u);
  if (dtype == "F16") return any_exponent_all_ones<uint16_t>(raw, count, 0x7c00u);
  return any_exponent_all_ones<uint16_t>(raw, count, 0x7f80u);  // BF16
}

constexpr uint64_t kChunkBytes = uint64_t{1} << 20;  // stays in cache between read and use

}  // namespace

void SafetensorsReader::read_values(const SafetensorsSpan& s, uint64_t first, uint64_t count,
                                    double* out) const {
  const std::string where = path_ + " [" + s.key + "]";
  if (first > s.count || count > s.count - first)
    throw InternalError("read_values: elements [" + std::to_string(first) + ", +" +
                        std::to_string(count) + ") outside " + where);
  const InputFile in(path_, where);
  const uint64_t esize = static_cast<uint64_t>(s.element_size);
  if (std::endian::native == std::endian::little && (s.dtype == "F64" || s.dtype == "F32")) {
    // Straight into the output: F32 into the upper half of the doubles' storage, widened
    // front to back (value i is written to bytes [8i, 8i+8), never past float i+1 at byte
    // 4*count + 4i + 4).
    char* base = reinterpret_cast<char*>(out);
    char* dst = s.dtype == "F64" ? base : base + 4 * count;
    in.read(dst, esize * count, s.offset + esize * first);
    if (s.dtype == "F32") decode("F32", dst, count, out);
    return;
  }
  std::vector<char> raw(std::min<uint64_t>(kChunkBytes, esize * count));
  const uint64_t per_chunk = raw.size() / esize;
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(per_chunk, count - done);
    in.read(raw.data(), esize * n, s.offset + esize * (first + done));
    decode(s.dtype, raw.data(), n, out + done);
    done += n;
  }
}

void SafetensorsReader::read_raw(const SafetensorsSpan& s, uint64_t first, uint64_t count,
                                 char* out) const {
  const std::string where = path_ + " [" + s.key + "]";
  if (first > s.count || count > s.count - first)
    throw InternalError("read_raw: elements [" + std::to_string(first) + ", +" +
                        std::to_string(count) + ") outside " + where);
  const uint64_t esize = static_cast<uint64_t>(s.element_size);
  InputFile(path_, where).read(out, esize * count, s.offset + esize * first);
}

std::optional<SafetensorsNonFinite> SafetensorsReader::first_non_finite(
    const SafetensorsSpan& s) const {
  const InputFile in(path_, path_ + " [" + s.key + "]");
  const uint64_t esize = static_cast<uint64_t>(s.element_size);
  std::vector<char> raw(std::min<uint64_t>(kChunkBytes, std::max<uint64_t>(esize * s.count, 1)));
  const uint64_t per_chunk = raw.size() / esize;
  for (uint64_t done = 0; done < s.count;) {
    const uint64_t n = std::min(per_chunk, s.count - done);
    in.read(raw.data(), esize * n, s.offset + esize * done);
    if (chunk_has_non_finite(s.dtype, raw.data(), n)) {
      for (uint64_t i = 0; i < n; ++i) {
        double v;
        decode(s.dtype, raw.data() + esize * i, 1, &v);
        if (!std::isfinite(v)) return SafetensorsNonFinite{done + i, v};
      }
    }
    done += n;
  }
  return std::nullopt;
}

SafetensorsTensor SafetensorsReader::read(const std::string& key) const {
  const SafetensorsSpan s = span(key);
  SafetensorsTensor t;
  t.shape = s.shape;
  t.values.resize(s.count);
  read_values(s, 0, s.count, t.values.data());
  return t;
}

SafetensorsTensor read_safetensors_tensor(const std::string& path, const std::string& key) {
  return SafetensorsReader(path).read(key);
}

void write_safetensors(const std::string& path,
                       const std::map<std::string, SafetensorsEntry>& tensors) {
  std::vector<SafetensorsWriter::Tensor> layout;
  for (const auto& [key, t] : tensors) {
    if (static_cast<int64_t>(t.values.size()) != numel(t.shape))
      throw ModelError(path, "tensor '" + key + "' has " + std::to_string(t.values.size()) +
                                 " values but shape " + to_string(t.shape));
    layout.push_back({key, t.shape, t.dtype});
  }
  SafetensorsWriter out(path, std::move(layout));
  for (const auto& [key, t] : tensors) out.append(t.values.data(), t.values.size());
  out.commit();
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<Tensor> layout,
                                     bool finite_only)
    : layout_(std::move(layout)), file_(path), finite_only_(finite_only), buffer_(kChunkBytes) {
  // The header first (offsets follow from the shapes and dtypes).
  nlohmann::json header = nlohmann::json::object();
  uint64_t data_size = 0;
  for (const Tensor& t : layout_) {
    if (t.key == "__metadata__") throw ModelError(path, "'__metadata__' is not a tensor name");
    if (header.contains(t.key)) throw ModelError(path, "tensor '" + t.key + "' is listed twice");
    const uint64_t begin = data_size;
    data_size += (t.dtype == SafetensorsDType::f64 ? 8 : 4) * static_cast<uint64_t>(numel(t.shape));
    nlohmann::json& entry = header[t.key];
    entry["dtype"] = t.dtype == SafetensorsDType::f64 ? "F64" : "F32";
    entry["shape"] = t.shape;
    entry["data_offsets"] = std::vector<uint64_t>{begin, data_size};
  }
  std::string head = header.dump();
  head.append((8 - head.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  std::string prefix;
  store_le(prefix, head.size(), 8);
  prefix += head;
  file_.write(prefix);
  while (tensor_ < layout_.size() && numel(layout_[tensor_].shape) == 0) ++tensor_;
}

void SafetensorsWriter::flush() {
  file_.write(std::string_view(buffer_.data(), used_));
  used_ = 0;
}

template <class V>
void SafetensorsWriter::append_values(const V* values, size_t count) {
  while (count > 0) {
    if (tensor_ >= layout_.size())
      throw ModelError(file_.path(), "more values than the tensors of the file hold");
    const Tensor& t = layout_[tensor_];
    const bool f32 = t.dtype == SafetensorsDType::f32;
    const size_t esize = f32 ? 4 : 8;
    if (used_ + esize > buffer_.size()) flush();
    const uint64_t left = static_cast<uint64_t>(numel(t.shape)) - written_;
    const size_t n = static_cast<size_t>(
        std::min<uint64_t>({count, left, (buffer_.size() - used_) / esize}));
    char* out = buffer_.data() + used_;
    // Store first, then test the stored words (two plain loops that vectorize).
    constexpr bool little = std::endian::native == std::endian::little;
    bool bad;
    if (f32) {
      if constexpr (little && std::is_same_v<V, float>) {
        std::memcpy(out, values, 4 * n);
      } else {
        for (size_t i = 0; i < n; ++i) {
          uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(values[i]));
          if constexpr (!little) bits = swap_bytes(bits);
          std::memcpy(out + 4 * i, &bits, 4);
        }
      }
      bad = finite_only_ && any_exponent_all_ones<uint32_t>(out, n, 0x7f800000u);
    } else {
      if constexpr (little && std::is_same_v<V, double>) {
        std::memcpy(out, values, 8 * n);
      } else {
        for (size_t i = 0; i < n; ++i) {
          uint64_t bits = std::bit_cast<uint64_t>(static_cast<double>(values[i]));
          if constexpr (!little) bits = swap_bytes(bits);
          std::memcpy(out + 8 * i, &bits, 8);
        }
      }
      bad = finite_only_ && any_exponent_all_ones<uint64_t>(out, n, 0x7ff0000000000000ull);
    }
    if (bad)
      for (size_t i = 0; i < n; ++i) {
        const double stored = f32 ? double(static_cast<float>(values[i])) : double(values[i]);
        if (!std::isfinite(stored))
          throw ModelError(file_.path(),
                           "tensor '" + t.key + "': value " + std::to_string(values[i]) +
                               " at flat index " + std::to_string(written_ + i) + " is not finite" +
                               (f32 ? " as F32 (beyond the float range?)" : ""));
      }
    used_ += n * esize;
    written_ += n;
    values += n;
    count -= n;
    if (written_ == static_cast<uint64_t>(numel(t.shape))) {
      written_ = 0;
      ++tensor_;
      while (tensor_ < layout_.size() && numel(layout_[tensor_].shape) == 0) ++tensor_;
    }
  }
}

void SafetensorsWriter::append(const double* values, size_t count) {
  append_values(values, count);
}

void SafetensorsWriter::append(const float* values, size_t count) {
  append_values(values, count);
}

void SafetensorsWriter::commit(bool sync) { finish().commit(sync); }

AtomicFileWriter& SafetensorsWriter::finish() {
  if (tensor_ < layout_.size())
    throw InternalError("SafetensorsWriter: tensor '" + layout_[tensor_].key + "' of " +
                        file_.path() + " got " + std::to_string(written_) + " of " +
                        std::to_string(numel(layout_[tensor_].shape)) + " values");
  flush();
  return file_;
}

}  // namespace lnv
