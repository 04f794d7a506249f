// The sm_90a probe (see KokkosMLA_Sm90a.hpp).

#include "cuda/KokkosMLA_Sm90a.hpp"

namespace KokkosMLA {
namespace Impl {

namespace {

struct Sm90aProbe {
  Kokkos::View<int, Kokkos::CudaSpace> branch;  // 90: the sm_90a code ran; -1: another arch's code

  KOKKOS_INLINE_FUNCTION void operator()(const Kokkos::TeamPolicy<Kokkos::Cuda>::member_type& team) const {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    if (team.team_rank() == 0) branch() = 90;
#else
    if (team.team_rank() == 0) branch() = -1;
#endif
  }
};

}  // namespace

bool sm90a_code_runs(const Kokkos::Cuda& exec) {
  Sm90aProbe probe{Kokkos::View<int, Kokkos::CudaSpace>("KokkosMLA::sm90a_probe")};
  Kokkos::parallel_for("KokkosMLA::sm90a_probe", Kokkos::TeamPolicy<Kokkos::Cuda>(exec, 1, 128), probe);
  int branch = 0;
  Kokkos::deep_copy(exec, branch, probe.branch);
  exec.fence();
  return branch == 90;
}

}  // namespace Impl
}  // namespace KokkosMLA
