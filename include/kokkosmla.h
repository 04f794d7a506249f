#ifndef KOKKOSMLA_H
#define KOKKOSMLA_H
/*
 * C interface to KokkosMLA (C99 and later, and C++).
 *
 * Computes the same causal multi-head latent attention as KokkosMLA::attention
 * on raw pointers to row-major (C order) arrays:
 *
 *   q       (B, T, H, D)   queries
 *   latent  (B, S, R)      key/value latent, S >= T
 *   w_uk    (R, H, D)      key up-projection
 *   w_uv    (R, H, D)      value up-projection
 *   out     (B, T, H, D)   result; must not overlap an input
 *
 * Memory: every array pointer must point to memory of Kokkos' default memory
 * space (device memory on a CUDA build, host memory on a Serial or OpenMP
 * build). kokkosmla_malloc, kokkosmla_free, kokkosmla_copy_to_device and
 * kokkosmla_copy_to_host handle such memory the same way on every build;
 * kokkosmla_host_memory_is_accessible() says whether ordinary host pointers
 * may be passed directly.
 *
 * Synchronisation: every function has finished its work on the device when it
 * returns: results may be read at once.
 *
 * Errors: functions return a kokkosmla_status (KOKKOSMLA_SUCCESS = 0). On
 * failure, kokkosmla_last_error() describes it, naming the function and the
 * argument. A call that fails with KOKKOSMLA_ERROR_INVALID_ARGUMENT or
 * KOKKOSMLA_ERROR_NOT_INITIALIZED has launched nothing and left out untouched.
 *
 * Initialisation:
 *   - If the application has already called Kokkos::initialize, the library
 *     uses that Kokkos; kokkosmla_initialize and kokkosmla_finalize only count
 *     and never finalize it. The application finalizes Kokkos itself, after
 *     destroying every plan and freeing every kokkosmla_malloc allocation.
 *   - Otherwise kokkosmla_initialize initializes Kokkos (settings from the
 *     KOKKOS_* environment variables), and the kokkosmla_finalize that matches
 *     the first kokkosmla_initialize finalizes it.
 *   - Calls nest: each successful kokkosmla_initialize is matched by one
 *     kokkosmla_finalize; only the outermost one acts. A kokkosmla_finalize
 *     without a matching kokkosmla_initialize does nothing.
 *   - Before finalizing Kokkos, kokkosmla_finalize checks that every plan has
 *     been destroyed and every kokkosmla_malloc allocation freed; if not it
 *     returns KOKKOSMLA_ERROR_INVALID_ARGUMENT and finalizes nothing.
 *   - Kokkos cannot be initialized twice in one process: kokkosmla_initialize
 *     after Kokkos has been finalized returns KOKKOSMLA_ERROR_NOT_INITIALIZED
 *     (when the finalization went through this library; calling it after the
 *     application finalized Kokkos itself is not supported).
 *   - Every other function returns KOKKOSMLA_ERROR_NOT_INITIALIZED while
 *     Kokkos is not initialized.
 *   - Initialisation and finalisation must not run concurrently with other
 *     calls of this library.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What every function returns. */
typedef enum kokkosmla_status {
  KOKKOSMLA_SUCCESS = 0,
  KOKKOSMLA_ERROR_INVALID_ARGUMENT = 1, /* bad pointer, extent, option, or misuse of the lifecycle */
  KOKKOSMLA_ERROR_NOT_INITIALIZED = 2,  /* Kokkos is not initialized (see above) */
  KOKKOSMLA_ERROR_INTERNAL = 3          /* anything else: allocation failure, backend error */
} kokkosmla_status;

/* The values of KokkosMLA::Algorithm. */
typedef enum kokkosmla_algorithm {
  KOKKOSMLA_AUTO = 0,         /* a cost model picks one of the three below */
  KOKKOSMLA_FUSED = 1,        /* one launch over the latent */
  KOKKOSMLA_DECOMPRESSED = 2, /* K and V by two GEMMs, then flash attention */
  KOKKOSMLA_ABSORBED = 3      /* the Fused steps as three launches through a workspace */
} kokkosmla_algorithm;

/* Options of every call (KokkosMLA::Options). Fields added after the first
   three are off when zero, so a zeroed struct with causal set is the default. */
