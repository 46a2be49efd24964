#include "core/safetensors.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/error.h"
#include "core/file_io.h"

namespace lnv {
namespace {

uint64_t load_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
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
    throw ModelError(path, what + ": expected a non-negative integer, got " + j.dump());
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
  try {
    header_ = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(path_, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header_.is_object())
    throw ModelError(path_, "header is not a JSON object (got " +
                                std::string(header_.type_name()) + ")");
  data_start_ = 8 + header_len;
  data_size_ = size - data_start_;
}

bool SafetensorsReader::has(const std::string& key) const {
  return key != "__metadata__" && header_.contains(key);
}

std::string SafetensorsReader::dtype(const std::string& key) const {
  if (!has(key)) return "";
  const nlohmann::json& e = header_.at(key);
  if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string()) return "";
  return e["dtype"].get<std::string>();
}

std::vector<std::string> SafetensorsReader::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : header_.items())
    if (k != "__metadata__") out.push_back(k);
  return out;
}

SafetensorsTensor SafetensorsReader::read(const std::string& key) const {
  if (!has(key)) {
    std::string known;
    for (const std::string& k : keys()) known += (known.empty() ? "'" : ", '") + k + "'";
    throw ModelError(path_, "no tensor '" + key + "' in the file (it holds " +
                                (known.empty() ? std::string("none") : known) + ")");
  }
  const std::string where = path_ + " [" + key + "]";
  const nlohmann::json& e = header_.at(key);
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
      !e.contains("data_offsets"))
    throw ModelError(where, "expected an object with dtype, shape and data_offsets, got " +
                                e.dump());
  if (!e["dtype"].is_string()) throw ModelError(where, "dtype: expected a string");
  const std::string dtype = e["dtype"].get<std::string>();
  const int esize = dtype_size(dtype);
  if (esize == 0)
    throw ModelError(where, "unsupported dtype '" + dtype + "' (expected F64, F32, F16 or BF16)");
  if (!e["shape"].is_array()) throw ModelError(where, "shape: expected an array");
  SafetensorsTensor t;
  uint64_t count = 1;
  for (const auto& d : e["shape"]) {
    const uint64_t dim = nonnegative_int(d, where, "shape");
    if (dim != 0 && count > (uint64_t{1} << 60) / dim)
      throw ModelError(where, "shape " + e["shape"].dump() + " is impossibly large");
    t.shape.push_back(static_cast<int64_t>(dim));
    count *= dim;
  }
  const nlohmann::json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    throw ModelError(where, "data_offsets: expected [begin, end], got " + off.dump());
  const uint64_t begin = nonnegative_int(off[0], where, "data_offsets");
  const uint64_t end = nonnegative_int(off[1], where, "data_offsets");
  if (begin > end)
    throw ModelError(where, "data_offsets [" + std::to_string(begin) + ", " +
                                std::to_string(end) + "] begin after they end");
  if (end - begin != count * esize)
    throw ModelError(where, "data_offsets [" + std::to_string(begin) + ", " +
                                std::to_string(end) + "] span " + std::to_string(end - begin) +
                                " bytes, but shape " + to_string(t.shape) + " of " + dtype +
                                " needs " + std::to_string(count * esize));
  if (end > data_size_)
    throw ModelError(where, "data_offsets [" + std::to_string(begin) + ", " +
                                std::to_string(end) + "] reach beyond the data section (" +
                                std::to_string(data_size_) +
                                " bytes): the file is truncated or the offsets are wrong");
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + begin));
  if constexpr (std::endian::native == std::endian::little) {
    // F64 and F32 are read straight into the values (no staging buffer): F32 into the
    // upper half of the doubles' storage, widened front to back (value i is written to
    // bytes [8i, 8i+8), never past float i+1 at byte 4*count + 4i + 4).
    if (dtype == "F64" || dtype == "F32") {
      t.values.resize(count);
      char* base = reinterpret_cast<char*>(t.values.data());
      char* dst = dtype == "F64" ? base : base + 4 * count;
      in.read(dst, static_cast<std::streamsize>(end - begin));
      if (!in) throw ModelError(where, "cannot read the tensor data (file truncated?)");
      if (dtype == "F32")
        for (uint64_t i = 0; i < count; ++i) {
          float f;
          std::memcpy(&f, dst + 4 * i, 4);
          t.values[i] = f;
        }
      return t;
    }
  }
  std::string raw(end - begin, '\0');
  in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  if (!in) throw ModelError(where, "cannot read the tensor data (file truncated?)");
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
  t.values.resize(count);
  auto convert = [&](auto decode) {
    for (uint64_t i = 0; i < count; ++i, p += esize) t.values[i] = decode(load_le(p, esize));
  };
  if (dtype == "F64")
    convert([](uint64_t bits) { return std::bit_cast<double>(bits); });
  else if (dtype == "F32")
    convert([](uint64_t bits) -> double {
      return std::bit_cast<float>(static_cast<uint32_t>(bits));
    });
  else if (dtype == "F16")
    convert([](uint64_t bits) { return half_to_double(static_cast<uint16_t>(bits)); });
  else
    convert([](uint64_t bits) { return bf16_to_double(static_cast<uint16_t>(bits)); });
  return t;
}

