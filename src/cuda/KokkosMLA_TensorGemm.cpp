// cuBLAS GEMMs on tensor cores with fp32 accumulation (see the header).

#include "impl/KokkosMLA_TensorGemm.hpp"

#if KOKKOSMLA_ENABLE_CUBLAS
#include <cublas_v2.h>

#include <climits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace KokkosMLA {
namespace Impl {

namespace {

/// One handle for the process, made on first use; cuBLAS handles are not safe
/// to re-point at another stream while a call on them is being issued, so
/// calls hold the mutex (the GEMMs themselves run asynchronously).
struct Handle {
  cublasHandle_t handle = nullptr;
  std::mutex mutex;
  Handle() {
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("KokkosMLA: cublasCreate failed");
  }
};

Handle& shared_handle() {
  static Handle h;  // left to the process's end: destroying it after CUDA's teardown is unsafe
  return h;
}

/// The shared handle, held (for as long as this lives) and pointed at exec's stream.
struct HandleOnStream {
  std::unique_lock<std::mutex> lock;
  cublasHandle_t handle;
  explicit HandleOnStream(const Kokkos::Cuda& exec)
      : lock(shared_handle().mutex), handle(shared_handle().handle) {
    if (cublasSetStream(handle, exec.cuda_stream()) != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("KokkosMLA: cublasSetStream failed");
  }
};

template <class T>
cudaDataType_t data_type();
template <>
cudaDataType_t data_type<float>() {
  return CUDA_R_32F;
}
template <>
cudaDataType_t data_type<double>() {
  return CUDA_R_64F;
}
#if KOKKOSMLA_HAS_HALF
template <>
cudaDataType_t data_type<Kokkos::Experimental::half_t>() {
  return CUDA_R_16F;
}
#endif
#if KOKKOSMLA_HAS_BHALF
template <>
cudaDataType_t data_type<Kokkos::Experimental::bhalf_t>() {
  return CUDA_R_16BF;
}
#endif

/// TF32 products for float with FloatGemm::Tf32; fp32 accumulation always
/// (fp64 for double).
template <class T>
cublasComputeType_t compute_type(FloatGemm float_gemm) {
  if (std::is_same<T, double>::value) return CUBLAS_COMPUTE_64F;
  return std::is_same<T, float>::value && float_gemm == FloatGemm::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                        : CUBLAS_COMPUTE_32F;
}

}  // namespace

template <class T>
void tensor_gemm(const Kokkos::Cuda& exec, std::int64_t rows, std::int64_t cols, std::int64_t inner,
                 const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc,
                 FloatGemm float_gemm) {
  require_int_gemm_extents(cols, inner, lda);
  require_int_gemm_extents(cols, inner, ldb);
  const HandleOnStream h(exec);
  // alpha and beta in the compute type: fp64 for double, fp32 otherwise.
  using Factor = std::conditional_t<std::is_same<T, double>::value, double, float>;
  const Factor one = 1, zero = 0;
  const cudaDataType_t type = data_type<T>();
  const cublasComputeType_t compute = compute_type<T>(float_gemm);
  // Row-major c = a b is column-major c^T = b^T a^T.
  for_int_row_pieces(rows, [&](std::int64_t r0, int m) {
    const cublasStatus_t status = cublasGemmEx(h.handle, CUBLAS_OP_N, CUBLAS_OP_N, int(cols), m, int(inner),
                                               &one, b, type, int(ldb), a + r0 * lda, type, int(lda), &zero,
                                               c + r0 * ldc, type, int(ldc), compute, CUBLAS_GEMM_DEFAULT);
    if (status != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("KokkosMLA: cublasGemmEx failed with status " + std::to_string(int(status)));
  });
}

template <class T>
void tensor_gemm_heads(const Kokkos::Cuda& exec, std::int64_t heads, std::int64_t rows, std::int64_t cols,
                       std::int64_t inner, HeadMatrices<const T> a, HeadMatrices<const T> b, bool transpose_b,
                       HeadMatrices<T> c, FloatGemm float_gemm, double alpha) {
  fit_single_row_strides(rows, cols, inner, transpose_b, a.ld, b.ld, c.ld);
  require_int_head_gemm_extents({heads, rows, cols, inner, a.ld, b.ld, c.ld});
  const HandleOnStream h(exec);
  using Factor = std::conditional_t<std::is_same<T, double>::value, double, float>;
  const Factor factor = Factor(alpha), zero = 0;
  const cudaDataType_t type = data_type<T>();
  // Row-major c = a op(b) is column-major c^T = op(b)^T a^T: b's rows are
  // column-major columns, so a transposed row-major b is an untransposed
  // column-major one and vice versa.
  const cublasStatus_t status = cublasGemmStridedBatchedEx(
      h.handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, int(cols), int(rows), int(inner),
      &factor, b.data, type, int(b.ld), b.step, a.data, type, int(a.ld), a.step, &zero, c.data, type,
      int(c.ld), c.step, int(heads), compute_type<T>(float_gemm), CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("KokkosMLA: cublasGemmStridedBatchedEx failed with status " +
                             std::to_string(int(status)));
}

template <class T>
void tensor_gemm_pointers(const Kokkos::Cuda& exec, std::int64_t count, std::int64_t rows, std::int64_t cols,
                          std::int64_t inner, const T* const* a, std::int64_t lda, const T* const* b,
                          std::int64_t ldb, bool transpose_b, T* const* c, std::int64_t ldc,
                          FloatGemm float_gemm) {
  fit_single_row_strides(rows, cols, inner, transpose_b, lda, ldb, ldc);
  require_int_head_gemm_extents({count, rows, cols, inner, lda, ldb, ldc});
  const HandleOnStream h(exec);
  using Factor = std::conditional_t<std::is_same<T, double>::value, double, float>;
  const Factor one = 1, zero = 0;
  const cudaDataType_t type = data_type<T>();
  // Row-major c = a op(b) is column-major c^T = op(b)^T a^T (tensor_gemm_heads).
  const cublasStatus_t status = cublasGemmBatchedEx(
      h.handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, int(cols), int(rows), int(inner), &one,
      reinterpret_cast<const void* const*>(b), type, int(ldb), reinterpret_cast<const void* const*>(a), type,
      int(lda), &zero, reinterpret_cast<void* const*>(c), type, int(ldc), int(count),
      compute_type<T>(float_gemm), CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("KokkosMLA: cublasGemmBatchedEx failed with status " +
                             std::to_string(int(status)));
}

#define KOKKOSMLA_INSTANTIATE_TENSOR_GEMM(T)                                                         \
  template void tensor_gemm(const Kokkos::Cuda&, std::int64_t, std::int64_t, std::int64_t, const T*, \
                            std::int64_t, const T*, std::int64_t, T*, std::int64_t, FloatGemm);
#define KOKKOSMLA_INSTANTIATE_TENSOR_GEMM_HEADS(T)                                                  \
  template void tensor_gemm_heads(const Kokkos::Cuda&, std::int64_t, std::int64_t, std::int64_t,    \
                                  std::int64_t, HeadMatrices<const T>, HeadMatrices<const T>, bool, \
                                  HeadMatrices<T>, FloatGemm, double);
#define KOKKOSMLA_INSTANTIATE_TENSOR_GEMM_POINTERS(T)                                               \
  template void tensor_gemm_pointers(const Kokkos::Cuda&, std::int64_t, std::int64_t, std::int64_t, \
                                     std::int64_t, const T* const*, std::int64_t, const T* const*,  \
                                     std::int64_t, bool, T* const*, std::int64_t, FloatGemm);
KOKKOSMLA_INSTANTIATE_TENSOR_GEMM_POINTERS(float)
KOKKOSMLA_INSTANTIATE_TENSOR_GEMM_POINTERS(double)
KOKKOSMLA_INSTANTIATE_TENSOR_GEMM(float)
KOKKOSMLA_INSTANTIATE_TENSOR_GEMM(double)
KOKKOSMLA_INSTANTIATE_TENSOR_GEMM_HEADS(float)
KOKKOSMLA_INSTANTIATE_TENSOR_GEMM_HEADS(double)
#if KOKKOSMLA_HAS_HALF
KOKKOSMLA_INSTANTIATE_TENSOR_GEMM(Kokkos::Experimental::half_t)
KOKKOSMLA_INSTANTIATE_TENSOR_GEMM_HEADS(Kokkos::Experimental::half_t)
#endif
#if KOKKOSMLA_HAS_BHALF
KOKKOSMLA_INSTANTIATE_TENSOR_GEMM(Kokkos::Experimental::bhalf_t)
KOKKOSMLA_INSTANTIATE_TENSOR_GEMM_HEADS(Kokkos::Experimental::bhalf_t)
#endif

}  // namespace Impl
}  // namespace KokkosMLA
#endif
