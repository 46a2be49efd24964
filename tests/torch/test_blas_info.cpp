// detect_blas() finds the library LibTorch's matrix products really go through.
#include <dlfcn.h>

#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "torch/blas_info.h"

namespace lnv::torch {
namespace {

TEST(BlasInfo, FindsTheLibraryThatProvidesSgemm) {
  // A product large enough to go to BLAS, so the library is certainly in use.
  const at::Tensor a = at::ones({64, 64}), b = at::ones({64, 64});
  EXPECT_EQ(at::mm(a, b)[3][5].item<float>(), 64.0f);

  const BlasInfo info = detect_blas();
  ASSERT_NE(info.kind, BlasKind::not_loaded);
  ASSERT_FALSE(info.library_path.empty());
  EXPECT_EQ(info.library_path.front(), '/');

  Dl_info where{};
  ASSERT_NE(dladdr(dlsym(RTLD_DEFAULT, "sgemm_"), &where), 0);
  EXPECT_EQ(info.loaded_as, where.dli_fname);
  EXPECT_GE(info.aten_threads, 1);
}

TEST(BlasInfo, WarnsExactlyWhenTheBlasIsNotAnOptimizedOne) {
  const BlasInfo info = detect_blas();
  const bool optimized = info.kind == BlasKind::openblas || info.kind == BlasKind::blis ||
                         info.kind == BlasKind::mkl;
  EXPECT_EQ(blas_warning(info).empty(), optimized) << describe(info);

  BlasInfo reference = info;
  reference.kind = BlasKind::reference;
  reference.library_path = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";
  const std::string warning = blas_warning(reference);
  EXPECT_NE(warning.find("WARNING"), std::string::npos);
  EXPECT_NE(warning.find("update-alternatives"), std::string::npos);
}

TEST(BlasInfo, DescribeNamesKindPathAndThreads) {
  BlasInfo info;
  info.kind = BlasKind::openblas;
  info.config = "OpenBLAS 0.3.21";
  info.loaded_as = "/lib/libblas.so.3";
  info.library_path = "/usr/lib/openblas-openmp/libblas.so.3";
  info.blas_threads = 2;
  info.aten_threads = 2;
  const std::string line = describe(info);
  for (const char* part : {"OpenBLAS 0.3.21", "/usr/lib/openblas-openmp/libblas.so.3",
                           "via /lib/libblas.so.3", "2 BLAS threads", "2 ATen"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " in: " << line;
}

}  // namespace
}  // namespace lnv::torch
