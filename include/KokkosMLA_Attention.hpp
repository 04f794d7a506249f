#ifndef KOKKOSMLA_ATTENTION_HPP
#define KOKKOSMLA_ATTENTION_HPP

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include <KokkosMLA_Options.hpp>
#include <KokkosMLA_Precision.hpp>

namespace KokkosMLA {

namespace Impl {

/// Row-major unmanaged views on the caller's memory: what the kernels take.
template <class Scalar, class MemSpace>
struct ViewTypes {
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  using ConstRank4 = Kokkos::View<const Scalar****, Kokkos::LayoutRight, MemSpace, Unmanaged>;
  /// Queries: rows (b, t) evenly spaced, unit stride within a head (reads_in_place).
  using Queries = Kokkos::View<const Scalar****, Kokkos::LayoutStride, MemSpace, Unmanaged>;
  using ConstRank3 = Kokkos::View<const Scalar***, Kokkos::LayoutRight, MemSpace, Unmanaged>;
  /// Weights (R, H, D): unit stride within a head, rows r and heads h at any
  /// strides (reads_weights_in_place); every path reads them where they lie.
  using Weights = Kokkos::View<const Scalar***, Kokkos::LayoutStride, MemSpace, Unmanaged>;
  /// The latent (B, S, R): rows (b, s) evenly spaced, unit stride within a
  /// row (reads_latent_in_place); every prefill path reads it by rows.
  using Latent = Kokkos::View<const Scalar***, Kokkos::LayoutStride, MemSpace, Unmanaged>;
  using Rank4 = Kokkos::View<Scalar****, Kokkos::LayoutRight, MemSpace, Unmanaged>;
  /// The output (B, T, H, D): rows (b, t) evenly spaced, unit stride within
  /// a head (reads_rows_in_place); every prefill path writes it by rows.
  using Output = Kokkos::View<Scalar****, Kokkos::LayoutStride, MemSpace, Unmanaged>;
};

/// A (B, T, H) or (B, T, H, width) array of any strides (row-major,
/// LayoutLeft, a slice of a wider array), addressed where it lies by token
/// row b * T + t and head, or by the flat row number (b * T + t) * H + h as
/// kernels count rows. How lse is written, and merge_states' views read.
template <class T>
struct StridedRows {
  T* ptr = nullptr;
  std::int64_t batch = 0, queries = 1, heads = 1;                    ///< B, T, H
  std::int64_t batch_stride = 0, query_stride = 0, head_stride = 1;  ///< in elements
  std::int64_t column_stride = 1;                                    ///< within a row of width values
  KOKKOS_INLINE_FUNCTION explicit operator bool() const { return ptr != nullptr; }
  KOKKOS_INLINE_FUNCTION T* row(std::int64_t token_row, std::int64_t h) const {
    return ptr + (token_row / queries) * batch_stride + (token_row % queries) * query_stride +
           h * head_stride;
  }
  KOKKOS_INLINE_FUNCTION T& at(std::int64_t token_row, std::int64_t h) const { return *row(token_row, h); }
  KOKKOS_INLINE_FUNCTION T& operator[](std::int64_t flat_row) const {
    return at(flat_row / heads, flat_row % heads);
  }
};

/// Where the kernels write each row's lse (B, T, H); empty: not asked for.
template <class T>
using LseRows = StridedRows<T>;

/// The rows of a (B, T, H) or (B, T, H, width) view of any layout (empty
/// for an empty view).
template <class V>
StridedRows<typename V::value_type> strided_rows(const V& v) {
  static_assert(int(V::rank) == 3 || int(V::rank) == 4, "a (B, T, H) or (B, T, H, width) view");
  if (v.size() == 0) return {};
  StridedRows<typename V::value_type> r{v.data(),
                                        std::int64_t(v.extent(0)),
                                        std::int64_t(v.extent(1)),
                                        std::int64_t(v.extent(2)),
                                        std::int64_t(v.stride(0)),
                                        std::int64_t(v.stride(1)),
                                        std::int64_t(v.stride(2))};
  if constexpr (int(V::rank) == 4) r.column_stride = std::int64_t(v.stride(3));
  return r;
}

/// The lse rows of a (B, T, H) view of any layout (empty for an empty view).
template <class V>
LseRows<typename V::value_type> lse_rows(const V& v) {
  static_assert(int(V::rank) == 3, "a (B, T, H) view");
  return strided_rows(v);
}

/// The (B, T, H) view of lse rows.
template <class MemSpace, class T>
Kokkos::View<T***, Kokkos::LayoutStride, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> lse_view(
    const LseRows<T>& r) {
  using View = Kokkos::View<T***, Kokkos::LayoutStride, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  auto n = [](std::int64_t x) { return std::size_t(x); };
  return View(r.ptr, Kokkos::LayoutStride(n(r.batch), n(r.batch_stride), n(r.queries), n(r.query_stride),
                                          n(r.heads), n(r.head_stride)));
}

/// The views of one prefill call, as a path runs it; lse may be empty.
template <class Scalar, class MemSpace>
struct PrefillViews {
  using Types = ViewTypes<Scalar, MemSpace>;
  typename Types::Queries q;
  typename Types::Latent latent;
  typename Types::Weights w_uk, w_uv;
  typename Types::Output out;
  LseRows<compute_type<Scalar>> lse;
};

/// A prefill path planned for one problem (src/paths/): what a Plan holds.
template <class Scalar, class ExecSpace>
class PlannedPrefill;

/// What the host-side checks need to know of one argument.
struct ArgInfo {
  const char* name = "";
  int rank = 0;
  std::int64_t extent[4] = {0, 0, 0, 0};
  std::int64_t stride[4] = {0, 0, 0, 0};  ///< in elements
  const void* data = nullptr;
  std::size_t bytes = 0;
  bool contiguous = true;
};

template <class V>
ArgInfo describe(const char* name, const V& v) {
  ArgInfo a;
  a.name = name;
  a.rank = int(V::rank);
  std::size_t strides[int(V::rank) + 1] = {};  // and the span: what View::stride writes
  v.stride(strides);
  for (int i = 0; i < a.rank && i < 4; ++i) {
    a.extent[i] = std::int64_t(v.extent(i));
    a.stride[i] = std::int64_t(strides[i]);
  }
  a.data = v.data();
  a.bytes = v.span() * sizeof(typename V::value_type);
  a.contiguous = v.span_is_contiguous();
  return a;
}

/// Throws std::invalid_argument naming the argument and extents; returns the shape.
Shape validate_arguments(const char* caller, const ArgInfo& q, const ArgInfo& latent, const ArgInfo& w_uk,
                         const ArgInfo& w_uv, const ArgInfo& out);
/// lse must be (B, T, H) as q and overlap no other argument.
void validate_lse(const char* caller, const ArgInfo& lse, const ArgInfo& q, const ArgInfo& latent,
                  const ArgInfo& w_uk, const ArgInfo& w_uv, const ArgInfo& out);
void validate_shape(const char* caller, const Shape& s);
void validate_options(const char* caller, const Options& opt);
void require_same_shape(const char* caller, const Shape& planned, const Shape& given);

template <class ExecSpace>
constexpr bool is_supported_space = std::is_same<ExecSpace, Kokkos::DefaultExecutionSpace>::value ||
                                    std::is_same<ExecSpace, Kokkos::DefaultHostExecutionSpace>::value;

// Compile-time checks of one argument; the failing instantiation names the argument's type.
template <class Scalar, class ExecSpace, class V, int Rank, bool IsOutput>
constexpr bool check_view() {
  static_assert(Kokkos::is_view<V>::value, "KokkosMLA: every tensor argument must be a Kokkos::View");
  static_assert(int(V::rank) == Rank,
                "KokkosMLA: wrong rank: q and out are rank 4, latent, w_uk, w_uv and lse rank 3");
  static_assert(std::is_same<typename V::non_const_value_type, Scalar>::value,
                "KokkosMLA: q, latent, w_uk, w_uv and out must hold the same scalar type, and lse "
                "its compute_type (float for half_t and bhalf_t)");
  static_assert(std::is_same<typename V::array_layout, Kokkos::LayoutRight>::value ||
                    std::is_same<typename V::array_layout, Kokkos::LayoutLeft>::value ||
                    std::is_same<typename V::array_layout, Kokkos::LayoutStride>::value,
                "KokkosMLA: views must be LayoutRight, LayoutLeft or LayoutStride");
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, typename V::memory_space>::accessible,
                "KokkosMLA: a view's memory space is not accessible from the execution space");
  static_assert(!IsOutput || !std::is_const<typename V::value_type>::value,
                "KokkosMLA: out and lse must be views of non-const values");
  return true;
}

template <class Scalar, class ExecSpace, class Q, class L, class WK, class WV, class O>
constexpr bool check_views() {
  return check_view<Scalar, ExecSpace, Q, 4, false>() && check_view<Scalar, ExecSpace, L, 3, false>() &&
         check_view<Scalar, ExecSpace, WK, 3, false>() && check_view<Scalar, ExecSpace, WV, 3, false>() &&
         check_view<Scalar, ExecSpace, O, 4, true>();
}

template <class Scalar, class ExecSpace, class Q, class L, class WK, class WV, class O, class LS>
constexpr bool check_views() {
  return check_views<Scalar, ExecSpace, Q, L, WK, WV, O>() &&
         check_view<compute_type<Scalar>, ExecSpace, LS, 3, true>();
}

/// describe() of a prefill argument, which may have any layout and gaps:
/// what is not a contiguous row-major array is copied into one (row_major).
/// Its bytes run from the first element to the last (Kokkos' span() of a
/// strided slice may reach past the array it slices, into other memory).
template <class V>
ArgInfo describe_any_layout(const char* name, const V& v) {
  ArgInfo a = describe(name, v);
  a.contiguous = true;
  if (v.size() > 0) {
    std::size_t last = 0;
    for (int i = 0; i < int(V::rank); ++i) last += (v.extent(i) - 1) * std::size_t(v.stride(i));
    a.bytes = (last + 1) * sizeof(typename V::value_type);
  }
  return a;
}

template <class Q, class L, class WK, class WV, class O>
Shape validated_shape(const char* caller, const Q& q, const L& latent, const WK& w_uk, const WV& w_uv,
                      const O& out) {
  return validate_arguments(caller, describe_any_layout("q", q), describe_any_layout("latent", latent),
                            describe_any_layout("w_uk", w_uk), describe_any_layout("w_uv", w_uv),
                            describe_any_layout("out", out));
}

template <class Q, class L, class WK, class WV, class O, class LS>
Shape validated_shape(const char* caller, const Q& q, const L& latent, const WK& w_uk, const WV& w_uv,
                      const O& out, const LS& lse) {
  const Shape s = validated_shape(caller, q, latent, w_uk, w_uv, out);
  validate_lse(caller, describe_any_layout("lse", lse), describe_any_layout("q", q),
               describe_any_layout("latent", latent), describe_any_layout("w_uk", w_uk),
               describe_any_layout("w_uv", w_uv), describe_any_layout("out", out));
  return s;
}

/// Whether the kernels read v as it is: row-major without gaps, whatever its
/// layout type (a LayoutStride or LayoutLeft view whose strides are those of
/// a contiguous row-major array, e.g. a slice of leading indices, is read in place).
template <class V>
bool is_row_major(const V& v) {
  if (!v.span_is_contiguous()) return false;
  if (std::is_same<typename V::array_layout, Kokkos::LayoutRight>::value) return true;
  std::size_t expected = 1;
  for (int i = int(V::rank) - 1; i >= 0; --i) {
    if (v.extent(i) > 1 && std::size_t(v.stride(i)) != expected) return false;
    expected *= v.extent(i);
  }
  return true;
}

/// Where a plan keeps the row-major copies of arguments it cannot read in
/// place: one buffer per argument slot, allocated by the first call that
/// needs it and reused, so later calls allocate nothing (and can be captured
/// into a CUDA graph). Like the plan's workspace, shared by its executions.
template <class MemSpace>
class CopyBuffers {
 public:
  static constexpr int kSlots = 5;
  /// At least `bytes` of slot's buffer.
  void* storage(int slot, std::size_t bytes) const {
    Kokkos::View<char*, MemSpace>& b = buffers_[slot];
    if (b.extent(0) < bytes)
      b = Kokkos::View<char*, MemSpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::layout_copies"), bytes);
    return b.data();
  }

