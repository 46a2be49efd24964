// A protobuf-free view of an ONNX model, and the reader that fills it.
//
// Only plain C++ types here: ONNX's and protobuf's headers stay inside onnx/*.cpp, so a
// target that reads ONNX files never sees them (the wall Alive2 keeps around Z3).
// Errors in the file are lnv::ModelError naming the file and the node (as the file
// spells it), initializer or input; an ONNX checker failure is shown as the checker
// words it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/progress.h"

namespace lnv::onnx_import {

// ONNX's TensorProto.DataType numbering, so a value read from a file is its own name.
enum class ElemType : int32_t {
  Undefined = 0,
  Float = 1,
  Uint8 = 2,
  Int8 = 3,
  Uint16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  Uint32 = 12,
  Uint64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
};

const char* elem_type_name(ElemType t);
bool is_float_type(ElemType t);    // Float, Float16, BFloat16, Double
// The significand bits of a float type: Float 24, Double 53, Float16 11, BFloat16 8 (53 for others).
int significand_bits(ElemType t);
bool is_integer_type(ElemType t);  // signed/unsigned ints up to 32 bits, Int64, Uint32, Bool
// The element types a Tensor can hold: the float types and the integer types above.
bool is_supported_type(ElemType t);

// Where the data of a tensor left undecoded on load lie: `length` bytes at `offset` in
// `file` (an external data file, or the model file itself), little-endian `type`.
// `where` names the tensor ("<file>: initializer 'x'") for errors on reading.
struct StoredData {
  std::filesystem::path file;
  int64_t offset = 0;
  int64_t length = 0;
  ElemType type = ElemType::Float;
  std::string where;
};

// A dense row-major tensor. Float types keep their values in `floats` (each value exact:
// float16/bfloat16/float32 are subsets of double); integer and bool types in `ints`
// (bool as 0/1, never as floats). Exactly one of the two vectors is used — but for a
// large float initializer, whose data load_onnx leaves in its file: `stored` says where,
// `floats` stays empty, and stored_floats() reads them when they are needed.
struct Tensor {
  ElemType type = ElemType::Float;
  std::vector<int64_t> dims;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::shared_ptr<const StoredData> stored;

  int64_t numel() const;  // throws lnv::ModelError (no place) on a negative dim or overflow
  bool is_float() const { return is_float_type(type); }
};

// The float values of `t` as the file holds them (infinities and NaNs included, as for a
// tensor decoded on load): `floats`, or its stored data read and decoded. Throws
// lnv::ModelError naming the tensor when the file no longer holds them.
std::vector<double> stored_floats(const Tensor& t);
// stored_floats(t), refusing an infinity or a NaN: a ModelError naming the tensor (its
// stored location's name, else `where`) and the flat index.
std::vector<double> finite_floats(const Tensor& t, const std::string& where);
// Reads the stored data of `t` into `floats` and clears `stored` (nothing when not stored).
void load_stored(Tensor& t);

// A sparse tensor attribute or Constant value: `values` ([NNZ]) at `indices` ([NNZ] linear
// or [NNZ, rank]) in a tensor of `dims`.
struct SparseTensor {
  Tensor values;
  Tensor indices;
  std::vector<int64_t> dims;
};

// One dimension of a declared shape: a value, a named symbol, or neither (unknown).
struct Dim {
  std::optional<int64_t> value;
  std::string param;
};

// A graph input, output or value_info entry. `shape` is absent when the file gives no
// rank; `type` is Undefined for non-tensor types (sequences, maps, optionals).
struct ValueInfo {
  std::string name;
  ElemType type = ElemType::Undefined;
  std::optional<std::vector<Dim>> shape;
  std::string doc_string;

  // The dims when every one is a value.
  std::optional<std::vector<int64_t>> static_dims() const;
};

struct Graph;

enum class AttrKind {
  Float, Int, String, Tensor, Graph, SparseTensor, TypeProto,
  Floats, Ints, Strings, Tensors, Graphs, SparseTensors, TypeProtos,
};

struct Attribute {
  std::string name;
  AttrKind kind = AttrKind::Int;
  double f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  SparseTensor sparse;
  std::string type_proto;  // a TypeProto in text (ONNX's text form of a type), for display
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  std::vector<SparseTensor> sparse_tensors;
  std::vector<std::string> type_protos;
  std::string ref_attr_name;  // set inside functions: refers to the caller's attribute
  std::string doc_string;
};

struct Node {
  std::string name;  // as the file spells it; may be empty
  std::string op_type;
  std::string domain;  // "" for the default ONNX domain
  std::vector<std::string> inputs;  // "" marks an omitted optional input
  std::vector<std::string> outputs;
  std::vector<Attribute> attributes;
  std::string doc_string;

