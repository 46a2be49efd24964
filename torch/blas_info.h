// Which BLAS LibTorch really calls, and with how many threads.
//
// Debian's LibTorch calls BLAS through libblas.so.3, a symlink the alternatives system
// points at the reference BLAS (slow: ~55x slower than OpenBLAS for a GPT-2 forward) or
// at an optimized one (OpenBLAS, BLIS, MKL). This finds the shared object that provides
// `sgemm_` in the running process (dladdr, then realpath through the symlinks) and asks
// it what it is.
#pragma once

#include <string>

namespace lnv::torch {

enum class BlasKind { openblas, blis, mkl, reference, unknown, not_loaded };

struct BlasInfo {
  BlasKind kind = BlasKind::unknown;
  std::string loaded_as;     // the path the loader opened (e.g. .../libblas.so.3)
  std::string library_path;  // that path with every symlink resolved
  std::string config;        // openblas_get_config() / BLIS version, when available
  int blas_threads = -1;     // openblas_get_num_threads() etc.; -1: not reported
  int aten_threads = 0;      // at::get_num_threads()
  int aten_interop_threads = 0;
};

BlasInfo detect_blas();

const char* blas_kind_name(BlasKind k);

// One line: "BLAS: OpenBLAS 0.3.21 ... (/usr/lib/.../libblas.so.3), 2 BLAS threads,
// 2 ATen threads".
std::string describe(const BlasInfo& info);

// A multi-line, loud warning when LibTorch runs on the reference BLAS (or none / an
// unrecognized one), with the command that fixes it; empty when the BLAS is optimized.
std::string blas_warning(const BlasInfo& info);

}  // namespace lnv::torch