 private:
  mutable Kokkos::View<char*, MemSpace> buffers_[kSlots];
};

/// A row-major view of v's extents and value type: v itself (unmanaged) when
/// it is row-major (or empty: an absent optional view), else a copy, filled
/// from v on exec when `fill`: in slot `slot` of `kept` when given, else in a
/// new allocation (freed with the last view of it).
template <class ExecSpace, class V>
Kokkos::View<typename V::data_type, Kokkos::LayoutRight, typename V::memory_space> row_major(
    const ExecSpace& exec, const V& v, bool fill, const CopyBuffers<typename V::memory_space>* kept = nullptr,
    int slot = 0) {
  using R = Kokkos::View<typename V::data_type, Kokkos::LayoutRight, typename V::memory_space>;
  using Copy = Kokkos::View<typename V::non_const_data_type, Kokkos::LayoutRight, typename V::memory_space>;
  using T = typename V::non_const_value_type;
  static_assert(int(V::rank) == 3 || int(V::rank) == 4, "rank 3 or 4");
  auto make = [&](auto&& first, auto... rest) {
    if (v.size() == 0 || is_row_major(v)) return R(first, rest...);
    const Copy copy =
        kept ? Copy(static_cast<T*>(kept->storage(slot, v.size() * sizeof(T))), rest...)
             : Copy(Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::layout_copies"), rest...);
    if (fill) Kokkos::deep_copy(exec, copy, v);
    return R(copy);
  };
  if constexpr (int(V::rank) == 3) {
    return make(v.data(), v.extent(0), v.extent(1), v.extent(2));
  } else {
    return make(v.data(), v.extent(0), v.extent(1), v.extent(2), v.extent(3));
  }
}

/// Elements between a (B, T, ...) view's consecutive token rows b * T + t
/// (where its rows are evenly spaced: evenly_spaced_rows).
template <class V>
std::size_t token_row_stride(const V& v) {
  return v.extent(1) > 1 ? v.stride(1) : v.stride(0);
}

/// Whether a (B, T, ...) view's (b, t) rows are evenly spaced (b * T + t
/// apart by one stride) and its last dimension unit-stride: what the kernels
/// can address by token row (HeadRows).
template <class V>
bool evenly_spaced_rows(const V& v) {
  constexpr int last = int(V::rank) - 1;
  if (v.extent(last) > 1 && v.stride(last) != 1) return false;
  return v.extent(0) <= 1 || v.extent(1) <= 1 || std::size_t(v.stride(0)) == v.extent(1) * v.stride(1);
}

/// Whether the kernels read a (B, T, width) or (B, T, H, width) view where
/// it lies: row-major without gaps, or unit stride in the last dimension,
/// rows (b, t) evenly spaced, and the start and the strides of rows (and
/// heads) on 16-byte boundaries (the tensor-core kernels' vector loads), as
/// slices of a wider projection are.
template <class V>
bool reads_rows_in_place(const V& v) {
  if (v.size() == 0 || is_row_major(v)) return true;
  if (!evenly_spaced_rows(v)) return false;
  auto aligned = [](std::size_t bytes) { return bytes % 16 == 0; };
  const std::size_t bytes = sizeof(typename V::value_type);
  const bool heads_aligned = int(V::rank) < 4 || aligned(std::size_t(v.stride(2)) * bytes);
  return heads_aligned && aligned(reinterpret_cast<std::uintptr_t>(v.data())) &&
         aligned(token_row_stride(v) * bytes);
}

/// Whether the kernels read a (B, T, H, width) query view where it lies.
template <class V>
bool reads_in_place(const V& v) {
  static_assert(int(V::rank) == 4, "a (B, T, H, width) view");
  return reads_rows_in_place(v);
}

/// Elements from one (b, s) row of a latent view with evenly spaced rows to
/// the next (its width where it has one row).
template <class V>
std::int64_t latent_row_stride(const V& v) {
  return v.extent(0) * v.extent(1) > 1 ? std::int64_t(token_row_stride(v)) : std::int64_t(v.extent(2));
}

/// Whether the prefill paths take a (B, S, R) latent view where it lies:
/// row-major without gaps, or unit stride within a row, rows (b, s) evenly
/// spaced and not overlapping (BLAS's rule for a leading dimension), the
/// start and the row stride on 16-byte boundaries, as the latent part of a
/// packed (B, S, R + Dr) array is.
template <class V>
bool reads_latent_in_place(const V& v) {
  static_assert(int(V::rank) == 3, "a (B, S, R) view");
  return reads_rows_in_place(v) && (v.size() == 0 || latent_row_stride(v) >= std::int64_t(v.extent(2)));
}

/// A (B, T, H, width) query view or a (B, S, R) latent view as the kernels
/// take it: v itself where they read it in place (reads_in_place,
/// reads_latent_in_place), else a row-major copy filled on exec (row_major).
template <class ExecSpace, class V>
Kokkos::View<typename V::const_data_type, Kokkos::LayoutStride, typename V::memory_space> rows_view(
    const ExecSpace& exec, const V& v, const CopyBuffers<typename V::memory_space>* kept, int slot) {
  bool in_place;
  if constexpr (int(V::rank) == 4)
    in_place = reads_in_place(v);
  else
    in_place = reads_latent_in_place(v);
  if (in_place) return v;
  return row_major(exec, v, true, kept, slot);
}

/// Whether the kernels read an (R, H, D) weight view where it lies:
/// row-major without gaps, or unit stride within a head and the start and
/// the strides of rows and heads on 16-byte boundaries, as w_uk and w_uv
/// are when they are the two halves of one (R, H, D + D) array.
template <class V>
bool reads_weights_in_place(const V& v) {
  static_assert(int(V::rank) == 3, "an (R, H, D) view");
  if (v.size() == 0 || is_row_major(v)) return true;
  if (v.extent(2) > 1 && v.stride(2) != 1) return false;
  auto aligned = [](std::size_t bytes) { return bytes % 16 == 0; };
  const std::size_t bytes = sizeof(typename V::value_type);
  return aligned(reinterpret_cast<std::uintptr_t>(v.data())) && aligned(std::size_t(v.stride(0)) * bytes) &&
         aligned(std::size_t(v.stride(1)) * bytes);
}

/// An (R, H, D) weight view as the kernels take it: v itself where they read
/// it in place (reads_weights_in_place), else a row-major copy filled on exec.
template <class ExecSpace, class V>
Kokkos::View<typename V::const_data_type, Kokkos::LayoutStride, typename V::memory_space> weights_view(
    const ExecSpace& exec, const V& v, const CopyBuffers<typename V::memory_space>* kept, int slot) {
  if (reads_weights_in_place(v)) return v;
  return row_major(exec, v, true, kept, slot);
}

/// A (B, T, H, D) output view as the prefill kernels write it: v itself
/// where they can (reads_rows_in_place), else a row-major buffer in slot
/// `slot` of kept, which the caller copies into v after the kernels.
template <class ExecSpace, class V>
Kokkos::View<typename V::data_type, Kokkos::LayoutStride, typename V::memory_space> output_rows(
    const ExecSpace& exec, const V& v, const CopyBuffers<typename V::memory_space>* kept, int slot) {
  static_assert(int(V::rank) == 4, "a (B, T, H, D) view");
  if (reads_rows_in_place(v)) return v;
  return row_major(exec, v, false, kept, slot);
}

}  // namespace Impl

/// The algorithm a Plan<Scalar, ExecSpace> uses for this problem: opt.algorithm,
/// or what the cost model picks for Algorithm::Auto (see README).
template <class Scalar, class ExecSpace>
Algorithm choose_algorithm(const ExecSpace& exec, const Shape& shape, const Options& opt = {});

/// A problem shape bound to an execution space: chooses the algorithm and tiles
/// once and owns the workspace, so that execute() allocates nothing
/// (arguments it cannot read in place, reads_in_place and is_row_major, are
/// copied into buffers it allocates at the first call that needs them and keeps).
/// Instances exist for float, double and, where Kokkos has them, half_t and
/// bhalf_t (KokkosMLA_Precision.hpp) on Kokkos::DefaultExecutionSpace and
/// Kokkos::DefaultHostExecutionSpace. A Plan's workspace is shared by its
/// executions: run concurrent executions on separate Plans.
///
/// The plan takes the first applicable path of an ordered list (path()
/// names it; docs/api.md lists them). 16-bit Scalars take the tensor-core
/// path on CUDA GPUs of compute capability 8.0 and newer (Decompressed,
/// head_dim 64 or 128: K and V by cuBLAS in fp32 accumulation, rounded to
/// Scalar, then an mma.sync flash kernel; on H100/H200 builds with sm_90a
/// code and a Kokkos that grants 161 KB of team scratch, a wgmma flash
/// kernel, Path::FlashSm90); every other case widens the inputs to float,
/// runs a float plan and rounds out to Scalar.
template <class Scalar, class ExecSpace = Kokkos::DefaultExecutionSpace>
class Plan {
  static_assert(is_supported_scalar<Scalar>,
                "KokkosMLA::Plan: Scalar must be float, double, or a 16-bit type of "
                "KokkosMLA_Precision.hpp that this Kokkos has");
  static_assert(Impl::is_supported_space<ExecSpace>,
                "KokkosMLA::Plan: ExecSpace must be Kokkos::DefaultExecutionSpace or "
                "Kokkos::DefaultHostExecutionSpace");

