#ifndef KOKKOSMLA_SM90A_HPP
#define KOKKOSMLA_SM90A_HPP
// Hopper-only code lives in src/cuda/sm90a/*.cu, compiled by nvcc for sm_90a
// beside Kokkos' sm_90 (cmake/KokkosMLA_Features.cmake) and guarded by
// __CUDA_ARCH_FEAT_SM90_ALL. Built where KOKKOSMLA_ENABLE_SM90A.

#include <KokkosMLA_config.hpp>

#include <Kokkos_Core.hpp>

namespace KokkosMLA {
namespace Impl {

#if KOKKOSMLA_ENABLE_SM90A
/// Whether this build's sm_90a code runs on exec's GPU: a TeamPolicy kernel
/// of one warpgroup, from a source compiled for sm_90a alone, issues a wgmma
/// fence in its architecture-specific branch and reports which branch ran.
bool sm90a_code_runs(const Kokkos::Cuda& exec);
#endif

}  // namespace Impl
}  // namespace KokkosMLA

#endif
