// The ONNX spelling table (onnx/ops.def) read both ways: every op written as one ONNX node
// is read back as itself, every spelling a writer uses is one the importer reads, and the
// import table holds exactly the rows of the file.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "onnx/import.h"
#include "onnx/spellings.h"

using namespace lnv::onnx_import;
using lnv::Op;

namespace {

TEST(OnnxSpellings, AnOpWrittenAsOneNodeReadsBackAsItself) {
  int rows = 0;
#define LNV_ONNX_OP(op, OnnxOp, mapper)                                       \
  ++rows;                                                                     \
  EXPECT_STREQ(onnx_op_of(Op::op), #OnnxOp);                                  \
  EXPECT_EQ(lnv_op_of(#OnnxOp), std::optional<Op>(Op::op)) << #OnnxOp;        \
  EXPECT_TRUE(is_imported_op("", #OnnxOp)) << #OnnxOp;
#include "onnx/ops.def"
  EXPECT_GE(rows, 25);
}

TEST(OnnxSpellings, EveryWrittenSpellingIsRead) {
#define LNV_ONNX_WRITE(op, OnnxOp)                                    \
  EXPECT_STREQ(onnx_op_of(Op::op), #OnnxOp);                          \
  EXPECT_TRUE(is_imported_op("", #OnnxOp)) << #OnnxOp << " (" #op ")";
#define LNV_ONNX_RMS_STEP(step, OnnxOp)                               \
  EXPECT_STREQ(onnx_op_of(RmsStep::step), #OnnxOp);                   \
  EXPECT_TRUE(is_imported_op("", #OnnxOp)) << #OnnxOp << " (" #step ")";
#define LNV_ONNX_RMS_FUSED(rms_op, OnnxOp)                            \
  EXPECT_EQ(norm_op_of("", #OnnxOp), std::optional<Op>(Op::rms_norm)) \
      << "--rms-op " #rms_op " writes " #OnnxOp ", which must read back as an RMSNorm";
#include "onnx/ops.def"
}

TEST(OnnxSpellings, TheReadRowsAreTheImportTable) {
  std::set<std::string> read;
#define LNV_ONNX_OP(op, OnnxOp, mapper) EXPECT_TRUE(read.insert(#OnnxOp).second) << #OnnxOp " twice";
#define LNV_ONNX_READ_OP(op, OnnxOp, mapper) EXPECT_TRUE(read.insert(#OnnxOp).second) << #OnnxOp " twice";
#define LNV_ONNX_READ(OnnxOp, mapper) EXPECT_TRUE(read.insert(#OnnxOp).second) << #OnnxOp " twice";
#include "onnx/ops.def"
  for (const std::string& op : read) EXPECT_TRUE(is_imported_op("ai.onnx", op)) << op;
  EXPECT_EQ(lnv_op_of("Gelu"), std::optional<Op>(Op::gelu));
  EXPECT_FALSE(lnv_op_of("Gemm")) << "read, but not one to one";
  EXPECT_EQ(onnx_op_of(Op::gelu), nullptr) << "written as several nodes";
  EXPECT_FALSE(is_imported_op("", "NonMaxSuppression"));
  EXPECT_FALSE(is_imported_op("com.example", "Relu"));
#define LNV_ONNX_NORM(op, domain, OnnxOp)                                    \
  EXPECT_TRUE(is_imported_op(domain, #OnnxOp)) << domain << "." << #OnnxOp; \
  EXPECT_EQ(norm_op_of(domain, #OnnxOp), std::optional<Op>(Op::op));
#include "onnx/ops.def"
}

TEST(OnnxSpellings, UniqueNamesSuffixTakenOnes) {
  UniqueNames names;
  names.take("a");
  EXPECT_EQ(names.fresh("a"), "a.2");
  EXPECT_EQ(names.fresh("a"), "a.3");
  EXPECT_EQ(names.fresh("b"), "b");
  EXPECT_TRUE(names.taken("a.3"));
  EXPECT_FALSE(names.taken("c"));
}

}  // namespace