 public:
  using execution_space = ExecSpace;
  using memory_space = typename ExecSpace::memory_space;
  using views = Impl::ViewTypes<Scalar, memory_space>;

  /// Throws std::invalid_argument for non-positive extents, keys < queries or a
  /// non-finite scale.
  Plan(const ExecSpace& exec, const Shape& shape, const Options& opt = {});

  /// Asynchronous on exec. Throws std::invalid_argument, before any launch and
  /// without touching out, when the views do not match the planned shape.
  template <class Q, class L, class WK, class WV, class O>
  void execute(const ExecSpace& exec, const Q& q, const L& latent, const WK& w_uk, const WV& w_uv,
               const O& out) const {
    static_assert(Impl::check_views<Scalar, ExecSpace, Q, L, WK, WV, O>(), "");
    const char* caller = "KokkosMLA::Plan::execute";
    Impl::require_same_shape(caller, shape_, Impl::validated_shape(caller, q, latent, w_uk, w_uv, out));
    run_in_place(exec, q, latent, w_uk, w_uv, out, static_cast<const NoLse*>(nullptr));
  }

  /// As above, and also lse (B, T, H) of compute_type<Scalar>: the natural log
  /// of each softmax denominator, sum over visible keys s of exp(scale * q . k_s). With it,
  /// results over disjoint key sets combine by merge_states().
  template <class Q, class L, class WK, class WV, class O, class LS>
  void execute(const ExecSpace& exec, const Q& q, const L& latent, const WK& w_uk, const WV& w_uv,
               const O& out, const LS& lse) const {
    static_assert(Impl::check_views<Scalar, ExecSpace, Q, L, WK, WV, O, LS>(), "");
    const char* caller = "KokkosMLA::Plan::execute";
    Impl::require_same_shape(caller, shape_, Impl::validated_shape(caller, q, latent, w_uk, w_uv, out, lse));
    run_in_place(exec, q, latent, w_uk, w_uv, out, &lse);
  }

