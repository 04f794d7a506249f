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

namespace KokkosMLA {
namespace {

template <class Handle>
int create_plan(const char* caller, Handle** plan, const Extents& e, const kokkosmla_options* opt) {
  return guarded(caller, [&] {
    require_pointer(plan, "plan");
    *plan = nullptr;
    require_initialized();
    const Shape shape = checked_shape(e);
    const Options options = to_options(opt);
    *plan = new Handle{{Space(), shape, options}};
    ++live_plans;
  });
}

template <class T, class Handle>
int execute_plan(const char* caller, const Handle* plan, const T* q, const T* latent, const T* w_uk,
                 const T* w_uv, T* out) {
  return guarded(caller, [&] {
    require_pointer(plan, "plan");
    require_initialized();
    const Arguments<T> a(q, latent, w_uk, w_uv, out, plan->plan.shape());
    const Space exec;
    plan->plan.execute(exec, a.q, a.latent, a.w_uk, a.w_uv, a.out);
    exec.fence();
  });
}

template <class Handle>
int plan_algorithm(const char* caller, const Handle* plan, int* algorithm) {
  return guarded(caller, [&] {
    require_pointer(plan, "plan");
    require_pointer(algorithm, "algorithm");
    *algorithm = int(plan->plan.algorithm());
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
  return KokkosMLA::execute_plan("kokkosmla_plan_execute_f", plan, q, latent, w_uk, w_uv, out);
}

int kokkosmla_plan_execute_d(const kokkosmla_plan_d* plan, const double* q, const double* latent,
                             const double* w_uk, const double* w_uv, double* out) {
  return KokkosMLA::execute_plan("kokkosmla_plan_execute_d", plan, q, latent, w_uk, w_uv, out);
}

int kokkosmla_plan_algorithm_f(const kokkosmla_plan_f* plan, int* algorithm) {
  return KokkosMLA::plan_algorithm("kokkosmla_plan_algorithm_f", plan, algorithm);
}

int kokkosmla_plan_algorithm_d(const kokkosmla_plan_d* plan, int* algorithm) {
  return KokkosMLA::plan_algorithm("kokkosmla_plan_algorithm_d", plan, algorithm);
}

int kokkosmla_plan_destroy_f(kokkosmla_plan_f* plan) {
  return KokkosMLA::destroy_plan("kokkosmla_plan_destroy_f", plan);
}

int kokkosmla_plan_destroy_d(kokkosmla_plan_d* plan) {
  return KokkosMLA::destroy_plan("kokkosmla_plan_destroy_d", plan);
}

}  // extern "C"
