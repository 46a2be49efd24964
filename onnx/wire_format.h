// Private to lnv_onnx. Protobuf's wire format walked by hand, for single-file models whose
// weights are too large to hold twice: the reader leaves large raw_data in the mapped file
// (strip_raw_data) and the fold writer puts it back while it writes (splice_raw_data), so
// neither parses nor builds a ModelProto holding the weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "onnx/onnx_model.h"

namespace lnv::onnx_import {

// The file mapped read-only: only the pages a wire walk touches are read. Throws
// lnv::ModelError when the file cannot be opened or is 2 GiB or more.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const char* data() const { return data_ ? data_ : ""; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// One field of a message: [begin, end) spans tag and value; for a length-delimited field
// `payload` holds its bytes.
struct WireField {
  uint64_t number = 0;
  int wire_type = 0;
  const char* begin = nullptr;
  const char* end = nullptr;
  std::string_view payload;
};

void write_varint(std::string& out, uint64_t v);
void append_bytes_field(std::string& out, uint64_t number, std::string_view bytes);
// The fields of one message, or nullopt when its bytes do not parse.
std::optional<std::vector<WireField>> wire_fields(std::string_view msg);

// raw_data of this many bytes or more is left in the model file by load_onnx.
constexpr uint64_t kLeaveInFileBytes = uint64_t{1} << 16;

// The model's bytes with the raw_data of every initializer of the main graph
// (ModelProto.graph 7, GraphProto.initializer 5) of `min_bytes` or more left in the file:
// the tensor says external data at `location` (the model file's name), at its raw_data's
// offset in the file, and `left` records it by name (file and type unset). nullopt when
// there is none (or the bytes are not a ModelProto: protobuf then says so).
std::optional<std::string> strip_raw_data(const MappedFile& file, const std::string& location,
                                          std::map<std::string, StoredData>& left,
                                          uint64_t min_bytes = kLeaveInFileBytes);

// A message as pieces to write in order: bytes, and the raw_data of an initializer that
// its writer streams in (`tensor` names it; `size` bytes).
struct SplicedPiece {
  std::string bytes;
  std::string tensor;  // empty: `bytes` is the piece
  uint64_t size = 0;
};
struct SplicedMessage {
  std::vector<SplicedPiece> pieces;
  uint64_t size = 0;
};

// `model`, a serialized ModelProto, with raw_data (TensorProto field 9) of `raw_sizes[name]`
// bytes given to each main-graph initializer named there, placed where protobuf's
// serializer puts it (fields in number order), so that writing the pieces yields the bytes
// SerializeToString gives for the model holding that data. Initializers not named keep
// their bytes. Throws lnv::InternalError when the bytes do not parse or a named
// initializer already holds raw_data.
SplicedMessage splice_raw_data(std::string_view model,
                               const std::map<std::string, uint64_t>& raw_sizes);

}  // namespace lnv::onnx_import