typedef struct kokkosmla_options {
  /* Softmax scale. 0 means the default: 1/sqrt(D) for attention and plans,
     1/sqrt(D + Dr) for cache attention. Any other value must be finite (NaN
     and infinities are rejected). */
  double scale;
  /* Nonzero: query t attends to key positions <= S - T + t. Zero: to all S keys. */
  int causal;
  /* A kokkosmla_algorithm value. */
  int algorithm;
  /* Cache attention: parts each sequence's keys are split into (0: the plan chooses). */
  int kv_splits;
  /* Cache attention and append: nonzero skips the host-side check of seqlens
     and the block table (which synchronises with the device), for serving
     loops that guarantee them valid. */
  int skip_index_check;
  /* float prefill and cache attention on CUDA GPUs: Options::allow_tf32
     (TF32 products) and Options::emulate_fp32 (3xTF32 products, fp32 accuracy). */
  int allow_tf32;
  int emulate_fp32;
} kokkosmla_options;

/* scale = 0 (the default scale), causal = 1, algorithm = KOKKOSMLA_AUTO, every
   later field 0. A NULL options pointer means the same. */
kokkosmla_options kokkosmla_options_default(void);

/* Lifecycle: see "Initialisation" above. */
int kokkosmla_initialize(void);
int kokkosmla_finalize(void);
/* 1 while Kokkos is initialized (by the application or by kokkosmla_initialize), else 0. */
int kokkosmla_is_initialized(void);

/* The message of the latest failed call on this thread (a NULL from
   kokkosmla_malloc counts as failed), or "" once a later call has succeeded.
   Functions without a status (kokkosmla_options_default, kokkosmla_is_initialized,
   kokkosmla_host_memory_is_accessible, kokkosmla_last_error) leave it as it is.
   Valid until the next call of this library on this thread. */
const char* kokkosmla_last_error(void);

/* 1 when the default execution space reads ordinary host memory (Serial,
   OpenMP, Threads builds), so host pointers may be passed directly; 0 on
   device builds, where arrays must come from kokkosmla_malloc. Needs no
   initialisation. */
int kokkosmla_host_memory_is_accessible(void);

/* Memory of the default memory space, labelled for Kokkos Tools. Returns NULL
   for bytes = 0 or on failure (then kokkosmla_last_error says why). */
void* kokkosmla_malloc(size_t bytes);
/* Frees what kokkosmla_malloc returned; NULL is ignored. */
int kokkosmla_free(void* ptr);
/* Copy bytes from host memory to default-memory-space memory, and back. */
int kokkosmla_copy_to_device(void* device_dst, const void* host_src, size_t bytes);
int kokkosmla_copy_to_host(void* host_dst, const void* device_src, size_t bytes);

/* out = attention(q, latent, w_uk, w_uv), as KokkosMLA::attention. Extents
   must lie in [1, 2^30] with S >= T. opt may be NULL. Plans and allocates the
   chosen algorithm's workspace per call: repeated calls of one shape should
   use a plan. */
int kokkosmla_attention_f(const float* q, const float* latent, const float* w_uk, const float* w_uv,
                          float* out, int64_t B, int64_t T, int64_t S, int64_t H, int64_t D, int64_t R,
                          const kokkosmla_options* opt);
int kokkosmla_attention_d(const double* q, const double* latent, const double* w_uk, const double* w_uv,
                          double* out, int64_t B, int64_t T, int64_t S, int64_t H, int64_t D, int64_t R,
                          const kokkosmla_options* opt);

/* A KokkosMLA::Plan: the algorithm and tiles chosen, and the workspace
   allocated, once for one shape; execute allocates nothing. An execution uses
   the plan's workspace: one plan must not execute on two threads at once.
   Destroy every plan before Kokkos is finalized. */
typedef struct kokkosmla_plan_f kokkosmla_plan_f;
typedef struct kokkosmla_plan_d kokkosmla_plan_d;

/* On success *plan is a new plan; on failure it is NULL. opt may be NULL. */
int kokkosmla_plan_create_f(kokkosmla_plan_f** plan, int64_t B, int64_t T, int64_t S, int64_t H, int64_t D,
                            int64_t R, const kokkosmla_options* opt);