  /// The algorithm the chosen path computes (Fused, Absorbed or Decompressed).
  Algorithm algorithm() const;
  /// The execution path chosen for this problem and backend.
  Path path() const;
  const Shape& shape() const { return shape_; }
  const Options& options() const { return options_; }
  double scale() const { return scale_; }
  /// Bytes this plan holds for its executions (a widened plan's included).
  std::size_t workspace_bytes() const;
  /// One line: path, algorithm, team size, tiles and scratch, for logs.
  std::string describe() const;

 private:
  using Call = Impl::PrefillViews<Scalar, memory_space>;
  template <class Q, class L, class WK, class WV, class O>
  static Call unmanaged(const Q& q, const L& latent, const WK& w_uk, const WV& w_uv, const O& out,
                        Impl::LseRows<compute_type<Scalar>> lse) {
    return {typename views::Queries(q),    typename views::Latent(latent), typename views::Weights(w_uk),
            typename views::Weights(w_uv), typename views::Output(out),    lse};
  }
  void run(const ExecSpace& exec, const Call& call) const;

  struct NoLse {};
  /// run() on the arguments as the kernels read them: q where it lies when
  /// reads_in_place, the latent where it lies when reads_latent_in_place,
  /// out where it lies when reads_rows_in_place, the weights where they lie
  /// when reads_weights_in_place, lse where it lies (any strides); else
  /// copies in the plan's copy buffers (out copied back).
  template <class Q, class L, class WK, class WV, class O, class LS>
  void run_in_place(const ExecSpace& exec, const Q& q, const L& latent, const WK& w_uk, const WV& w_uv,
                    const O& out, const LS* lse) const {
    const auto q_rows = Impl::rows_view(exec, q, &copies_, 0);
    const typename views::Latent latent_rows = Impl::rows_view(exec, latent, &copies_, 1);
    const auto w_uk_rows = Impl::weights_view(exec, w_uk, &copies_, 2);
    const auto w_uv_rows = Impl::weights_view(exec, w_uv, &copies_, 3);
    const auto out_rows = Impl::output_rows(exec, out, &copies_, 4);
    if constexpr (std::is_same<LS, NoLse>::value)
      run(exec, unmanaged(q_rows, latent_rows, w_uk_rows, w_uv_rows, out_rows, {}));
    else
      run(exec, unmanaged(q_rows, latent_rows, w_uk_rows, w_uv_rows, out_rows, Impl::lse_rows(*lse)));
    if (out_rows.data() != out.data()) Kokkos::deep_copy(exec, out, out_rows);
  }

