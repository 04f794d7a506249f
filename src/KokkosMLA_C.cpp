// The C interface (include/kokkosmla.h): raw pointers wrapped in unmanaged
// views, C++ exceptions turned into status codes and a per-thread message.

#include <kokkosmla.h>

#include <KokkosMLA.hpp>

#include <atomic>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace KokkosMLA {
namespace {

using Space = Kokkos::DefaultExecutionSpace;
using MemSpace = Space::memory_space;
using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
template <class T>
using Tensor4 = Kokkos::View<T****, Kokkos::LayoutRight, MemSpace, Unmanaged>;
template <class T>
using Tensor3 = Kokkos::View<T***, Kokkos::LayoutRight, MemSpace, Unmanaged>;

static_assert(int(Algorithm::Auto) == KOKKOSMLA_AUTO && int(Algorithm::Fused) == KOKKOSMLA_FUSED &&
                  int(Algorithm::Decompressed) == KOKKOSMLA_DECOMPRESSED &&
                  int(Algorithm::Absorbed) == KOKKOSMLA_ABSORBED,
              "kokkosmla_algorithm must mirror KokkosMLA::Algorithm");
static_assert(int(CacheStorage::Native) == KOKKOSMLA_CACHE_NATIVE &&
                  int(CacheStorage::Fp8PerBlock) == KOKKOSMLA_CACHE_FP8_PER_BLOCK &&
                  int(CacheStorage::Fp8PerTensor) == KOKKOSMLA_CACHE_FP8_PER_TENSOR,
              "kokkosmla_cache_storage must mirror KokkosMLA::CacheStorage");

/// A failure with its status; the message does not yet name the C function.
struct Failure : std::runtime_error {
  int status;
  Failure(int s, const std::string& what) : std::runtime_error(what), status(s) {}
};

[[noreturn]] void invalid(const std::string& what) { throw Failure(KOKKOSMLA_ERROR_INVALID_ARGUMENT, what); }

thread_local std::string last_error;

/// Runs body; turns what it throws into a status and "caller: message".
template <class Body>
int guarded(const char* caller, Body&& body) noexcept {
  last_error.clear();
  auto fail = [&](int status, const char* what) {
    try {
      last_error = std::string(caller) + ": " + what;
    } catch (...) {
      // Out of memory for the message itself: keep the status.
    }
    return status;
  };
  try {
    body();
    return KOKKOSMLA_SUCCESS;
  } catch (const Failure& e) {
    return fail(e.status, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(KOKKOSMLA_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return fail(KOKKOSMLA_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(KOKKOSMLA_ERROR_INTERNAL, "unknown exception");
  }
}

// Lifecycle. Kokkos cannot be re-initialized after finalize, so remember having finalized it.
std::mutex lifecycle_mutex;
int initialize_depth = 0;  ///< successful kokkosmla_initialize calls not yet matched
bool owns_kokkos = false;  ///< the outermost kokkosmla_initialize initialized Kokkos
bool finalized_kokkos = false;
std::atomic<long> live_plans{0}, live_allocations{0};

void require_initialized() {
  if (!Kokkos::is_initialized())
    throw Failure(KOKKOSMLA_ERROR_NOT_INITIALIZED,
                  "Kokkos is not initialized: call kokkosmla_initialize (or Kokkos::initialize) first");
}

void require_pointer(const void* p, const char* name) {
  if (!p) invalid(std::string(name) + " is NULL");
}

struct Extents {
  std::int64_t B, T, S, H, D, R;
};

/// Checked here, in the C argument names, before any view is made of them.
Shape checked_shape(const Extents& e) {
  const std::pair<const char*, std::int64_t> named[] = {{"B", e.B}, {"T", e.T}, {"S", e.S},
                                                        {"H", e.H}, {"D", e.D}, {"R", e.R}};
  for (const auto& n : named)
    if (n.second < 1 || n.second > (std::int64_t(1) << 30))
      invalid(std::string(n.first) + " = " + std::to_string(n.second) + " is not in [1, 2^30]");
  if (e.S < e.T)
    invalid("S = " + std::to_string(e.S) + " keys < T = " + std::to_string(e.T) + " queries: need S >= T");
  return Shape{e.B, e.T, e.S, e.H, e.D, e.R};
}

Options to_options(const kokkosmla_options* c) {
  Options o;
  if (!c) return o;
  if (c->scale != 0) o.scale = c->scale;  // NaN passes on, to be rejected as non-finite
  o.causal = c->causal != 0;
  if (c->algorithm < KOKKOSMLA_AUTO || c->algorithm > KOKKOSMLA_ABSORBED)
    invalid("opt->algorithm = " + std::to_string(c->algorithm) + " is not a kokkosmla_algorithm");
  o.algorithm = Algorithm(c->algorithm);
  o.kv_splits = c->kv_splits;  // a negative count is rejected by the plan
  o.check_cache_indices = c->skip_index_check == 0;
  o.allow_tf32 = c->allow_tf32 != 0;
  o.emulate_fp32 = c->emulate_fp32 != 0;
  return o;
}

/// The five arrays of one call as views of the default memory space.
template <class T>
struct Arguments {
  Tensor4<const T> q;
  Tensor3<const T> latent, w_uk, w_uv;
  Tensor4<T> out;

  Arguments(const T* q_, const T* latent_, const T* w_uk_, const T* w_uv_, T* out_, const Shape& s) {
    require_pointer(q_, "q");
    require_pointer(latent_, "latent");
    require_pointer(w_uk_, "w_uk");
    require_pointer(w_uv_, "w_uv");
    require_pointer(out_, "out");
    q = Tensor4<const T>(q_, s.batch, s.queries, s.heads, s.head_dim);
    latent = Tensor3<const T>(latent_, s.batch, s.keys, s.latent_dim);
    w_uk = Tensor3<const T>(w_uk_, s.latent_dim, s.heads, s.head_dim);
    w_uv = Tensor3<const T>(w_uv_, s.latent_dim, s.heads, s.head_dim);
    out = Tensor4<T>(out_, s.batch, s.queries, s.heads, s.head_dim);
  }
};

template <class T>
int run_attention(const char* caller, const T* q, const T* latent, const T* w_uk, const T* w_uv, T* out,
                  const Extents& e, const kokkosmla_options* opt) {
  return guarded(caller, [&] {
    require_initialized();
    const Arguments<T> a(q, latent, w_uk, w_uv, out, checked_shape(e));
    const Space exec;
    KokkosMLA::attention(exec, a.q, a.latent, a.w_uk, a.w_uv, a.out, to_options(opt));
    exec.fence();  // C callers read the results on return
  });
}

/// Throws unless `value` lies in [low, 2^30], naming it as the C caller does.
void require_extent(const char* name, std::int64_t value, std::int64_t low) {
  if (value < low || value > (std::int64_t(1) << 30))
    invalid(std::string(name) + " = " + std::to_string(value) + " is not in [" + std::to_string(low) +
            ", 2^30]");
}

/// A kokkosmla_cache_storage value as a CacheStorage; `name` is the C argument.
CacheStorage storage_of(int storage, const std::string& name) {
  if (storage < KOKKOSMLA_CACHE_NATIVE || storage > KOKKOSMLA_CACHE_FP8_PER_TENSOR)
    invalid(name + " = " + std::to_string(storage) + " is not a kokkosmla_cache_storage");
  return CacheStorage(storage);
}

/// The C description of a cache as the views of a LatentCache (unmanaged);
/// what the views' extents imply is checked by the C++ interface.
template <class T>
LatentCache<T, MemSpace> cache_views(const kokkosmla_cache* c, std::int64_t batch) {
  require_pointer(c, "cache");
  const CacheStorage storage = storage_of(c->storage, "cache->storage");
  require_pointer(c->latent, "cache->latent");
  require_pointer(c->seqlens, "cache->seqlens");
  require_extent("cache->page_size", c->page_size, 1);
  require_extent("cache->latent_dim", c->latent_dim, 1);
  require_extent("cache->rope_dim", c->rope_dim, 0);
  const bool paged = c->block_table != nullptr;
  if (paged) {
    require_extent("cache->pages", c->pages, 1);
    require_extent("cache->pages_per_sequence", c->pages_per_sequence, 1);
  }
  if (storage != CacheStorage::Native && (c->packed || c->k_rope))
    invalid("cache->packed = " + std::to_string(c->packed) + " and cache->k_rope " +
            (c->k_rope ? "given" : "NULL") + " but cache->storage = " + to_string(storage) +
            " needs 0 and NULL: an FP8 token holds its RoPE keys after the latent");
  if (c->packed && c->k_rope) invalid("cache->k_rope must be NULL in a packed cache (cache->packed != 0)");
  if (storage == CacheStorage::Native && !c->packed && c->rope_dim > 0 && !c->k_rope)
    invalid("cache->k_rope is NULL but cache->rope_dim = " + std::to_string(c->rope_dim));
  if (c->rope_dim == 0 && c->k_rope) invalid("cache->k_rope is given but cache->rope_dim = 0");
  using Cache = LatentCache<T, MemSpace>;
  const std::int64_t first = paged ? c->pages : batch;
  const std::int64_t width = c->latent_dim + (c->packed ? c->rope_dim : 0);
  Cache cache;
  if (paged) cache.block_table = typename Cache::Table(c->block_table, batch, c->pages_per_sequence);
  cache.seqlens = typename Cache::Lengths(c->seqlens, batch);
  if (storage != CacheStorage::Native) {
    cache.storage = storage;
    cache.fp8.tokens =
        typename Fp8Tokens<MemSpace>::Bytes(static_cast<std::uint8_t*>(c->latent), first, c->page_size,
                                            fp8_token_bytes(storage, c->latent_dim, c->rope_dim));
    cache.fp8.latent_scale = c->fp8_latent_scale;
    cache.fp8.rope_scale = c->fp8_rope_scale;
    cache.fp8.power_of_two_scales = c->fp8_power_of_two_scales != 0;
    return cache;
  }
  cache.latent = typename Cache::Tokens(static_cast<T*>(c->latent), first, c->page_size, width);
  if (c->k_rope)
    cache.k_rope = typename Cache::Tokens(static_cast<T*>(c->k_rope), first, c->page_size, c->rope_dim);
  return cache;
}

/// The arrays of one cache-attention call as CacheArguments.
template <class T>
CacheArguments<T, MemSpace> cache_arguments(const T* q, const T* q_rope, const kokkosmla_cache* c,
                                            const T* w_uk, const T* w_uv, T* out, T* lse,
                                            const CacheShape& s) {
  require_pointer(q, "q");
  require_pointer(w_uk, "w_uk");
  require_pointer(w_uv, "w_uv");
  require_pointer(out, "out");
  if (s.rope_dim > 0) require_pointer(q_rope, "q_rope");
  if (s.rope_dim == 0 && q_rope) invalid("q_rope is given but the RoPE width Dr = 0");
  using Arguments = CacheArguments<T, MemSpace>;
  Arguments a;
  a.q = typename Arguments::ConstRank4(q, s.batch, s.queries, s.heads, s.head_dim);
  if (q_rope) a.q_rope = typename Arguments::ConstRank4(q_rope, s.batch, s.queries, s.heads, s.rope_dim);
  a.cache = cache_views<T>(c, s.batch);
  a.w_uk = typename Arguments::ConstRank3(w_uk, s.latent_dim, s.heads, s.head_dim);
  a.w_uv = typename Arguments::ConstRank3(w_uv, s.latent_dim, s.heads, s.head_dim);
  a.out = typename Arguments::Rank4(out, s.batch, s.queries, s.heads, s.head_dim);
  if (lse) a.lse = typename Arguments::Lse(lse, s.batch, s.queries, s.heads);
  return a;
}

/// The shape of a cache plan, checked in the C argument names.
CacheShape checked_cache_shape(std::int64_t B, std::int64_t Tq, std::int64_t H, std::int64_t D,
                               std::int64_t R, std::int64_t Dr, std::int64_t capacity, CacheStorage storage) {
  const std::pair<const char*, std::int64_t> named[] = {{"B", B}, {"Tq", Tq}, {"H", H},
                                                        {"D", D}, {"R", R},   {"capacity", capacity}};
  for (const auto& n : named) require_extent(n.first, n.second, 1);
  require_extent("Dr", Dr, 0);
  if (capacity < Tq)
    invalid("capacity = " + std::to_string(capacity) + " < Tq = " + std::to_string(Tq) +
            ": a sequence holds at least its queries");
  CacheShape shape{B, Tq, H, D, R, Dr, capacity};
  shape.storage = storage;
  return shape;
}

/// The tokens a sequence of this cache can hold.
std::int64_t capacity_of(const kokkosmla_cache* c) {
  require_pointer(c, "cache");
  return c->block_table ? c->pages_per_sequence * c->page_size : c->page_size;
}

template <class T>
int run_cache_attention(const char* caller, const T* q, const T* q_rope, const kokkosmla_cache* c,
                        const T* w_uk, const T* w_uv, T* out, T* lse, std::int64_t B, std::int64_t Tq,
                        std::int64_t H, std::int64_t D, const kokkosmla_options* opt) {
  return guarded(caller, [&] {
    require_initialized();
    require_pointer(c, "cache");
    const CacheShape shape = checked_cache_shape(B, Tq, H, D, c->latent_dim, c->rope_dim, capacity_of(c),
                                                 storage_of(c->storage, "cache->storage"));
    const Space exec;
    KokkosMLA::cache_attention(exec, cache_arguments(q, q_rope, c, w_uk, w_uv, out, lse, shape),
                               to_options(opt));
    exec.fence();
  });
}

template <class T>
int run_append(const char* caller, const kokkosmla_cache* c, const T* new_latent, const T* new_k_rope,
               std::int64_t B, std::int64_t Tn, const kokkosmla_options* opt) {
  return guarded(caller, [&] {
    require_initialized();
    require_extent("B", B, 1);
    require_extent("Tn", Tn, 1);
    require_pointer(new_latent, "new_latent");
    const LatentCache<T, MemSpace> cache = cache_views<T>(c, B);
    const bool fp8 = cache.storage != CacheStorage::Native;
    using Rank3 = typename CacheArguments<T, MemSpace>::ConstRank3;
    const Rank3 latent(new_latent, B, Tn, fp8 ? c->latent_dim : std::int64_t(cache.latent.extent(2)));
    Rank3 k_rope;
    if (fp8 ? c->rope_dim > 0 : c->k_rope != nullptr) {
      require_pointer(new_k_rope, "new_k_rope");
      k_rope = Rank3(new_k_rope, B, Tn, c->rope_dim);
    } else if (new_k_rope) {
      invalid(fp8 ? "new_k_rope is given but cache->rope_dim = 0"
                  : "new_k_rope is given but the cache has no separate k_rope");
    }
    const Space exec;
    append_to_cache(exec, cache, latent, k_rope, to_options(opt));
    exec.fence();
  });
}

/// Copies bytes between host memory and the default memory space.
template <class DstSpace, class SrcSpace>
int copy_bytes(const char* caller, void* dst, const void* src, std::size_t bytes) {
  return guarded(caller, [&] {
    require_initialized();
    if (bytes == 0) return;
    require_pointer(dst, "dst");
    require_pointer(src, "src");
    using Dst = Kokkos::View<unsigned char*, DstSpace, Unmanaged>;
    using Src = Kokkos::View<const unsigned char*, SrcSpace, Unmanaged>;
    Kokkos::deep_copy(Dst(static_cast<unsigned char*>(dst), bytes),
                      Src(static_cast<const unsigned char*>(src), bytes));
    Kokkos::fence();
  });
}

}  // namespace
}  // namespace KokkosMLA

// The opaque handles of the header: a Plan on the default execution space.
struct kokkosmla_plan_f {
  KokkosMLA::Plan<float, Kokkos::DefaultExecutionSpace> plan;
};
struct kokkosmla_plan_d {
  KokkosMLA::Plan<double, Kokkos::DefaultExecutionSpace> plan;
};
struct kokkosmla_cache_plan_f {
  KokkosMLA::CachePlan<float, Kokkos::DefaultExecutionSpace> plan;
};
struct kokkosmla_cache_plan_d {
  KokkosMLA::CachePlan<double, Kokkos::DefaultExecutionSpace> plan;
};

namespace KokkosMLA {
namespace {

/// A new Handle of the plan for `shape` (Shape or CacheShape, checked by make_shape).
template <class Handle, class MakeShape>
int make_plan(const char* caller, Handle** plan, MakeShape&& make_shape, const kokkosmla_options* opt) {
  return guarded(caller, [&] {
    require_pointer(plan, "plan");
    *plan = nullptr;
    require_initialized();
    const auto shape = make_shape();
    const Options options = to_options(opt);
    *plan = new Handle{{Space(), shape, options}};
    ++live_plans;
  });
}

template <class Handle>
int create_plan(const char* caller, Handle** plan, const Extents& e, const kokkosmla_options* opt) {
  return make_plan(
      caller, plan, [&] { return checked_shape(e); }, opt);
}

/// Strides of a (B, T, H, width) array such as q or out, in elements: row
/// (b * T + t) and head h start row * (b * T + t) + head * h from the first element.
struct RowStrides {
  std::int64_t row = 0, head = 0;  ///< both 0: contiguous
};

template <class T>
using RowsView = Kokkos::View<T****, Kokkos::LayoutStride, MemSpace, Unmanaged>;

/// A (B, T, H, width) array with those strides as a LayoutStride view, its
/// rows and heads checked not to overlap (errors name the array, e.g. "q").
template <class T>
RowsView<T> strided_rows(const std::string& name, T* p, RowStrides s, std::int64_t B, std::int64_t Tq,
                         std::int64_t H, std::int64_t width) {
  if (s.row == 0 && s.head == 0) s = {H * width, width};
  if (s.head < width || s.row < s.head * (H - 1) + width)
    invalid(name + "_row_stride = " + std::to_string(s.row) + " and " + name +
            "_head_stride = " + std::to_string(s.head) + " overlap its rows of " + std::to_string(H) +
            " heads of " + std::to_string(width) + " elements");
  return RowsView<T>(p, Kokkos::LayoutStride(B, Tq * s.row, Tq, s.row, H, s.head, width, 1));
}

/// A (B, Tq, H) lse array whose row b * Tq + t starts row_stride * (b * Tq +
/// t) from p (0: H) as a LayoutStride view, its rows checked not to overlap.
template <class T>
using LseView = Kokkos::View<T***, Kokkos::LayoutStride, MemSpace, Unmanaged>;

template <class T>
LseView<T> lse_rows(T* p, std::int64_t row_stride, const CacheShape& s) {
  if (row_stride == 0) row_stride = s.heads;
  if (row_stride < s.heads)
    invalid("lse_row_stride = " + std::to_string(row_stride) + " overlaps its rows of " +
            std::to_string(s.heads) + " heads");
  return LseView<T>(p,
                    Kokkos::LayoutStride(s.batch, s.queries * row_stride, s.queries, row_stride, s.heads, 1));
}

template <class T, class Handle>
int execute_cache_plan(const char* caller, const Handle* plan, const T* q, RowStrides q_strides,
                       const T* q_rope, RowStrides rope_strides, const kokkosmla_cache* cache, const T* w_uk,
                       const T* w_uv, T* out, RowStrides out_strides, T* lse, std::int64_t lse_row_stride) {
  return guarded(caller, [&] {
    require_pointer(plan, "plan");
    require_initialized();
    const CacheShape& s = plan->plan.shape();
    auto a = Impl::strided(cache_arguments(q, q_rope, cache, w_uk, w_uv, out, lse, s));
    a.q = strided_rows("q", q, q_strides, s.batch, s.queries, s.heads, s.head_dim);
    if (q_rope)
      a.q_rope = strided_rows("q_rope", q_rope, rope_strides, s.batch, s.queries, s.heads, s.rope_dim);
    a.out = strided_rows("out", out, out_strides, s.batch, s.queries, s.heads, s.head_dim);
    if (lse) a.lse = lse_rows(lse, lse_row_stride, s);
    const Space exec;
    plan->plan.execute(exec, a);
    exec.fence();
  });
}

/// A (B, S, R) latent array whose row b * S + s starts row_stride * (b * S +
/// s) from p (0: R) as a LayoutStride view, its rows checked not to overlap.
template <class T>
using StridedLatent = Kokkos::View<const T***, Kokkos::LayoutStride, MemSpace, Unmanaged>;

template <class T>
StridedLatent<T> latent_rows(const T* p, std::int64_t row_stride, const Shape& s) {
  if (row_stride == 0) row_stride = s.latent_dim;
  if (row_stride < s.latent_dim)
    invalid("latent_row_stride = " + std::to_string(row_stride) + " overlaps its rows of " +
            std::to_string(s.latent_dim) + " elements");
  return StridedLatent<T>(
      p, Kokkos::LayoutStride(s.batch, s.keys * row_stride, s.keys, row_stride, s.latent_dim, 1));
}

template <class T, class Handle>
int execute_plan(const char* caller, const Handle* plan, const T* q, RowStrides q_strides, const T* latent,
                 std::int64_t latent_row_stride, const T* w_uk, const T* w_uv, T* out,
                 RowStrides out_strides) {
  return guarded(caller, [&] {
    require_pointer(plan, "plan");
    require_initialized();
    const Shape& s = plan->plan.shape();
    const Arguments<T> a(q, latent, w_uk, w_uv, out, s);
    const auto q_view = strided_rows("q", q, q_strides, s.batch, s.queries, s.heads, s.head_dim);
    const auto latent_view = latent_rows(latent, latent_row_stride, s);
    const auto out_view = strided_rows("out", out, out_strides, s.batch, s.queries, s.heads, s.head_dim);
    const Space exec;
    plan->plan.execute(exec, q_view, latent_view, a.w_uk, a.w_uv, out_view);
    exec.fence();
  });
}

/// *value = what(plan's C++ plan): a property a plan reports through an int.
template <class Handle, class What>
int plan_property(const char* caller, const Handle* plan, int* value, const char* name, What what) {
  return guarded(caller, [&] {
    require_pointer(plan, "plan");
    require_pointer(value, name);
    *value = int(what(plan->plan));
  });
}

template <class Handle>
int destroy_plan(const char* caller, Handle* plan) {
  return guarded(caller, [&] {
    if (!plan) return;
    require_initialized();  // its workspace must be freed while Kokkos lives
    delete plan;
    --live_plans;
  });
}

}  // namespace
}  // namespace KokkosMLA

using KokkosMLA::Extents;

extern "C" {

kokkosmla_options kokkosmla_options_default(void) {
  kokkosmla_options o;
  o.scale = 0;
  o.causal = 1;
  o.algorithm = KOKKOSMLA_AUTO;
  o.kv_splits = 0;
  o.skip_index_check = 0;
  o.allow_tf32 = 0;
  o.emulate_fp32 = 0;
  return o;
}

int kokkosmla_initialize(void) {
  using namespace KokkosMLA;
  return guarded("kokkosmla_initialize", [] {
    std::lock_guard<std::mutex> lock(lifecycle_mutex);
    if (initialize_depth == 0 && !Kokkos::is_initialized()) {
      if (finalized_kokkos)
        throw Failure(KOKKOSMLA_ERROR_NOT_INITIALIZED,
                      "Kokkos was finalized and cannot be initialized again in this process");
      // Kokkos reads its settings from argv and KOKKOS_* environment variables; give it a name only.
      char name[] = "kokkosmla";
      char* argv[] = {name, nullptr};
      int argc = 1;
      Kokkos::initialize(argc, argv);
      owns_kokkos = true;
    }
    ++initialize_depth;
  });
}

int kokkosmla_finalize(void) {
  using namespace KokkosMLA;
  return guarded("kokkosmla_finalize", [] {
    std::lock_guard<std::mutex> lock(lifecycle_mutex);
    if (initialize_depth == 0) return;  // unmatched: nothing of ours to undo
    if (initialize_depth == 1 && owns_kokkos && Kokkos::is_initialized()) {
      const long plans = live_plans, allocations = live_allocations;
      if (plans > 0 || allocations > 0)
        invalid(std::to_string(plans) + " plan(s) not destroyed and " + std::to_string(allocations) +
                " kokkosmla_malloc allocation(s) not freed: Kokkos stays initialized");
      Kokkos::finalize();
      finalized_kokkos = true;
    }
    if (--initialize_depth == 0) owns_kokkos = false;
  });
}

int kokkosmla_is_initialized(void) { return Kokkos::is_initialized() ? 1 : 0; }

const char* kokkosmla_last_error(void) { return KokkosMLA::last_error.c_str(); }

int kokkosmla_host_memory_is_accessible(void) {
  return Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, Kokkos::HostSpace>::accessible ? 1 : 0;
}

void* kokkosmla_malloc(size_t bytes) {
  using namespace KokkosMLA;
  void* p = nullptr;
  guarded("kokkosmla_malloc", [&] {
    require_initialized();
    if (bytes == 0) invalid("bytes = 0");
    p = Kokkos::kokkos_malloc<MemSpace>("KokkosMLA::C::malloc", bytes);
    ++live_allocations;
  });
  return p;
}

int kokkosmla_free(void* ptr) {
  using namespace KokkosMLA;
  return guarded("kokkosmla_free", [&] {
    if (!ptr) return;
    require_initialized();
    Kokkos::kokkos_free<MemSpace>(ptr);
    --live_allocations;
  });
}

int kokkosmla_copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  return KokkosMLA::copy_bytes<KokkosMLA::MemSpace, Kokkos::HostSpace>("kokkosmla_copy_to_device", device_dst,
                                                                       host_src, bytes);
}

int kokkosmla_copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  return KokkosMLA::copy_bytes<Kokkos::HostSpace, KokkosMLA::MemSpace>("kokkosmla_copy_to_host", host_dst,
                                                                       device_src, bytes);
}

int kokkosmla_fp8_token_bytes(int storage, int64_t latent_dim, int64_t rope_dim, int64_t* bytes) {
  using namespace KokkosMLA;
  return guarded("kokkosmla_fp8_token_bytes", [&] {
    require_pointer(bytes, "bytes");
    *bytes = fp8_token_bytes(storage_of(storage, "storage"), latent_dim, rope_dim);
  });
}

int kokkosmla_attention_f(const float* q, const float* latent, const float* w_uk, const float* w_uv,
                          float* out, int64_t B, int64_t T, int64_t S, int64_t H, int64_t D, int64_t R,
                          const kokkosmla_options* opt) {
  return KokkosMLA::run_attention("kokkosmla_attention_f", q, latent, w_uk, w_uv, out,
                                  Extents{B, T, S, H, D, R}, opt);
}

int kokkosmla_attention_d(const double* q, const double* latent, const double* w_uk, const double* w_uv,
                          double* out, int64_t B, int64_t T, int64_t S, int64_t H, int64_t D, int64_t R,
                          const kokkosmla_options* opt) {
  return KokkosMLA::run_attention("kokkosmla_attention_d", q, latent, w_uk, w_uv, out,
                                  Extents{B, T, S, H, D, R}, opt);
}

int kokkosmla_plan_create_f(kokkosmla_plan_f** plan, int64_t B, int64_t T, int64_t S, int64_t H, int64_t D,
                            int64_t R, const kokkosmla_options* opt) {
  return KokkosMLA::create_plan("kokkosmla_plan_create_f", plan, Extents{B, T, S, H, D, R}, opt);
}

int kokkosmla_plan_create_d(kokkosmla_plan_d** plan, int64_t B, int64_t T, int64_t S, int64_t H, int64_t D,
                            int64_t R, const kokkosmla_options* opt) {
  return KokkosMLA::create_plan("kokkosmla_plan_create_d", plan, Extents{B, T, S, H, D, R}, opt);
}

int kokkosmla_plan_execute_f(const kokkosmla_plan_f* plan, const float* q, const float* latent,
                             const float* w_uk, const float* w_uv, float* out) {
  return KokkosMLA::execute_plan("kokkosmla_plan_execute_f", plan, q, {}, latent, 0, w_uk, w_uv, out, {});
}

int kokkosmla_plan_execute_d(const kokkosmla_plan_d* plan, const double* q, const double* latent,
                             const double* w_uk, const double* w_uv, double* out) {
  return KokkosMLA::execute_plan("kokkosmla_plan_execute_d", plan, q, {}, latent, 0, w_uk, w_uv, out, {});
}

int kokkosmla_plan_execute_strided_f(const kokkosmla_plan_f* plan, const float* q, int64_t q_row_stride,
                                     int64_t q_head_stride, const float* latent, int64_t latent_row_stride,
                                     const float* w_uk, const float* w_uv, float* out, int64_t out_row_stride,
                                     int64_t out_head_stride) {
  return KokkosMLA::execute_plan("kokkosmla_plan_execute_strided_f", plan, q, {q_row_stride, q_head_stride},
                                 latent, latent_row_stride, w_uk, w_uv, out,
                                 {out_row_stride, out_head_stride});
}

int kokkosmla_plan_execute_strided_d(const kokkosmla_plan_d* plan, const double* q, int64_t q_row_stride,
                                     int64_t q_head_stride, const double* latent, int64_t latent_row_stride,
                                     const double* w_uk, const double* w_uv, double* out,
                                     int64_t out_row_stride, int64_t out_head_stride) {
  return KokkosMLA::execute_plan("kokkosmla_plan_execute_strided_d", plan, q, {q_row_stride, q_head_stride},
                                 latent, latent_row_stride, w_uk, w_uv, out,
                                 {out_row_stride, out_head_stride});
}

int kokkosmla_plan_algorithm_f(const kokkosmla_plan_f* plan, int* algorithm) {
  return KokkosMLA::plan_property("kokkosmla_plan_algorithm_f", plan, algorithm, "algorithm",
                                  [](const auto& p) { return p.algorithm(); });
}

int kokkosmla_plan_algorithm_d(const kokkosmla_plan_d* plan, int* algorithm) {
  return KokkosMLA::plan_property("kokkosmla_plan_algorithm_d", plan, algorithm, "algorithm",
                                  [](const auto& p) { return p.algorithm(); });
}

int kokkosmla_plan_destroy_f(kokkosmla_plan_f* plan) {
  return KokkosMLA::destroy_plan("kokkosmla_plan_destroy_f", plan);
}

int kokkosmla_plan_destroy_d(kokkosmla_plan_d* plan) {
  return KokkosMLA::destroy_plan("kokkosmla_plan_destroy_d", plan);
}

#define KOKKOSMLA_C_CACHE_FUNCTIONS(T, S)                                                                    \
  int kokkosmla_cache_plan_create_##S(kokkosmla_cache_plan_##S** plan, int64_t B, int64_t Tq, int64_t H,     \
                                      int64_t D, int64_t R, int64_t Dr, int64_t capacity,                    \
                                      const kokkosmla_options* opt) {                                        \
    return KokkosMLA::make_plan(                                                                             \
        "kokkosmla_cache_plan_create_" #S, plan,                                                             \
        [&] {                                                                                                \
          return KokkosMLA::checked_cache_shape(B, Tq, H, D, R, Dr, capacity,                                \
                                                KokkosMLA::CacheStorage::Native);                            \
        },                                                                                                   \
        opt);                                                                                                \
  }                                                                                                          \
  int kokkosmla_cache_plan_create_storage_##S(kokkosmla_cache_plan_##S** plan, int64_t B, int64_t Tq,        \
                                              int64_t H, int64_t D, int64_t R, int64_t Dr, int64_t capacity, \
                                              int storage, const kokkosmla_options* opt) {                   \
    return KokkosMLA::make_plan(                                                                             \
        "kokkosmla_cache_plan_create_storage_" #S, plan,                                                     \
        [&] {                                                                                                \
          return KokkosMLA::checked_cache_shape(B, Tq, H, D, R, Dr, capacity,                                \
                                                KokkosMLA::storage_of(storage, "storage"));                  \
        },                                                                                                   \
        opt);                                                                                                \
  }                                                                                                          \
  int kokkosmla_cache_plan_execute_##S(const kokkosmla_cache_plan_##S* plan, const T* q, const T* q_rope,    \
                                       const kokkosmla_cache* cache, const T* w_uk, const T* w_uv, T* out,   \
                                       T* lse) {                                                             \
    return KokkosMLA::execute_cache_plan("kokkosmla_cache_plan_execute_" #S, plan, q, {}, q_rope, {}, cache, \
                                         w_uk, w_uv, out, {}, lse, 0);                                       \
  }                                                                                                          \
  int kokkosmla_cache_plan_execute_strided_##S(                                                              \
      const kokkosmla_cache_plan_##S* plan, const T* q, int64_t q_row_stride, int64_t q_head_stride,         \
      const T* q_rope, int64_t q_rope_row_stride, int64_t q_rope_head_stride, const kokkosmla_cache* cache,  \
      const T* w_uk, const T* w_uv, T* out, int64_t out_row_stride, int64_t out_head_stride, T* lse,         \
      int64_t lse_row_stride) {                                                                              \
    return KokkosMLA::execute_cache_plan("kokkosmla_cache_plan_execute_strided_" #S, plan, q,                \
                                         {q_row_stride, q_head_stride}, q_rope,                              \
                                         {q_rope_row_stride, q_rope_head_stride}, cache, w_uk, w_uv, out,    \
                                         {out_row_stride, out_head_stride}, lse, lse_row_stride);            \
  }                                                                                                          \
  int kokkosmla_cache_plan_splits_##S(const kokkosmla_cache_plan_##S* plan, int* splits) {                   \
    return KokkosMLA::plan_property("kokkosmla_cache_plan_splits_" #S, plan, splits, "splits",               \
                                    [](const auto& p) { return p.splits(); });                               \
  }                                                                                                          \
  int kokkosmla_cache_plan_destroy_##S(kokkosmla_cache_plan_##S* plan) {                                     \
    return KokkosMLA::destroy_plan("kokkosmla_cache_plan_destroy_" #S, plan);                                \
  }                                                                                                          \
  int kokkosmla_cache_attention_##S(const T* q, const T* q_rope, const kokkosmla_cache* cache,               \
                                    const T* w_uk, const T* w_uv, T* out, T* lse, int64_t B, int64_t Tq,     \
                                    int64_t H, int64_t D, const kokkosmla_options* opt) {                    \
    return KokkosMLA::run_cache_attention("kokkosmla_cache_attention_" #S, q, q_rope, cache, w_uk, w_uv,     \
                                          out, lse, B, Tq, H, D, opt);                                       \
  }                                                                                                          \
  int kokkosmla_append_to_cache_##S(const kokkosmla_cache* cache, const T* new_latent, const T* new_k_rope,  \
                                    int64_t B, int64_t Tn, const kokkosmla_options* opt) {                   \
    return KokkosMLA::run_append("kokkosmla_append_to_cache_" #S, cache, new_latent, new_k_rope, B, Tn,      \
                                 opt);                                                                       \
  }

KOKKOSMLA_C_CACHE_FUNCTIONS(float, f)
KOKKOSMLA_C_CACHE_FUNCTIONS(double, d)

}  // extern "C"