int kokkosmla_plan_create_d(kokkosmla_plan_d** plan, int64_t B, int64_t T, int64_t S, int64_t H, int64_t D,
                            int64_t R, const kokkosmla_options* opt);
/* The arrays have the extents the plan was created with. */
int kokkosmla_plan_execute_f(const kokkosmla_plan_f* plan, const float* q, const float* latent,
                             const float* w_uk, const float* w_uv, float* out);
int kokkosmla_plan_execute_d(const kokkosmla_plan_d* plan, const double* q, const double* latent,
                             const double* w_uk, const double* w_uv, double* out);
/* As above with q and out (B, T, H, D) and the latent (B, S, R) given by
   strides in elements: query t of sequence b, head h, starts q_row_stride *
   (b * T + t) + q_head_stride * h elements from q, its D values contiguous
   (0, 0: contiguous), and likewise its output in out; latent row s of
   sequence b starts latent_row_stride * (b * S + s) elements from latent,
   its R values contiguous (0: contiguous). The first D columns of a (B, T,
   H, W) array have strides H * W and W; the latent part of a (B, S, R + Dr)
   array has row stride R + Dr. Rows whose start and strides are multiples
   of 16 bytes are read and written where they lie, others copied. Rows or
   heads that would overlap are rejected. */
int kokkosmla_plan_execute_strided_f(const kokkosmla_plan_f* plan, const float* q, int64_t q_row_stride,
                                     int64_t q_head_stride, const float* latent, int64_t latent_row_stride,
                                     const float* w_uk, const float* w_uv, float* out, int64_t out_row_stride,
                                     int64_t out_head_stride);
int kokkosmla_plan_execute_strided_d(const kokkosmla_plan_d* plan, const double* q, int64_t q_row_stride,
                                     int64_t q_head_stride, const double* latent, int64_t latent_row_stride,
                                     const double* w_uk, const double* w_uv, double* out,
                                     int64_t out_row_stride, int64_t out_head_stride);
/* The algorithm the plan runs (never KOKKOSMLA_AUTO), in *algorithm. */
int kokkosmla_plan_algorithm_f(const kokkosmla_plan_f* plan, int* algorithm);
int kokkosmla_plan_algorithm_d(const kokkosmla_plan_d* plan, int* algorithm);
/* NULL is ignored. */
int kokkosmla_plan_destroy_f(kokkosmla_plan_f* plan);
int kokkosmla_plan_destroy_d(kokkosmla_plan_d* plan);

/* How a kokkosmla_cache stores its tokens (KokkosMLA::CacheStorage; the byte
   layout, scales and rounding are in docs/serving.md, "FP8 latent cache"). */
typedef enum kokkosmla_cache_storage {
  KOKKOSMLA_CACHE_NATIVE = 0,        /* elements of the function's type (float or double) */
  KOKKOSMLA_CACHE_FP8_PER_BLOCK = 1, /* FlashMLA's token: R e4m3 latent values, R / 128 fp32 scales (one
                                        per 128 channels), Dr bf16 RoPE values; R a multiple of 128 */
  KOKKOSMLA_CACHE_FP8_PER_TENSOR = 2 /* R e4m3 latent values, Dr e4m3 RoPE values; one fp32 scale for the
                                        latent (fp8_latent_scale), one for the RoPE keys (fp8_rope_scale) */
} kokkosmla_cache_storage;

/* The bytes of one token of an FP8 storage, in *bytes: R + 4 R / 128 + 2 Dr
   (656 for R = 512, Dr = 64) for KOKKOSMLA_CACHE_FP8_PER_BLOCK, R + Dr for
   KOKKOSMLA_CACHE_FP8_PER_TENSOR. Fails for KOKKOSMLA_CACHE_NATIVE, or
   FP8_PER_BLOCK with R not a multiple of 128. Needs no initialisation. */
int kokkosmla_fp8_token_bytes(int storage, int64_t latent_dim, int64_t rope_dim, int64_t* bytes);

