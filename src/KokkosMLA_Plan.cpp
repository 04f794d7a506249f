// Plans and runs attention(): the Plan takes the first applicable path of
// Impl::PrefillPaths (src/paths/KokkosMLA_PathLists.hpp).

#include <KokkosMLA_Attention.hpp>

#include "impl/KokkosMLA_CostModel.hpp"
#include "impl/KokkosMLA_Widen.hpp"
#include "paths/KokkosMLA_PathLists.hpp"

#include <cmath>
#include <iostream>
#include <sstream>

namespace KokkosMLA {
namespace Impl {

namespace {

/// What the cost model needs: the tiles each portable algorithm's kernel would use.
template <class ExecSpace, class T>
CostInputs cost_inputs(const Shape& s, const Options& opt, const Backend& be) {
  CostInputs in;
  in.shape = s;
  in.causal = opt.causal;
  in.backend = be;
  in.scalar_bytes = sizeof(T);
  in.fused = latent_tiles(latent_kernel<ExecSpace, T, LatentStep::Fused>(s), s.keys, be).tiles;
  in.attend = latent_tiles(latent_kernel<ExecSpace, T, LatentStep::Attend>(s), s.keys, be).tiles;
  in.flash = flash_tiles<ExecSpace, T>(s, be).tiles;
  return in;
}

/// The algorithm a forced path computes (Auto for Widened, whose float plan chooses).
Algorithm algorithm_of(Path path) {
  switch (path) {
    case Path::Fused:
    case Path::FusedRow:
      return Algorithm::Fused;
    case Path::Absorbed:
      return Algorithm::Absorbed;
    case Path::DecompressedPortable:
    case Path::DecompressedBlocked:
    case Path::DecompressedHost:
    case Path::FlashTensorSm80:
    case Path::FlashSm90:
    case Path::DecompressedGemm:
      return Algorithm::Decompressed;
    default:
      return Algorithm::Auto;
  }
}

/// The problem as the paths see it; Auto resolved by a forced path's
/// algorithm, else by the cost model over the portable algorithms in the type
/// computed in (float for 16-bit types).
template <class Scalar, class ExecSpace>
PrefillProblem prefill_problem(const ExecSpace& exec, const Shape& shape, const Options& opt) {
  PrefillProblem p;
  p.shape = shape;
  p.options = opt;
  p.backend = backend_of(exec);
  p.scale = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(shape.head_dim));
  p.wanted = opt.algorithm;
  if (p.wanted == Algorithm::Auto && opt.path) p.wanted = algorithm_of(*opt.path);
  if (p.wanted == Algorithm::Auto)
    p.wanted = cheapest(cost_inputs<ExecSpace, compute_type<Scalar>>(shape, opt, p.backend));
  return p;
}

}  // namespace

}  // namespace Impl

template <class Scalar, class ExecSpace>
Algorithm choose_algorithm(const ExecSpace& exec, const Shape& shape, const Options& opt) {
  Impl::validate_shape("KokkosMLA::choose_algorithm", shape);
  const Impl::PrefillProblem p = Impl::prefill_problem<Scalar>(exec, shape, opt);
  Algorithm chosen = p.wanted;
  Impl::PrefillPaths::first<Scalar, ExecSpace>(
      p, [&](auto* unit) { chosen = std::remove_pointer_t<decltype(unit)>::algorithm(p); });
  return chosen;
}

template <class Scalar, class ExecSpace>
Plan<Scalar, ExecSpace>::Plan(const ExecSpace& exec, const Shape& shape, const Options& opt)
    : shape_(shape), options_(opt) {
  const char* caller = "KokkosMLA::Plan";
  Impl::validate_shape(caller, shape);
  Impl::validate_options(caller, opt);
  const Impl::PrefillProblem p = Impl::prefill_problem<Scalar>(exec, shape, opt);
  scale_ = p.scale;
  path_ = Impl::PrefillPaths::plan<Impl::PlannedPrefill<Scalar, ExecSpace>, Scalar>(exec, p);
  if (opt.verbose) std::cerr << "KokkosMLA: " << describe() << "\n";
}

template <class Scalar, class ExecSpace>
Algorithm Plan<Scalar, ExecSpace>::algorithm() const {
  return path_->algorithm();
}

template <class Scalar, class ExecSpace>
Path Plan<Scalar, ExecSpace>::path() const {
  return path_->path();
}

template <class Scalar, class ExecSpace>
std::size_t Plan<Scalar, ExecSpace>::workspace_bytes() const {
  return path_->workspace_bytes();
}

template <class Scalar, class ExecSpace>
std::string Plan<Scalar, ExecSpace>::describe() const {
  std::ostringstream o;
  o << Impl::scalar_name<Scalar>() << " " << to_string(shape_) << " " << ExecSpace::name()
    << " path=" << to_string(path()) << " algorithm=" << to_string(algorithm()) << " " << path_->describe()
    << " workspace=" << workspace_bytes() << "B";
  return o.str();
}

template <class Scalar, class ExecSpace>
void Plan<Scalar, ExecSpace>::run(const ExecSpace& exec, const Call& call) const {
  path_->run(exec, call);
}

#define KOKKOSMLA_INSTANTIATE_ONE(SCALAR, SPACE) \
  template class Plan<SCALAR, SPACE>;            \
  template Algorithm choose_algorithm<SCALAR, SPACE>(const SPACE&, const Shape&, const Options&);
#if KOKKOSMLA_HAS_HALF
#define KOKKOSMLA_INSTANTIATE_HALF(SPACE) KOKKOSMLA_INSTANTIATE_ONE(Kokkos::Experimental::half_t, SPACE)
#else
#define KOKKOSMLA_INSTANTIATE_HALF(SPACE)
#endif
#if KOKKOSMLA_HAS_BHALF
#define KOKKOSMLA_INSTANTIATE_BHALF(SPACE) KOKKOSMLA_INSTANTIATE_ONE(Kokkos::Experimental::bhalf_t, SPACE)
#else
#define KOKKOSMLA_INSTANTIATE_BHALF(SPACE)
#endif
#define KOKKOSMLA_INSTANTIATE(SPACE)       \
  KOKKOSMLA_INSTANTIATE_ONE(float, SPACE)  \
  KOKKOSMLA_INSTANTIATE_ONE(double, SPACE) \
  KOKKOSMLA_INSTANTIATE_HALF(SPACE) KOKKOSMLA_INSTANTIATE_BHALF(SPACE)
KOKKOSMLA_INSTANTIATE(Kokkos::DefaultExecutionSpace)
#ifdef KOKKOSMLA_HOST_SPACE_IS_DISTINCT
KOKKOSMLA_INSTANTIATE(Kokkos::DefaultHostExecutionSpace)
#endif

}  // namespace KokkosMLA