  Shape shape_;
  Options options_;
  double scale_ = 1;
  std::shared_ptr<const Impl::PlannedPrefill<Scalar, ExecSpace>> path_;
  Impl::CopyBuffers<memory_space> copies_;  ///< arguments that are not read in place
};

/// out = causal multi-head latent attention of q over latent with the
/// up-projections w_uk and w_uv (see README). Validates, plans and executes;
/// allocates the chosen algorithm's workspace, so hot loops should hold a Plan.
template <class ExecSpace, class Q, class L, class WK, class WV, class O,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void attention(const ExecSpace& exec, const Q& q, const L& latent, const WK& w_uk, const WV& w_uv,
               const O& out, const Options& opt = {}) {
  using Scalar = typename O::non_const_value_type;
  static_assert(Impl::check_views<Scalar, ExecSpace, Q, L, WK, WV, O>(), "");
  const char* caller = "KokkosMLA::attention";
  const Shape shape = Impl::validated_shape(caller, q, latent, w_uk, w_uv, out);
  Impl::validate_options(caller, opt);
  Plan<Scalar, ExecSpace>(exec, shape, opt).execute(exec, q, latent, w_uk, w_uv, out);
}

/// As above, and also lse (B, T, H), the log-sum-exp of each row's scaled
/// logits (see Plan::execute); lse must not alias any other argument.
template <
    class ExecSpace, class Q, class L, class WK, class WV, class O, class LS,
    std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value && Kokkos::is_view<LS>::value, int> = 0>
void attention(const ExecSpace& exec, const Q& q, const L& latent, const WK& w_uk, const WV& w_uv,
               const O& out, const LS& lse, const Options& opt = {}) {
  using Scalar = typename O::non_const_value_type;
  static_assert(Impl::check_views<Scalar, ExecSpace, Q, L, WK, WV, O, LS>(), "");
  const char* caller = "KokkosMLA::attention";
  const Shape shape = Impl::validated_shape(caller, q, latent, w_uk, w_uv, out, lse);
  Impl::validate_options(caller, opt);
  Plan<Scalar, ExecSpace>(exec, shape, opt).execute(exec, q, latent, w_uk, w_uv, out, lse);
}

/// As above, on a default instance of out's execution space.
template <class Q, class L, class WK, class WV, class O, std::enable_if_t<Kokkos::is_view<Q>::value, int> = 0>
void attention(const Q& q, const L& latent, const WK& w_uk, const WV& w_uv, const O& out,
               const Options& opt = {}) {
  attention(typename O::execution_space(), q, latent, w_uk, w_uv, out, opt);
}

#define KOKKOSMLA_DECLARE_INSTANCE(SCALAR, SPACE) \
  extern template class Plan<SCALAR, SPACE>;      \
  extern template Algorithm choose_algorithm<SCALAR, SPACE>(const SPACE&, const Shape&, const Options&);
#if KOKKOSMLA_HAS_HALF
#define KOKKOSMLA_DECLARE_HALF(SPACE) KOKKOSMLA_DECLARE_INSTANCE(Kokkos::Experimental::half_t, SPACE)
#else
#define KOKKOSMLA_DECLARE_HALF(SPACE)
#endif
#if KOKKOSMLA_HAS_BHALF
#define KOKKOSMLA_DECLARE_BHALF(SPACE) KOKKOSMLA_DECLARE_INSTANCE(Kokkos::Experimental::bhalf_t, SPACE)
#else
#define KOKKOSMLA_DECLARE_BHALF(SPACE)
#endif
#define KOKKOSMLA_DECLARE_INSTANCES(SPACE) \
  KOKKOSMLA_DECLARE_INSTANCE(float, SPACE) \
  KOKKOSMLA_DECLARE_INSTANCE(double, SPACE) KOKKOSMLA_DECLARE_HALF(SPACE) KOKKOSMLA_DECLARE_BHALF(SPACE)
KOKKOSMLA_DECLARE_INSTANCES(Kokkos::DefaultExecutionSpace)
// A device backend makes the host space a distinct type with its own instances.
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || defined(KOKKOS_ENABLE_SYCL) || \
    defined(KOKKOS_ENABLE_OPENMPTARGET)
#define KOKKOSMLA_HOST_SPACE_IS_DISTINCT 1
KOKKOSMLA_DECLARE_INSTANCES(Kokkos::DefaultHostExecutionSpace)
#endif
}  // namespace KokkosMLA

#endif