/* A latent KV cache (KokkosMLA::LatentCache; docs/serving.md), in
   default-memory-space memory of the element type of the function it is
   given to (or, with an FP8 storage, of bytes). Rows are latent_dim wide, with the RoPE keys in k_rope (rows
   rope_dim wide; NULL when rope_dim = 0); or, when packed is nonzero,
   latent_dim + rope_dim wide, the RoPE keys after the latent (FlashMLA's
   layout; k_rope NULL).
     contiguous (block_table NULL): latent (B, page_size, W); token s of
       sequence b is row (b, s); a sequence holds at most page_size tokens.
     paged: latent (pages, page_size, W) and block_table (B,
       pages_per_sequence) of page indices; token s of sequence b is row
       (block_table[b][s / page_size], s % page_size); a sequence holds at most
       pages_per_sequence * page_size tokens.
   seqlens (B): tokens each sequence holds, the newest included. B is the
   batch of the call.
   FP8 (storage KOKKOSMLA_CACHE_FP8_PER_BLOCK or _FP8_PER_TENSOR): latent
   points to the tokens' bytes, rows of kokkosmla_fp8_token_bytes(storage,
   latent_dim, rope_dim) bytes addressed as above, each holding its RoPE keys
   after the latent; k_rope is NULL and packed 0. Append quantises into it
   and attention dequantises (the arrays of the calls stay float or double).
   The fields after packed are zero in a zeroed struct, which is a native
   cache: start from one ({0} or memset) so that code written before them
   keeps its meaning. */
typedef struct kokkosmla_cache {
  void* latent;
  void* k_rope;
  const int* block_table;
  const int* seqlens;
  int64_t pages;              /* paged: latent's first extent; contiguous: ignored */
  int64_t page_size;          /* tokens per page (contiguous: per sequence) */
  int64_t pages_per_sequence; /* paged: block_table's second extent; contiguous: ignored */
  int64_t latent_dim;         /* R */
  int64_t rope_dim;           /* Dr, 0 without a RoPE part */
  int packed;
  int storage;                 /* a kokkosmla_cache_storage; 0: native */
  int fp8_power_of_two_scales; /* nonzero: append rounds FP8_PER_BLOCK scales up to powers of two;
                                  FP8_PER_TENSOR scales must be powers of two */
  float fp8_latent_scale;      /* FP8_PER_TENSOR: a latent value is its e4m3 x this (finite, > 0) */
  float fp8_rope_scale;        /* FP8_PER_TENSOR: a RoPE key is its e4m3 x this (finite, > 0) */
} kokkosmla_cache;

/* A KokkosMLA::CachePlan: attention of B sequences' Tq newest queries each
   (H heads of width D) over caches of latent_dim R, rope_dim Dr and at most
   capacity tokens per sequence; split count and workspace chosen once. Query
   i of sequence b sits at position seqlens[b] - Tq + i. Same rules as plans.
   kokkosmla_cache_plan_create plans for native caches; the _storage form
   for caches of the given kokkosmla_cache_storage (a plan serves caches of
   one storage; FP8 caches are dequantised into the plan's workspace on each
   execution, B x capacity x (R + Dr) elements). */
typedef struct kokkosmla_cache_plan_f kokkosmla_cache_plan_f;
typedef struct kokkosmla_cache_plan_d kokkosmla_cache_plan_d;

int kokkosmla_cache_plan_create_f(kokkosmla_cache_plan_f** plan, int64_t B, int64_t Tq, int64_t H, int64_t D,
                                  int64_t R, int64_t Dr, int64_t capacity, const kokkosmla_options* opt);
int kokkosmla_cache_plan_create_d(kokkosmla_cache_plan_d** plan, int64_t B, int64_t Tq, int64_t H, int64_t D,
                                  int64_t R, int64_t Dr, int64_t capacity, const kokkosmla_options* opt);
int kokkosmla_cache_plan_create_storage_f(kokkosmla_cache_plan_f** plan, int64_t B, int64_t Tq, int64_t H,
                                          int64_t D, int64_t R, int64_t Dr, int64_t capacity, int storage,
                                          const kokkosmla_options* opt);
int kokkosmla_cache_plan_create_storage_d(kokkosmla_cache_plan_d** plan, int64_t B, int64_t Tq, int64_t H,
                                          int64_t D, int64_t R, int64_t Dr, int64_t capacity, int storage,
                                          const kokkosmla_options* opt);
/* q (B, Tq, H, D); q_rope (B, Tq, H, Dr), NULL when Dr = 0; w_uk and w_uv
   (R, H, D); out (B, Tq, H, D); lse (B, Tq, H) natural-log log-sum-exp of
   each row, or NULL. A row that sees no key gets out 0 and lse +inf. */
