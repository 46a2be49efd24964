#include "onnx/wire_format.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

namespace lnv::onnx_import {

namespace fs = std::filesystem;

MappedFile::MappedFile(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ModelError(path.string(), "cannot open the file");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ModelError(path.string(), "not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ >= (size_t{2} << 30)) {
    ::close(fd);
    throw ModelError(path.string(),
                     "the file is " + std::to_string(size_) + " bytes, 2 GiB or more: over "
                     "protobuf's limit for one message, so an ONNX model that large keeps "
                     "its weights in external data files");
  }
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw ModelError(path.string(), "cannot read the file");
    }
    data_ = static_cast<const char*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

namespace {

bool read_varint(const char*& p, const char* end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end) return false;
    const auto b = static_cast<uint8_t>(*p++);
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// The next field at `p`, or false at the end of [p, end) or on bytes that are not the
// wire format (protobuf then reports the file).
bool next_field(const char*& p, const char* end, WireField& f) {
  if (p == end) return false;
  f.begin = p;
  uint64_t tag = 0;
  if (!read_varint(p, end, tag)) return false;
  f.number = tag >> 3;
  f.wire_type = static_cast<int>(tag & 7);
  uint64_t v = 0;
  switch (f.wire_type) {
    case 0: if (!read_varint(p, end, v)) return false; break;
    case 1: if (end - p < 8) return false; p += 8; break;
    case 5: if (end - p < 4) return false; p += 4; break;
    case 2:
      if (!read_varint(p, end, v) || v > uint64_t(end - p)) return false;
      f.payload = std::string_view(p, static_cast<size_t>(v));
      p += v;
      break;
    default: return false;  // groups: not in ONNX
  }
  f.end = p;
  return true;
}

// Field numbers of onnx.proto: ModelProto.graph 7, GraphProto.initializer 5; TensorProto
// name 8, raw_data 9, external_data 13, data_location 14 (EXTERNAL = 1).
constexpr uint64_t kModelGraph = 7, kGraphInitializer = 5, kTensorName = 8, kTensorRawData = 9,
                   kTensorExternalData = 13, kTensorDataLocation = 14;
constexpr uint64_t kExternal = 1;

// A tensor whose raw_data is `min_bytes` or more becomes external data at `location` (the
// model file), its raw_data's offset in the file; `left` records it by name.
std::optional<std::string> leave_raw_data(std::string_view tensor, const char* file_begin,
                                          const std::string& location,
                                          std::map<std::string, StoredData>& left,
                                          uint64_t min_bytes) {
  const auto fields = wire_fields(tensor);
  if (!fields) return std::nullopt;
  const WireField* raw = nullptr;
  std::string name;
  for (const WireField& f : *fields) {
    if (f.number == kTensorExternalData || f.number == kTensorDataLocation)
      return std::nullopt;  // already external
    if (f.number == kTensorRawData && f.wire_type == 2) raw = &f;
    if (f.number == kTensorName && f.wire_type == 2) name = std::string(f.payload);
  }
  if (!raw || raw->payload.size() < min_bytes || left.count(name)) return std::nullopt;
  std::string out;
  for (const WireField& f : *fields)
    if (&f != raw) out.append(f.begin, f.end);
  const int64_t offset = raw->payload.data() - file_begin;
  const int64_t length = static_cast<int64_t>(raw->payload.size());
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"location", location},
                                   {"offset", std::to_string(offset)},
                                   {"length", std::to_string(length)}}) {
    std::string entry;
    append_bytes_field(entry, 1, key);
    append_bytes_field(entry, 2, value);
    append_bytes_field(out, kTensorExternalData, entry);
  }
  write_varint(out, kTensorDataLocation << 3 | 0);
  write_varint(out, kExternal);
  left[name] = StoredData{{}, offset, length, ElemType::Undefined, ""};
  return out;
}

// The message with its length-delimited field `number` replaced by `rewrite(payload)`
// where that gives a value; nullopt when nothing changed or the bytes do not parse.
template <class Rewrite>
std::optional<std::string> rewrite_fields(std::string_view msg, uint64_t number, Rewrite rewrite) {
  const auto fields = wire_fields(msg);
  if (!fields) return std::nullopt;
  std::string out;
  bool changed = false;
  for (const WireField& f : *fields) {
    std::optional<std::string> sub;
    if (f.number == number && f.wire_type == 2) sub = rewrite(f.payload);
    if (sub) {
      append_bytes_field(out, number, *sub);
      changed = true;
    } else {
      out.append(f.begin, f.end);
    }
  }
  if (!changed) return std::nullopt;
  return out;
}