SafetensorsTensor read_safetensors_tensor(const std::string& path, const std::string& key) {
  return SafetensorsReader(path).read(key);
}

void write_safetensors(const std::string& path,
                       const std::map<std::string, SafetensorsEntry>& tensors) {
  // The header first (offsets follow from the shapes), then one buffer of the exact size.
  nlohmann::json header = nlohmann::json::object();
  uint64_t data_size = 0;
  for (const auto& [key, t] : tensors) {
    if (key == "__metadata__") throw ModelError(path, "'__metadata__' is not a tensor name");
    if (static_cast<int64_t>(t.values.size()) != numel(t.shape))
      throw ModelError(path, "tensor '" + key + "' has " + std::to_string(t.values.size()) +
                                 " values but shape " + to_string(t.shape));
    const uint64_t begin = data_size;
    data_size += (t.dtype == SafetensorsDType::f64 ? 8 : 4) * t.values.size();
    nlohmann::json& entry = header[key];
    entry["dtype"] = t.dtype == SafetensorsDType::f64 ? "F64" : "F32";
    entry["shape"] = t.shape;
    entry["data_offsets"] = std::vector<uint64_t>{begin, data_size};
  }
  std::string head = header.dump();
  head.append((8 - head.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  std::string prefix;
  store_le(prefix, head.size(), 8);
  prefix += head;
  const size_t total = prefix.size() + data_size;
  std::unique_ptr<char[]> bytes(new char[total]);  // not zero-filled: every byte is written
  std::memcpy(bytes.get(), prefix.data(), prefix.size());
  char* out = bytes.get() + prefix.size();
  for (const auto& [key, t] : tensors) {
    if (t.dtype == SafetensorsDType::f64) {
      for (double v : t.values) {
        const uint64_t bits = std::bit_cast<uint64_t>(v);
        if constexpr (std::endian::native == std::endian::little) {
          std::memcpy(out, &bits, 8);
          out += 8;
        } else {
          for (int b = 0; b < 8; ++b) *out++ = static_cast<char>((bits >> (8 * b)) & 0xff);
        }
      }
    } else {
      for (double v : t.values) {
        const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(v));
        if constexpr (std::endian::native == std::endian::little) {
          std::memcpy(out, &bits, 4);
          out += 4;
        } else {
          for (int b = 0; b < 4; ++b) *out++ = static_cast<char>((bits >> (8 * b)) & 0xff);
        }
      }
    }
  }
  write_file_atomically(path, std::string_view(bytes.get(), total));
}

}  // namespace lnv