int kokkosmla_cache_plan_execute_f(const kokkosmla_cache_plan_f* plan, const float* q, const float* q_rope,
                                   const kokkosmla_cache* cache, const float* w_uk, const float* w_uv,
                                   float* out, float* lse);
int kokkosmla_cache_plan_execute_d(const kokkosmla_cache_plan_d* plan, const double* q, const double* q_rope,
                                   const kokkosmla_cache* cache, const double* w_uk, const double* w_uv,
                                   double* out, double* lse);
/* As above with q, q_rope and out given by row and head strides (as for
   kokkosmla_plan_execute_strided), e.g. the two parts of one (B, Tq, H, D +
   Dr) query projection p: q = p with strides H * (D + Dr) and D + Dr, q_rope
   = p + D with the same strides; and lse by a row stride: row (b * Tq + t)
   starts lse_row_stride * (b * Tq + t) elements from lse, its H values
   contiguous (0: H). lse is written where it lies at any row stride. */
int kokkosmla_cache_plan_execute_strided_f(const kokkosmla_cache_plan_f* plan, const float* q,
                                           int64_t q_row_stride, int64_t q_head_stride, const float* q_rope,
                                           int64_t q_rope_row_stride, int64_t q_rope_head_stride,
                                           const kokkosmla_cache* cache, const float* w_uk, const float* w_uv,
                                           float* out, int64_t out_row_stride, int64_t out_head_stride,
                                           float* lse, int64_t lse_row_stride);
int kokkosmla_cache_plan_execute_strided_d(const kokkosmla_cache_plan_d* plan, const double* q,
                                           int64_t q_row_stride, int64_t q_head_stride, const double* q_rope,
                                           int64_t q_rope_row_stride, int64_t q_rope_head_stride,
                                           const kokkosmla_cache* cache, const double* w_uk,
                                           const double* w_uv, double* out, int64_t out_row_stride,
                                           int64_t out_head_stride, double* lse, int64_t lse_row_stride);
/* Parts each sequence's keys are split into, in *splits. */
int kokkosmla_cache_plan_splits_f(const kokkosmla_cache_plan_f* plan, int* splits);
int kokkosmla_cache_plan_splits_d(const kokkosmla_cache_plan_d* plan, int* splits);
/* NULL is ignored. */
int kokkosmla_cache_plan_destroy_f(kokkosmla_cache_plan_f* plan);
int kokkosmla_cache_plan_destroy_d(kokkosmla_cache_plan_d* plan);

/* One cache-attention call with the arrays of kokkosmla_cache_plan_execute;
   plans (and allocates) per call, so serving loops should hold a plan. */
int kokkosmla_cache_attention_f(const float* q, const float* q_rope, const kokkosmla_cache* cache,
                                const float* w_uk, const float* w_uv, float* out, float* lse, int64_t B,
                                int64_t Tq, int64_t H, int64_t D, const kokkosmla_options* opt);
int kokkosmla_cache_attention_d(const double* q, const double* q_rope, const kokkosmla_cache* cache,
                                const double* w_uk, const double* w_uv, double* out, double* lse, int64_t B,
                                int64_t Tq, int64_t H, int64_t D, const kokkosmla_options* opt);

/* Writes each of B sequences' Tn newest tokens into the cache, token i of
   sequence b at position seqlens[b] - Tn + i (seqlens already count them):
   new_latent (B, Tn, W) with W the cache's row width (latent_dim, or
   latent_dim + rope_dim when packed); new_k_rope (B, Tn, Dr) when the cache
   has a separate k_rope, else NULL. An FP8 cache gets them quantised
   (round to nearest even, saturating to +-448): new_latent (B, Tn, R) and
   new_k_rope (B, Tn, Dr) when rope_dim > 0, else NULL. */
int kokkosmla_append_to_cache_f(const kokkosmla_cache* cache, const float* new_latent,
                                const float* new_k_rope, int64_t B, int64_t Tn, const kokkosmla_options* opt);
int kokkosmla_append_to_cache_d(const kokkosmla_cache* cache, const double* new_latent,
                                const double* new_k_rope, int64_t B, int64_t Tn,
                                const kokkosmla_options* opt);

#ifdef __cplusplus
}
#endif

#endif
