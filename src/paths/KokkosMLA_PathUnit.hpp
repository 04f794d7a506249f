#ifndef KOKKOSMLA_PATHUNIT_HPP
#define KOKKOSMLA_PATHUNIT_HPP
// The plan layer. Each way of computing a problem is one path unit: a class
// template Unit<Scalar, ExecSpace> with
//   static constexpr bool available;             // built for this Scalar, space and build
//   static bool applicable(const Problem&);      // takes this problem on this backend
//   static Algorithm algorithm(const Problem&);  // what it computes
//   Unit(const ExecSpace&, const Problem&);      // plans: config, workspace
//   run(exec, call), path(), describe(), workspace_bytes()  (the Planned* interface)
// A Plan or CachePlan takes the first applicable unit of an ordered list
// (KokkosMLA_PathLists.hpp) and keeps it. Adding a kernel means adding one
// unit (and its kernel's source file) and naming it in a list.

#include <KokkosMLA_Cache.hpp>
#include <KokkosMLA_config.hpp>

#include "impl/KokkosMLA_Backend.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace KokkosMLA {
namespace Impl {

/// A prefill problem as the paths see it.
struct PrefillProblem {
  Shape shape;
  Options options;
  Backend backend;
  double scale = 1;
  /// options.algorithm, or for Auto the cost model's pick among the portable algorithms.
  Algorithm wanted = Algorithm::Fused;
};

/// A cache-attention problem as the paths see it.
struct CacheProblem {
  CacheShape shape;
  Options options;
  Backend backend;
  double scale = 1;
};

template <class Scalar, class ExecSpace>
class PlannedPrefill {
 public:
  using Call = PrefillViews<Scalar, typename ExecSpace::memory_space>;
  virtual ~PlannedPrefill() = default;
  virtual Path path() const = 0;
  virtual Algorithm algorithm() const = 0;
  /// The path's own part of a plan's describe(): team, tiles, scratch.
  virtual std::string describe() const = 0;
  virtual std::size_t workspace_bytes() const = 0;
  virtual void run(const ExecSpace& exec, const Call& call) const = 0;
};

template <class Scalar, class ExecSpace>
class PlannedCache {
 public:
  /// q and q_rope as the kernels read them in place (reads_in_place), every
  /// other view row-major without gaps.
  using Call = CacheArguments<Scalar, typename ExecSpace::memory_space, Kokkos::LayoutStride>;
  virtual ~PlannedCache() = default;
  virtual Path path() const = 0;
  virtual int splits() const = 0;
  virtual std::string describe() const = 0;
  virtual std::size_t workspace_bytes() const = 0;
  virtual void run(const ExecSpace& exec, const Call& call) const = 0;
  /// The attention step alone on absorbed queries (benchmarks); paths without one throw.
  virtual void attend_absorbed(const ExecSpace&, const Call&, Scalar*) const {
    throw std::logic_error("KokkosMLA::CachePlan: the " + to_string(path()) +
                           " path has no separate attention step");
  }
};

/// An uninitialised workspace of n elements (empty for n = 0), labelled for Kokkos Tools.
template <class T, class MemorySpace>
Kokkos::View<T*, MemorySpace> workspace(const char* label, std::int64_t n) {
  if (n <= 0) return {};
  return Kokkos::View<T*, MemorySpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)),
                                       n);
}

/// Elements of K or V, each (B, S, H, D), as the Decompressed paths keep them.
inline std::int64_t kv_elements(const Shape& s) { return s.batch * s.keys * s.heads * s.head_dim; }

/// Calls f(static_cast<Unit*>(nullptr)) and returns true when Unit is built
/// for these types and takes problem p.
template <class Unit, class Problem, class F>
bool visit_if_applicable(const Problem& p, F& f) {
  if constexpr (Unit::available) {
    if ((!p.options.path || *p.options.path == Unit::id) && Unit::applicable(p)) {
      f(static_cast<Unit*>(nullptr));
      return true;
    }
  }
  (void)p, (void)f;
  return false;
}

/// An ordered list of path units, fastest first; Options::path, when set,
/// keeps only the units of that path.
template <template <class, class> class... Units>
struct PathList {
  /// Calls f with a null pointer to the first unit that takes p.
  template <class Scalar, class ExecSpace, class Problem, class F>
  static void first(const Problem& p, F&& f) {
    bool found = false;
    ((found = found || visit_if_applicable<Units<Scalar, ExecSpace>>(p, f)), ...);
    if (found) return;
    if (p.options.path)
      throw std::invalid_argument("KokkosMLA: Options::path = " + to_string(*p.options.path) +
                                  ": that path is not built for this scalar type and backend, or does not "
                                  "take this problem");
    throw std::logic_error("KokkosMLA: no execution path takes this problem");
  }

  /// The first unit that takes p, planned.
  template <class Planned, class Scalar, class ExecSpace, class Problem>
  static std::shared_ptr<const Planned> plan(const ExecSpace& exec, const Problem& p) {
    std::shared_ptr<const Planned> chosen;
    first<Scalar, ExecSpace>(p, [&](auto* unit) {
      using Unit = std::remove_pointer_t<decltype(unit)>;
      chosen = std::make_shared<const Unit>(exec, p);
    });
    return chosen;
  }
};

}  // namespace Impl
}  // namespace KokkosMLA

#endif
