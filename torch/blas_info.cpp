#include "torch/blas_info.h"

#include <dlfcn.h>

#include <climits>
#include <cstdlib>
#include <sstream>

#include <ATen/Parallel.h>

namespace lnv::torch {
namespace {

// A symbol of the library that provides `anchor`, looked up in that library only (so an
// OpenBLAS loaded for some other reason does not make the reference BLAS look fast).
void* symbol_of_same_library(void* handle, const char* name) {
  return handle ? dlsym(handle, name) : nullptr;
}

std::string resolved(const char* path) {
  char buf[PATH_MAX];
  return realpath(path, buf) ? std::string(buf) : std::string(path);
}

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

BlasInfo detect_blas() {
  BlasInfo info;
  info.aten_threads = at::get_num_threads();
  info.aten_interop_threads = at::get_num_interop_threads();

  void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info where{};
  if (!sgemm || !dladdr(sgemm, &where) || !where.dli_fname) {
    info.kind = BlasKind::not_loaded;
    return info;
  }
  info.loaded_as = where.dli_fname;
  info.library_path = resolved(where.dli_fname);

  // The library is already loaded: RTLD_NOLOAD only returns a handle to it.
  void* handle = dlopen(where.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  using IntFn = int (*)();
  using StrFn = char* (*)();
  if (auto get_config = reinterpret_cast<StrFn>(
          symbol_of_same_library(handle, "openblas_get_config"))) {
    info.kind = BlasKind::openblas;
    info.config = get_config();
    if (auto threads = reinterpret_cast<IntFn>(
            symbol_of_same_library(handle, "openblas_get_num_threads")))
      info.blas_threads = threads();
  } else if (auto version = reinterpret_cast<const char* (*)()>(
                 symbol_of_same_library(handle, "bli_info_get_version_str"))) {
    info.kind = BlasKind::blis;
    info.config = std::string("BLIS ") + version();
  } else if (auto threads = reinterpret_cast<IntFn>(
                 symbol_of_same_library(handle, "mkl_get_max_threads"))) {
    info.kind = BlasKind::mkl;
    info.blas_threads = threads();
  } else if (contains(info.library_path, "/blas/") ||
             contains(info.library_path, "librefblas")) {
    // Debian's netlib reference: /usr/lib/<triplet>/blas/libblas.so.3, which exports
    // only the BLAS interface itself.
    info.kind = BlasKind::reference;
    info.blas_threads = 1;
  }
  if (handle) dlclose(handle);
  return info;
}

const char* blas_kind_name(BlasKind k) {
  switch (k) {
    case BlasKind::openblas: return "OpenBLAS";
    case BlasKind::blis: return "BLIS";
    case BlasKind::mkl: return "MKL";
    case BlasKind::reference: return "reference BLAS (netlib)";
    case BlasKind::unknown: return "unrecognized BLAS";
    case BlasKind::not_loaded: return "no BLAS loaded";
  }
  return "?";
}

std::string describe(const BlasInfo& info) {
  std::ostringstream os;
  os << "BLAS: " << blas_kind_name(info.kind);
  if (!info.config.empty()) os << " [" << info.config << "]";
  if (!info.library_path.empty()) {
    os << " (" << info.library_path;
    if (info.loaded_as != info.library_path) os << " via " << info.loaded_as;
    os << ")";
  }
  if (info.blas_threads >= 0) os << ", " << info.blas_threads << " BLAS threads";
  os << ", " << info.aten_threads << " ATen intra-op threads";
  return os.str();
}

std::string blas_warning(const BlasInfo& info) {
  if (info.kind == BlasKind::openblas || info.kind == BlasKind::blis ||
      info.kind == BlasKind::mkl)
    return {};
  std::ostringstream os;
  os << "**********************************************************************\n"
     << "WARNING: LibTorch is running on " << blas_kind_name(info.kind);
  if (!info.library_path.empty()) os << " (" << info.library_path << ")";
  os << ".\n"
     << "Matrix products will be many times slower (~55x for a GPT-2 forward) and every\n"
     << "timing below is meaningless. Install an optimized BLAS and select it:\n"
     << "  apt-get install libopenblas0-openmp\n"
     << "  update-alternatives --set libblas.so.3-x86_64-linux-gnu \\\n"
     << "      /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3\n"
     << "  update-alternatives --set liblapack.so.3-x86_64-linux-gnu \\\n"
     << "      /usr/lib/x86_64-linux-gnu/openblas-openmp/liblapack.so.3\n"
     << "**********************************************************************\n";
  return os.str();
}

}  // namespace lnv::torch