void add_bytes(SplicedMessage& m, std::string_view bytes) {
  if (m.pieces.empty() || !m.pieces.back().tensor.empty()) m.pieces.push_back({});
  m.pieces.back().bytes.append(bytes);
  m.size += bytes.size();
}

// `sub` as length-delimited field `number` of `m`.
void add_message(SplicedMessage& m, uint64_t number, SplicedMessage&& sub) {
  std::string header;
  write_varint(header, number << 3 | 2);
  write_varint(header, sub.size);
  add_bytes(m, header);
  for (SplicedPiece& p : sub.pieces) {
    if (p.tensor.empty()) {
      add_bytes(m, p.bytes);
    } else {
      m.size += p.size;
      m.pieces.push_back(std::move(p));
    }
  }
}

std::vector<WireField> fields_of(std::string_view msg, const char* what) {
  auto fields = wire_fields(msg);
  if (!fields) throw InternalError(std::string("splice_raw_data: the serialized ") + what + " does not parse");
  return std::move(*fields);
}

}  // namespace

void write_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void append_bytes_field(std::string& out, uint64_t number, std::string_view bytes) {
  write_varint(out, number << 3 | 2);
  write_varint(out, bytes.size());
  out.append(bytes);
}

std::optional<std::vector<WireField>> wire_fields(std::string_view msg) {
  std::vector<WireField> fields;
  const char* p = msg.data();
  const char* end = p + msg.size();
  WireField f;
  while (next_field(p, end, f)) fields.push_back(f);
  if (p != end) return std::nullopt;
  return fields;
}

std::optional<std::string> strip_raw_data(const MappedFile& file, const std::string& location,
                                          std::map<std::string, StoredData>& left,
                                          uint64_t min_bytes) {
  const std::string_view bytes(file.data(), file.size());
  return rewrite_fields(bytes, kModelGraph, [&](std::string_view graph) {
    return rewrite_fields(graph, kGraphInitializer, [&](std::string_view tensor) {
      return leave_raw_data(tensor, file.data(), location, left, min_bytes);
    });
  });
}

SplicedMessage splice_raw_data(std::string_view model,
                               const std::map<std::string, uint64_t>& raw_sizes) {
  // An initializer named in raw_sizes: its fields before raw_data, the raw_data's tag and
  // length, the data (a piece of its own), the fields after.
  auto tensor_with_data = [&](const std::vector<WireField>& fields, const std::string& name,
                              uint64_t size) {
    SplicedMessage t;
    bool placed = false;
    auto place = [&] {
      std::string header;
      write_varint(header, kTensorRawData << 3 | 2);
      write_varint(header, size);
      add_bytes(t, header);
      t.pieces.push_back({"", name, size});
      t.size += size;
      placed = true;
    };
    for (const WireField& f : fields) {
      if (f.number == kTensorRawData)
        throw InternalError("splice_raw_data: initializer '" + name + "' already holds raw_data");
      if (!placed && f.number > kTensorRawData) place();
      add_bytes(t, std::string_view(f.begin, size_t(f.end - f.begin)));
    }
    if (!placed) place();
    return t;
  };
  SplicedMessage out;
  for (const WireField& mf : fields_of(model, "model")) {
    if (mf.number != kModelGraph || mf.wire_type != 2) {
      add_bytes(out, std::string_view(mf.begin, size_t(mf.end - mf.begin)));
      continue;
    }
    SplicedMessage graph;
    for (const WireField& gf : fields_of(mf.payload, "graph")) {
      std::optional<std::pair<std::string, uint64_t>> named;
      std::vector<WireField> tensor;
      if (gf.number == kGraphInitializer && gf.wire_type == 2) {
        tensor = fields_of(gf.payload, "initializer");
        for (const WireField& tf : tensor)
          if (tf.number == kTensorName && tf.wire_type == 2)
            if (auto it = raw_sizes.find(std::string(tf.payload)); it != raw_sizes.end())
              named.emplace(it->first, it->second);
      }
      if (named)
        add_message(graph, kGraphInitializer, tensor_with_data(tensor, named->first, named->second));
      else
        add_bytes(graph, std::string_view(gf.begin, size_t(gf.end - gf.begin)));
    }
    add_message(out, kModelGraph, std::move(graph));
  }
  return out;
}

}  // namespace lnv::onnx_import
