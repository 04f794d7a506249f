// Tensor maps for the TMA copies (see KokkosMLA_Tma.hpp). The driver's
// encoder is looked up through the runtime, so the library links no driver
// library of its own.

#include "cuda/sm90a/KokkosMLA_Tma.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <sstream>
#include <stdexcept>

namespace KokkosMLA {
namespace Impl {
namespace tma {

namespace {

static_assert(sizeof(CUtensorMap) == kMapWords * sizeof(std::uint64_t), "a map is 128 bytes");

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 found = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
#if CUDART_VERSION >= 12050
    const cudaError_t found =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &status);
#else  // the versioned lookup came with CUDA 12.5
    const cudaError_t found = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &status);
#endif
    if (found != cudaSuccess || status != cudaDriverEntryPointSuccess) f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return found;
}

std::string describe(const void* base, const TensorShape& s) {
  std::ostringstream o;
  o << "base " << base << ", " << s.element_bytes << "-byte elements, extents (";
  for (int d = 0; d < s.rank; ++d) o << (d ? ", " : "") << s.extents[d];
  o << "), byte strides (";
  for (int d = 1; d < s.rank; ++d) o << (d > 1 ? ", " : "") << s.byte_strides[d - 1];
  o << "), box (";
  for (int d = 0; d < s.rank; ++d) o << (d ? ", " : "") << s.box[d];
  return o.str() + ")";
}

}  // namespace

void encode(std::uint64_t* map, const void* base, const TensorShape& s) {
  const auto encode_tiled = encoder();
  if (!encode_tiled) throw std::runtime_error("KokkosMLA: the CUDA driver offers no cuTensorMapEncodeTiled");
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  if (s.element_bytes != 2 && s.element_bytes != 4)
    throw std::logic_error("KokkosMLA: TMA maps of " + std::to_string(s.element_bytes) + "-byte elements");
  const CUtensorMapDataType type = s.element_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT32;
  const CUresult r = encode_tiled(reinterpret_cast<CUtensorMap*>(map), type,
                                  cuuint32_t(s.rank), const_cast<void*>(base), s.extents, s.byte_strides, s.box,
                                  element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("KokkosMLA: the CUDA driver refused the tensor map of " + describe(base, s) +
                             " (CUresult " + std::to_string(int(r)) + ")");
}

}  // namespace tma
}  // namespace Impl
}  // namespace KokkosMLA