  const Attribute* attr(const std::string& attr_name) const;
  // "node 'name' (Op)" or "node #index (Op)" for unnamed nodes: how errors name it.
  std::string describe(size_t index) const;
};

struct Initializer {
  std::string name;
  Tensor value;
};

struct Graph {
  std::string name;
  std::vector<ValueInfo> inputs;
  std::vector<ValueInfo> outputs;
  std::vector<ValueInfo> value_info;  // after load: ONNX shape inference's results too
  std::vector<Initializer> initializers;
  std::vector<Node> nodes;  // in the file's (topological) order
  std::string doc_string;

  const Initializer* initializer(const std::string& value_name) const;
};

struct OpsetImport {
  std::string domain;  // "" for the default ONNX domain
  int64_t version = 0;
};

struct Model {
  std::filesystem::path path;  // the file it was read from
  int64_t ir_version = 0;
  std::vector<OpsetImport> opset_imports;
  std::string producer_name, producer_version, domain, doc_string;
  int64_t model_version = 0;
  std::vector<std::pair<std::string, std::string>> metadata;
  Graph graph;

  // The opset version imported for `domain` ("" and "ai.onnx" are the same), 0 if none.
  int64_t opset(const std::string& domain) const;
};

// Symbolic dims of the graph inputs, bound by name (`--dim batch=1`).
using DimBindings = std::map<std::string, int64_t>;

// Reads `path`: parses it, runs ONNX's checker, binds every symbolic input dim from
// `dims`, runs ONNX shape inference (its results land in graph.value_info) and decodes
// every initializer (raw_data, typed fields, or external data files beside the model) —
// but float initializers over 4096 elements stored as raw_data or external data, whose
// bytes stay in their file (Tensor::stored; their location, size and bounds are checked
// here). In a single-file model such raw_data never reaches protobuf: a walk over the
// wire format hands protobuf the model without them (docs/onnx.md, "Reading lazily").
// Throws lnv::ModelError when the file is 2 GiB or more (protobuf's limit), is not a valid
// ONNX model, a graph input has an unnamed or unbound symbolic dim, or a tensor's data is
// malformed, missing or unsupported. `progress` hears the steps: "parse model", "check
// model", "infer shapes" (no count), "decode initializers" (over initializers).
Model load_onnx(const std::filesystem::path& path, const DimBindings& dims = {},
                const ProgressFn& progress = {});

// The same for a serialized ModelProto held in memory (an exporter's output): `name` stands
// for the file in errors and in Model::path. Initializers with external data are refused.
Model load_onnx_bytes(std::string_view bytes, const std::string& name,
                      const DimBindings& dims = {});

// The symbolic dims (dim_param) of the graph inputs of the ONNX file at `path` (those
// without an initializer of the same name), each once, in the order the inputs use them.
// Only the graph's inputs and initializer names are read (no tensor data, no checker).
// nullopt when the file cannot be read or does not parse (load_onnx says why).
std::optional<std::vector<std::string>> input_dim_symbols(const std::filesystem::path& path);

// The bytes of an ONNX file, refused (a ModelError naming the file) when unreadable or 2 GiB
// or more: protobuf's limit for one message, so files that large keep external data.
std::string read_onnx_bytes(const std::filesystem::path& path);

// Reads one serialized TensorProto (ONNX's test_data_set_*/input_0.pb); errors name the
// file.
Tensor load_tensor_pb(const std::filesystem::path& path);

// Writes `model` as a .onnx file (initializers inline, as raw_data).
void save_onnx(const Model& model, const std::filesystem::path& path);

// Every value whose shape is fully static: graph inputs, value_info and outputs with
// static dims, and initializers.
std::map<std::string, std::vector<int64_t>> static_shapes(const Graph& graph);

// Runs ONNX shape inference over `model` again (after a rewrite such as constant
// folding) and replaces graph.value_info and the outputs' types with its results. Float
// initializers over 4096 elements are passed without their data (inference needs the
// values of small ones only, such as Resize's scales).
void infer_shapes(Model& model);

}  // namespace lnv::onnx_import
