/* The C interface as a C program sees it: lifecycle, results against a plain
 * double reference, plans, and errors. Arrays live in the default memory space
 * (kokkosmla_malloc), so the same test runs on device builds. */

#include <kokkosmla.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* Expects status from a call and, when non-NULL, piece in kokkosmla_last_error(). */
static void expect_error(int got, int status, const char* piece, int line) {
  const char* message = kokkosmla_last_error();
  if (got != status) {
    fprintf(stderr, "%s:%d: status %d, expected %d (%s)\n", __FILE__, line, got, status, message);
    ++failures;
  }
  if (piece && !strstr(message, piece)) {
    fprintf(stderr, "%s:%d: '%s' not in the message '%s'\n", __FILE__, line, piece, message);
    ++failures;
  }
}
#define EXPECT_ERROR(call, status, piece) expect_error((call), (status), (piece), __LINE__)

typedef struct {
  int64_t B, T, S, H, D, R;
} shape;

static size_t q_size(shape s) { return (size_t)(s.B * s.T * s.H * s.D); }
static size_t latent_size(shape s) { return (size_t)(s.B * s.S * s.R); }
static size_t weight_size(shape s) { return (size_t)(s.R * s.H * s.D); }

/* Deterministic values in [-scale, scale], never all equal. */
static void fill(double* x, size_t n, unsigned seed, double scale) {
  size_t i;
  for (i = 0; i < n; ++i) x[i] = scale * sin(0.7 * (double)(i + 1) + 1.3 * (double)seed);
}

/* out (B, T, H, D): decompress K and V, then a two-pass softmax per query. */
static void reference(shape s, const double* q, const double* latent, const double* w_uk, const double* w_uv,
                      double scale, int causal, double* out) {
  const size_t kv = (size_t)(s.B * s.S * s.H * s.D);
  double* k = malloc(kv * sizeof(double));
  double* v = malloc(kv * sizeof(double));
  double* p = malloc((size_t)s.S * sizeof(double));
  int64_t b, t, h, d, r, j;
  for (b = 0; b < s.B; ++b)
    for (j = 0; j < s.S; ++j)
      for (h = 0; h < s.H; ++h)
        for (d = 0; d < s.D; ++d) {
          double ks = 0, vs = 0;
          for (r = 0; r < s.R; ++r) {
            const double l = latent[(b * s.S + j) * s.R + r];
            ks += l * w_uk[(r * s.H + h) * s.D + d];
            vs += l * w_uv[(r * s.H + h) * s.D + d];
          }
          k[((b * s.S + j) * s.H + h) * s.D + d] = ks;
          v[((b * s.S + j) * s.H + h) * s.D + d] = vs;
        }
  for (b = 0; b < s.B; ++b)
    for (t = 0; t < s.T; ++t)
      for (h = 0; h < s.H; ++h) {
        const double* qv = q + ((b * s.T + t) * s.H + h) * s.D;
        const int64_t keys = causal ? s.S - s.T + t + 1 : s.S;
        double top = -INFINITY, sum = 0;
        for (j = 0; j < keys; ++j) {
          const double* kv_ = k + ((b * s.S + j) * s.H + h) * s.D;
          double dot = 0;
          for (d = 0; d < s.D; ++d) dot += qv[d] * kv_[d];
          p[j] = scale * dot;
          if (p[j] > top) top = p[j];
        }
        for (j = 0; j < keys; ++j) sum += (p[j] = exp(p[j] - top));
        for (d = 0; d < s.D; ++d) {
          double acc = 0;
          for (j = 0; j < keys; ++j) acc += p[j] * v[((b * s.S + j) * s.H + h) * s.D + d];
          out[((b * s.T + t) * s.H + h) * s.D + d] = acc / sum;
        }
      }
  free(k);
  free(v);
  free(p);
}

static double max_difference(const double* a, const double* b, size_t n) {
  double worst = 0;
  size_t i;
  for (i = 0; i < n; ++i) {
    const double e = fabs(a[i] - b[i]);
    if (!(e <= worst)) worst = e; /* NaN wins */
  }
  return worst;
}

/* One problem: host inputs and reference, device copies. */
typedef struct {
  shape s;
  double *q, *latent, *w_uk, *w_uv, *out;      /* host */
  double *dq, *dlatent, *dw_uk, *dw_uv, *dout; /* default memory space */
} problem;

static double* to_device(const double* host, size_t n) {
  double* d = kokkosmla_malloc(n * sizeof(double));
  CHECK(d != NULL);
  CHECK(kokkosmla_copy_to_device(d, host, n * sizeof(double)) == KOKKOSMLA_SUCCESS);
  return d;
}

/* Frees device allocations (NULL ones too, as kokkosmla_free allows), each checked. */
static void free_on_device(void* const* pointers, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) CHECK(kokkosmla_free(pointers[i]) == KOKKOSMLA_SUCCESS);
}

static problem make_problem(shape s, unsigned seed) {
  problem p;
  p.s = s;
  p.q = malloc(q_size(s) * sizeof(double));
  p.latent = malloc(latent_size(s) * sizeof(double));
  p.w_uk = malloc(weight_size(s) * sizeof(double));
  p.w_uv = malloc(weight_size(s) * sizeof(double));
  p.out = malloc(q_size(s) * sizeof(double));
  fill(p.q, q_size(s), seed, 1.0);
  fill(p.latent, latent_size(s), seed + 1, 1.0);
  fill(p.w_uk, weight_size(s), seed + 2, 0.5);
  fill(p.w_uv, weight_size(s), seed + 3, 0.5);
  fill(p.out, q_size(s), seed + 4, 100.0);
  p.dq = to_device(p.q, q_size(s));
  p.dlatent = to_device(p.latent, latent_size(s));
  p.dw_uk = to_device(p.w_uk, weight_size(s));
  p.dw_uv = to_device(p.w_uv, weight_size(s));
  p.dout = to_device(p.out, q_size(s));
  return p;
}

static void free_problem(problem* p) {
  void* device[5] = {p->dq, p->dlatent, p->dw_uk, p->dw_uv, p->dout};
  free(p->q);
  free(p->latent);
  free(p->w_uk);
  free(p->w_uv);
  free(p->out);
  free_on_device(device, 5);
}

/* The device out, copied into a new host array. */
static double* host_copy_of(const double* device, size_t n) {
  double* host = malloc(n * sizeof(double));
  CHECK(kokkosmla_copy_to_host(host, device, n * sizeof(double)) == KOKKOSMLA_SUCCESS);
  return host;
}

/* n_rows rows of `width` values into columns at .. at + width - 1 of rows of
   `stride` values: a slice of a wider array. */
static void place_rows(double* wide, const double* rows, int64_t n_rows, int64_t width, int64_t stride,
                       int64_t at) {
  int64_t r;
  for (r = 0; r < n_rows; ++r)
    memcpy(wide + r * stride + at, rows + r * width, (size_t)width * sizeof(double));
}

/* Whether columns at .. at + width - 1 of rows of `stride` values hold the
   n_rows rows of `rows` exactly, and every other element `gap`. */
static int holds_rows(const double* wide, const double* rows, int64_t n_rows, int64_t width, int64_t stride,
                      int64_t at, double gap) {
  int64_t r, j;
  for (r = 0; r < n_rows; ++r)
    for (j = 0; j < stride; ++j) {
      const double want = j >= at && j < at + width ? rows[r * width + j - at] : gap;
      if (wide[r * stride + j] != want) return 0;
    }
  return 1;
}

/* n device values, all x. */
static double* device_filled(size_t n, double x) {
  double* host = malloc(n * sizeof(double));
  double* device;
  size_t i;
  for (i = 0; i < n; ++i) host[i] = x;
  device = to_device(host, n);
  free(host);
  return device;
}

/* Max difference between the device out and the reference for opt. */
static double error_of(const problem* p, const kokkosmla_options* opt) {
  const size_t n = q_size(p->s);
  double* expected = malloc(n * sizeof(double));
  double worst;
  const double scale = opt->scale != 0 ? opt->scale : 1.0 / sqrt((double)p->s.D);
  reference(p->s, p->q, p->latent, p->w_uk, p->w_uv, scale, opt->causal, expected);
  CHECK(kokkosmla_copy_to_host(p->out, p->dout, n * sizeof(double)) == KOKKOSMLA_SUCCESS);
  worst = max_difference(p->out, expected, n);
  free(expected);
  return worst;
}

static int run_d(const problem* p, const kokkosmla_options* opt) {
  const shape s = p->s;
  return kokkosmla_attention_d(p->dq, p->dlatent, p->dw_uk, p->dw_uv, p->dout, s.B, s.T, s.S, s.H, s.D, s.R,
                               opt);
}

static void test_double_against_reference(void) {
  const shape shapes[] = {{1, 3, 3, 2, 4, 5}, {2, 3, 7, 3, 4, 6}};
  const int algorithms[] = {KOKKOSMLA_AUTO, KOKKOSMLA_FUSED, KOKKOSMLA_DECOMPRESSED, KOKKOSMLA_ABSORBED};
  size_t i, a;
  for (i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    problem p = make_problem(shapes[i], (unsigned)i);
    for (a = 0; a < 4; ++a) {
      kokkosmla_options opt = kokkosmla_options_default();
      double e;
      opt.algorithm = algorithms[a];
      CHECK(run_d(&p, &opt) == KOKKOSMLA_SUCCESS);
      CHECK(strcmp(kokkosmla_last_error(), "") == 0);
      e = error_of(&p, &opt);
      printf("shape %zu algorithm %d: max error %.3g\n", i, algorithms[a], e);
      CHECK(e < 1e-12);
      opt.causal = 0;
      opt.scale = 0.3;
      CHECK(run_d(&p, &opt) == KOKKOSMLA_SUCCESS);
      CHECK(error_of(&p, &opt) < 1e-12);
    }
    /* A NULL options pointer means the defaults. */
    {
      const kokkosmla_options defaults = kokkosmla_options_default();
      CHECK(run_d(&p, NULL) == KOKKOSMLA_SUCCESS);
      CHECK(error_of(&p, &defaults) < 1e-12);
    }
    free_problem(&p);
  }
}

static void test_plan(void) {
  const shape s = {2, 3, 5, 2, 4, 5};
  problem p = make_problem(s, 7);
  const kokkosmla_options opt = kokkosmla_options_default();
  kokkosmla_plan_d* plan = NULL;
  int algorithm = -1;
  CHECK(kokkosmla_plan_create_d(&plan, s.B, s.T, s.S, s.H, s.D, s.R, &opt) == KOKKOSMLA_SUCCESS);
  CHECK(plan != NULL);
  CHECK(kokkosmla_plan_algorithm_d(plan, &algorithm) == KOKKOSMLA_SUCCESS);
  CHECK(algorithm >= KOKKOSMLA_FUSED && algorithm <= KOKKOSMLA_ABSORBED);
  CHECK(kokkosmla_plan_execute_d(plan, p.dq, p.dlatent, p.dw_uk, p.dw_uv, p.dout) == KOKKOSMLA_SUCCESS);
  CHECK(error_of(&p, &opt) < 1e-12);
  EXPECT_ERROR(kokkosmla_plan_execute_d(plan, p.dq, NULL, p.dw_uk, p.dw_uv, p.dout),
               KOKKOSMLA_ERROR_INVALID_ARGUMENT, "latent is NULL");
  {
    /* q as the first D columns of a (B, T, H, W) array, the latent as the
       first R columns of a (B, S, L) one and out as the first D columns of
       another (B, T, H, W) array, given by strides: the contiguous result
       bit for bit, in place (W and L even: 16-byte rows) or through copies
       (W and L odd), out's other columns untouched. Overlapping heads or
       rows are rejected. */
    const int64_t rows = s.B * s.T * s.H, latent_rows = s.B * s.S;
    double* want = host_copy_of(p.dout, q_size(s));
    int64_t W;
    for (W = s.D + 2; W <= s.D + 3; ++W) {
      const int64_t L = s.R + W - s.D - 1;
      double* wide = calloc((size_t)(rows * W), sizeof(double));
      double* wide_latent = calloc((size_t)(latent_rows * L), sizeof(double));
      double *dwide, *dwide_latent, *dwide_out = device_filled((size_t)(rows * W), -1);
      double* got;
      place_rows(wide, p.q, rows, s.D, W, 0);
      place_rows(wide_latent, p.latent, latent_rows, s.R, L, 0);
      dwide = to_device(wide, (size_t)(rows * W));
      dwide_latent = to_device(wide_latent, (size_t)(latent_rows * L));
      CHECK(kokkosmla_plan_execute_strided_d(plan, dwide, s.H * W, W, dwide_latent, L, p.dw_uk, p.dw_uv,
                                             dwide_out, s.H * W, W) == KOKKOSMLA_SUCCESS);
      got = host_copy_of(dwide_out, (size_t)(rows * W));
      CHECK(holds_rows(got, want, rows, s.D, W, 0, -1));
      EXPECT_ERROR(kokkosmla_plan_execute_strided_d(plan, dwide, s.H * W, s.D - 1, p.dlatent, 0, p.dw_uk,
                                                    p.dw_uv, p.dout, 0, 0),
                   KOKKOSMLA_ERROR_INVALID_ARGUMENT, "q_head_stride = 3");
      EXPECT_ERROR(kokkosmla_plan_execute_strided_d(plan, dwide, s.H * W, W, dwide_latent, s.R - 1, p.dw_uk,
                                                    p.dw_uv, p.dout, 0, 0),
                   KOKKOSMLA_ERROR_INVALID_ARGUMENT, "latent_row_stride = 4 overlaps");
      EXPECT_ERROR(kokkosmla_plan_execute_strided_d(plan, dwide, s.H * W, W, dwide_latent, L, p.dw_uk,
                                                    p.dw_uv, dwide_out, s.H * W, s.D - 1),
                   KOKKOSMLA_ERROR_INVALID_ARGUMENT, "out_head_stride = 3");
      free(got);
      free(wide);
      free(wide_latent);
      CHECK(kokkosmla_free(dwide) == KOKKOSMLA_SUCCESS);
      CHECK(kokkosmla_free(dwide_latent) == KOKKOSMLA_SUCCESS);
      CHECK(kokkosmla_free(dwide_out) == KOKKOSMLA_SUCCESS);
    }
    free(want);
  }
  CHECK(kokkosmla_plan_destroy_d(plan) == KOKKOSMLA_SUCCESS);
  EXPECT_ERROR(kokkosmla_plan_create_d(&plan, s.B, s.T, s.S, s.H, 0, s.R, &opt),
               KOKKOSMLA_ERROR_INVALID_ARGUMENT, "D = 0");
  CHECK(plan == NULL);
  CHECK(kokkosmla_plan_destroy_d(plan) == KOKKOSMLA_SUCCESS); /* NULL is ignored */
  free_problem(&p);
}

static void test_float(void) {
  const shape s = {1, 3, 3, 2, 4, 5};
  const size_t nq = q_size(s), nl = latent_size(s), nw = weight_size(s);
  problem p = make_problem(s, 3);
  float* host = malloc((nq + nl + 2 * nw) * sizeof(float));
  float* dev = kokkosmla_malloc((2 * nq + nl + 2 * nw) * sizeof(float));
  const kokkosmla_options opt = kokkosmla_options_default();
  double worst;
  size_t i;
  kokkosmla_plan_f* plan = NULL;
  for (i = 0; i < nq; ++i) host[i] = (float)p.q[i];
  for (i = 0; i < nl; ++i) host[nq + i] = (float)p.latent[i];
  for (i = 0; i < nw; ++i) {
    host[nq + nl + i] = (float)p.w_uk[i];
    host[nq + nl + nw + i] = (float)p.w_uv[i];
  }
  CHECK(dev != NULL);
  CHECK(kokkosmla_copy_to_device(dev, host, (nq + nl + 2 * nw) * sizeof(float)) == KOKKOSMLA_SUCCESS);
  {
    float* out = dev + nq + nl + 2 * nw;
    CHECK(kokkosmla_attention_f(dev, dev + nq, dev + nq + nl, dev + nq + nl + nw, out, s.B, s.T, s.S, s.H,
                                s.D, s.R, &opt) == KOKKOSMLA_SUCCESS);
    CHECK(kokkosmla_copy_to_host(host, out, nq * sizeof(float)) == KOKKOSMLA_SUCCESS);
    for (i = 0; i < nq; ++i) p.out[i] = host[i];
    CHECK(kokkosmla_copy_to_device(p.dout, p.out, nq * sizeof(double)) == KOKKOSMLA_SUCCESS);
    worst = error_of(&p, &opt);
    printf("float: max error %.3g\n", worst);
    CHECK(worst < 1e-5);
    /* A plan (default options, as opt) gives the same within float rounding. */
    for (i = 0; i < nq; ++i) host[i] = 100.0f;
    CHECK(kokkosmla_copy_to_device(out, host, nq * sizeof(float)) == KOKKOSMLA_SUCCESS);
    CHECK(kokkosmla_plan_create_f(&plan, s.B, s.T, s.S, s.H, s.D, s.R, NULL) == KOKKOSMLA_SUCCESS);
    CHECK(kokkosmla_plan_execute_f(plan, dev, dev + nq, dev + nq + nl, dev + nq + nl + nw, out) ==
          KOKKOSMLA_SUCCESS);
    CHECK(kokkosmla_plan_destroy_f(plan) == KOKKOSMLA_SUCCESS);
    CHECK(kokkosmla_copy_to_host(host, out, nq * sizeof(float)) == KOKKOSMLA_SUCCESS);
    for (i = 0; i < nq; ++i) p.out[i] = host[i];
    CHECK(kokkosmla_copy_to_device(p.dout, p.out, nq * sizeof(double)) == KOKKOSMLA_SUCCESS);
    CHECK(error_of(&p, &opt) < 1e-5);
  }
  CHECK(kokkosmla_free(dev) == KOKKOSMLA_SUCCESS);
  free(host);
  free_problem(&p);
}

/* Rejected calls name the function and argument and leave out untouched. */
static void test_errors(void) {
  const shape s = {1, 3, 3, 2, 4, 5};
  problem p = make_problem(s, 11);
  kokkosmla_options opt = kokkosmla_options_default();
  double* sentinel = malloc(q_size(s) * sizeof(double));
  memcpy(sentinel, p.out, q_size(s) * sizeof(double));

  EXPECT_ERROR(
      kokkosmla_attention_d(p.dq, p.dlatent, p.dw_uk, p.dw_uv, p.dout, s.B, s.T, 2, s.H, s.D, s.R, &opt),
      KOKKOSMLA_ERROR_INVALID_ARGUMENT, "kokkosmla_attention_d: S = 2 keys < T = 3 queries");
  EXPECT_ERROR(
      kokkosmla_attention_d(NULL, p.dlatent, p.dw_uk, p.dw_uv, p.dout, s.B, s.T, s.S, s.H, s.D, s.R, &opt),
      KOKKOSMLA_ERROR_INVALID_ARGUMENT, "q is NULL");
  EXPECT_ERROR(
      kokkosmla_attention_d(p.dq, p.dlatent, p.dw_uk, p.dw_uv, p.dout, s.B, s.T, s.S, -1, s.D, s.R, &opt),
      KOKKOSMLA_ERROR_INVALID_ARGUMENT, "H = -1");
  EXPECT_ERROR(
      kokkosmla_attention_d(p.dq, p.dlatent, p.dw_uk, p.dw_uv, p.dq, s.B, s.T, s.S, s.H, s.D, s.R, &opt),
      KOKKOSMLA_ERROR_INVALID_ARGUMENT, "out aliases q");
  opt.algorithm = 9;
  EXPECT_ERROR(run_d(&p, &opt), KOKKOSMLA_ERROR_INVALID_ARGUMENT, "opt->algorithm = 9");
  opt = kokkosmla_options_default();
  opt.scale = NAN;
  EXPECT_ERROR(run_d(&p, &opt), KOKKOSMLA_ERROR_INVALID_ARGUMENT, "not finite");
  EXPECT_ERROR(kokkosmla_copy_to_host(NULL, p.dout, 8), KOKKOSMLA_ERROR_INVALID_ARGUMENT, "dst is NULL");
  CHECK(kokkosmla_malloc(0) == NULL);
  CHECK(strstr(kokkosmla_last_error(), "kokkosmla_malloc") != NULL);

  CHECK(kokkosmla_copy_to_host(p.out, p.dout, q_size(s) * sizeof(double)) == KOKKOSMLA_SUCCESS);
  CHECK(memcmp(p.out, sentinel, q_size(s) * sizeof(double)) == 0);
  CHECK(strcmp(kokkosmla_last_error(), "") == 0);
  free(sentinel);
  free_problem(&p);
}

/* A cache-attention problem: B sequences in a paged (or contiguous) cache of
   rows W = R (+ Dr when packed) wide, host copies of everything. */
typedef struct {
  int64_t B, Tq, H, D, R, Dr, page_size, pages, pages_per_sequence;
  int packed, paged;
} cache_shape;

static int64_t row_width(cache_shape c) { return c.R + (c.packed ? c.Dr : 0); }

/* The cache row of token s of sequence b. */
static int64_t row_of(cache_shape c, const int* table, int64_t b, int64_t s) {
  if (!c.paged) return b * c.page_size + s;
  return (int64_t)table[b * c.pages_per_sequence + s / c.page_size] * c.page_size + s % c.page_size;
}

/* out (B, Tq, H, D) and lse (B, Tq, H): query i of sequence b at position
   seqlens[b] - Tq + i sees positions <= its own; a row that sees no key has
   out 0 and lse +inf. latent and k_rope are the host cache (k_rope NULL when packed). */
static void cache_reference(cache_shape c, const double* q, const double* q_rope, const double* latent,
                            const double* k_rope, const int* table, const int* seqlens, const double* w_uk,
                            const double* w_uv, double* out, double* lse) {
  const int64_t W = row_width(c);
  const double scale = 1.0 / sqrt((double)(c.D + c.Dr));
  int64_t b, i, h, d, r, j;
  for (b = 0; b < c.B; ++b)
    for (i = 0; i < c.Tq; ++i)
      for (h = 0; h < c.H; ++h) {
        const int64_t row = (b * c.Tq + i) * c.H + h, keys = seqlens[b] - c.Tq + i + 1;
        double top = -INFINITY, sum = 0, acc[16] = {0};
        double* p = malloc((size_t)(keys > 0 ? keys : 1) * sizeof(double));
        for (j = 0; j < keys; ++j) {
          const double* l = latent + row_of(c, table, b, j) * W;
          const double* kr = c.packed ? l + c.R : k_rope + row_of(c, table, b, j) * c.Dr;
          double dot = 0;
          for (d = 0; d < c.D; ++d) {
            double k = 0;
            for (r = 0; r < c.R; ++r) k += l[r] * w_uk[(r * c.H + h) * c.D + d];
            dot += q[row * c.D + d] * k;
          }
          for (d = 0; d < c.Dr; ++d) dot += q_rope[row * c.Dr + d] * kr[d];
          p[j] = scale * dot;
          if (p[j] > top) top = p[j];
        }
        for (j = 0; j < keys; ++j) {
          const double* l = latent + row_of(c, table, b, j) * W;
          const double e = exp(p[j] - top);
          sum += e;
          for (d = 0; d < c.D; ++d) {
            double v = 0;
            for (r = 0; r < c.R; ++r) v += l[r] * w_uv[(r * c.H + h) * c.D + d];
            acc[d] += e * v;
          }
        }
        for (d = 0; d < c.D; ++d) out[row * c.D + d] = keys > 0 ? acc[d] / sum : 0;
        lse[row] = keys > 0 ? top + log(sum) : INFINITY;
        free(p);
      }
}

/* Frees a cache test's device arrays: the cache's, the queries, weights and
   outputs, and the appended tokens. */
static void free_cache_operands(kokkosmla_cache* cache, double* dq, double* dq_rope, double* dw_uk,
                                double* dw_uv, double* dout, double* dlse, double* dfresh,
                                double* dfresh_rope) {
  void* device[12] = {cache->latent, cache->k_rope, (void*)cache->block_table, (void*)cache->seqlens,
                      dq, dq_rope, dw_uk, dw_uv, dout, dlse, dfresh, dfresh_rope};
  free_on_device(device, 12);
}

/* Appends Tq tokens through the C interface, then attends with a plan, in
   double, against the reference; an idle slot (seqlens 0) gets out 0 and
   lse +inf. */
static void test_cache_double(cache_shape c) {
  const int64_t W = row_width(c), rows = (c.paged ? c.pages : c.B) * c.page_size;
  const int64_t capacity = c.paged ? c.pages_per_sequence * c.page_size : c.page_size;
  const size_t nq = (size_t)(c.B * c.Tq * c.H * c.D), nqr = (size_t)(c.B * c.Tq * c.H * c.Dr);
  const size_t nw = (size_t)(c.R * c.H * c.D), nl = (size_t)(rows * W), nk = (size_t)(rows * c.Dr);
  const size_t nrows = (size_t)(c.B * c.Tq * c.H);
  const size_t nnew = (size_t)(c.B * c.Tq * W), nnewr = (size_t)(c.B * c.Tq * c.Dr);
  double *q = malloc(nq * sizeof(double)), *q_rope = malloc((nqr + 1) * sizeof(double));
  double *w_uk = malloc(nw * sizeof(double)), *w_uv = malloc(nw * sizeof(double));
  double *latent = malloc(nl * sizeof(double)), *k_rope = malloc((nk + 1) * sizeof(double));
  double *fresh = malloc(nnew * sizeof(double)), *fresh_rope = malloc((nnewr + 1) * sizeof(double));
  double *out = malloc(nq * sizeof(double)), *lse = malloc(nrows * sizeof(double));
  double *want = malloc(nq * sizeof(double)), *want_lse = malloc(nrows * sizeof(double));
  int* table = malloc((size_t)(c.B * c.pages_per_sequence + 1) * sizeof(int));
  int* seqlens = malloc((size_t)c.B * sizeof(int));
  kokkosmla_cache cache;
  kokkosmla_cache_plan_d* plan = NULL;
  int64_t b, i, x, splits_seen = 0;
  int splits = 0;
  double *dq, *dq_rope = NULL, *dw_uk, *dw_uv, *dout, *dlse, *dfresh, *dfresh_rope = NULL;
  fill(q, nq, 21, 1.0);
  fill(q_rope, nqr + 1, 22, 1.0);
  fill(w_uk, nw, 23, 0.5);
  fill(w_uv, nw, 24, 0.5);
  fill(latent, nl, 25, 1.0);
  fill(k_rope, nk + 1, 26, 1.0);
  fill(fresh, nnew, 27, 1.0);
  fill(fresh_rope, nnewr + 1, 28, 1.0);
  /* Pages in reverse order; sequence b holds capacity - 2b tokens, the last one none. */
  for (x = 0; x < c.B * c.pages_per_sequence; ++x) table[x] = (int)(c.pages - 1 - x % c.pages);
  for (b = 0; b < c.B; ++b) seqlens[b] = b == c.B - 1 ? 0 : (int)(capacity - 2 * b);
  memset(&cache, 0, sizeof cache);
  cache.latent = to_device(latent, nl);
  cache.k_rope = c.packed || c.Dr == 0 ? NULL : to_device(k_rope, nk);
  cache.block_table =
      c.paged ? (const int*)kokkosmla_malloc((size_t)(c.B * c.pages_per_sequence) * sizeof(int)) : NULL;
  cache.seqlens = kokkosmla_malloc((size_t)c.B * sizeof(int));
  if (c.paged)
    CHECK(kokkosmla_copy_to_device((void*)cache.block_table, table,
                                   (size_t)(c.B * c.pages_per_sequence) * sizeof(int)) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_copy_to_device((void*)cache.seqlens, seqlens, (size_t)c.B * sizeof(int)) ==
        KOKKOSMLA_SUCCESS);
  cache.pages = c.pages;
  cache.page_size = c.page_size;
  cache.pages_per_sequence = c.pages_per_sequence;
  cache.latent_dim = c.R;
  cache.rope_dim = c.Dr;
  cache.packed = c.packed;

  /* The Tq newest tokens of every sequence but the idle last one (a batch of
     B - 1), appended on the device and written into the host copy. */
  dfresh = to_device(fresh, nnew);
  if (cache.k_rope) dfresh_rope = to_device(fresh_rope, nnewr);
  CHECK(kokkosmla_append_to_cache_d(&cache, dfresh, dfresh_rope, c.B - 1, c.Tq, NULL) == KOKKOSMLA_SUCCESS);
  for (b = 0; b < c.B - 1; ++b)
    for (i = 0; i < c.Tq; ++i) {
      const int64_t row = row_of(c, table, b, seqlens[b] - c.Tq + i);
      memcpy(latent + row * W, fresh + (b * c.Tq + i) * W, (size_t)W * sizeof(double));
      if (cache.k_rope)
        memcpy(k_rope + row * c.Dr, fresh_rope + (b * c.Tq + i) * c.Dr, (size_t)c.Dr * sizeof(double));
    }

  dq = to_device(q, nq);
  if (c.Dr > 0) dq_rope = to_device(q_rope, nqr);
  dw_uk = to_device(w_uk, nw);
  dw_uv = to_device(w_uv, nw);
  fill(out, nq, 29, 100.0);
  dout = to_device(out, nq);
  dlse = to_device(out, nrows);
  CHECK(kokkosmla_cache_plan_create_d(&plan, c.B, c.Tq, c.H, c.D, c.R, c.Dr, capacity, NULL) ==
        KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_cache_plan_execute_d(plan, dq, dq_rope, &cache, dw_uk, dw_uv, dout, dlse) ==
        KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_cache_plan_splits_d(plan, &splits) == KOKKOSMLA_SUCCESS);
  CHECK(splits >= 1);
  splits_seen = splits;
  cache_reference(c, q, q_rope, latent, k_rope, table, seqlens, w_uk, w_uv, want, want_lse);
  CHECK(kokkosmla_copy_to_host(out, dout, nq * sizeof(double)) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_copy_to_host(lse, dlse, nrows * sizeof(double)) == KOKKOSMLA_SUCCESS);
  {
    double lse_error = 0;
    for (x = 0; x < (int64_t)nrows; ++x) {
      if (isinf(want_lse[x])) {
        CHECK(isinf(lse[x]) && lse[x] > 0);
      } else {
        const double e = fabs(lse[x] - want_lse[x]);
        if (!(e <= lse_error)) lse_error = e; /* NaN wins */
      }
    }
    printf("cache (paged %d, packed %d, Dr %lld, %lld splits): max error %.3g, lse %.3g\n", c.paged, c.packed,
           (long long)c.Dr, (long long)splits_seen, max_difference(out, want, nq), lse_error);
    CHECK(max_difference(out, want, nq) < 1e-12);
    CHECK(lse_error < 1e-12);
  }

  /* q and q_rope as the two parts of one (B, Tq, H, D + Dr) projection,
     out as the first D columns of another, lse with a gap after each token's
     H values, given by strides: the same results bit for bit, the gaps untouched. */
  if (c.Dr > 0) {
    const int64_t P = c.D + c.Dr, tokens = (int64_t)nrows / c.H;
    double* projection = calloc(nrows * (size_t)P, sizeof(double));
    double *dprojection, *dwide_out = device_filled(nrows * (size_t)P, -1);
    double* dwide_lse = device_filled((size_t)(tokens * (c.H + 1)), -1);
    double *got, *got_lse;
    place_rows(projection, q, (int64_t)nrows, c.D, P, 0);
    place_rows(projection, q_rope, (int64_t)nrows, c.Dr, P, c.D);
    dprojection = to_device(projection, nrows * (size_t)P);
    CHECK(kokkosmla_cache_plan_execute_strided_d(plan, dprojection, c.H * P, P, dprojection + c.D, c.H * P, P,
                                                 &cache, dw_uk, dw_uv, dwide_out, c.H * P, P, dwide_lse,
                                                 c.H + 1) == KOKKOSMLA_SUCCESS);
    got = host_copy_of(dwide_out, nrows * (size_t)P);
    got_lse = host_copy_of(dwide_lse, (size_t)(tokens * (c.H + 1)));
    CHECK(holds_rows(got, out, (int64_t)nrows, c.D, P, 0, -1));
    CHECK(holds_rows(got_lse, lse, tokens, c.H, c.H + 1, 0, -1));
    EXPECT_ERROR(kokkosmla_cache_plan_execute_strided_d(plan, dprojection, c.H * P, P, dprojection + c.D, 0,
                                                        P, &cache, dw_uk, dw_uv, dout, 0, 0, dlse, 0),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "q_rope_row_stride = 0");
    EXPECT_ERROR(
        kokkosmla_cache_plan_execute_strided_d(plan, dprojection, c.H * P, P, dprojection + c.D, c.H * P, P,
                                               &cache, dw_uk, dw_uv, dout, 0, 0, dlse, c.H - 1),
        KOKKOSMLA_ERROR_INVALID_ARGUMENT, "lse_row_stride");
    free(got);
    free(got_lse);
    free(projection);
    CHECK(kokkosmla_free(dprojection) == KOKKOSMLA_SUCCESS);
    CHECK(kokkosmla_free(dwide_out) == KOKKOSMLA_SUCCESS);
    CHECK(kokkosmla_free(dwide_lse) == KOKKOSMLA_SUCCESS);
  }

  /* The one-call form gives the same; four forced splits agree within rounding. */
  {
    kokkosmla_options opt = kokkosmla_options_default();
    opt.kv_splits = 4;
    opt.skip_index_check = 1;
    fill(out, nq, 31, 100.0); /* the plan's result must not be what is read back */
    CHECK(kokkosmla_copy_to_device(dout, out, nq * sizeof(double)) == KOKKOSMLA_SUCCESS);
    CHECK(kokkosmla_cache_attention_d(dq, dq_rope, &cache, dw_uk, dw_uv, dout, NULL, c.B, c.Tq, c.H, c.D,
                                      &opt) == KOKKOSMLA_SUCCESS);
    CHECK(kokkosmla_copy_to_host(out, dout, nq * sizeof(double)) == KOKKOSMLA_SUCCESS);
    CHECK(max_difference(out, want, nq) < 1e-12);
  }

  /* Rejected calls name the argument and write nothing. */
  fill(out, nq, 30, 100.0);
  CHECK(kokkosmla_copy_to_device(dout, out, nq * sizeof(double)) == KOKKOSMLA_SUCCESS);
  {
    kokkosmla_cache bad = cache;
    bad.rope_dim = c.Dr + 1;
    EXPECT_ERROR(kokkosmla_cache_plan_execute_d(plan, dq, dq_rope, &bad, dw_uk, dw_uv, dout, dlse),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "kokkosmla_cache_plan_execute_d");
    bad = cache;
    bad.seqlens = NULL;
    EXPECT_ERROR(kokkosmla_cache_plan_execute_d(plan, dq, dq_rope, &bad, dw_uk, dw_uv, dout, dlse),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "cache->seqlens is NULL");
    bad = cache;
    bad.page_size = c.page_size + 1;
    EXPECT_ERROR(kokkosmla_cache_plan_execute_d(plan, dq, dq_rope, &bad, dw_uk, dw_uv, dout, dlse),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "given to a plan made for");
    EXPECT_ERROR(kokkosmla_cache_plan_execute_d(plan, dq, dq_rope, &cache, dw_uk, dw_uv, NULL, dlse),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "out is NULL");
    if (c.Dr > 0)
      EXPECT_ERROR(kokkosmla_cache_plan_execute_d(plan, dq, NULL, &cache, dw_uk, dw_uv, dout, dlse),
                   KOKKOSMLA_ERROR_INVALID_ARGUMENT, "q_rope is NULL");
    seqlens[0] = (int)capacity + 1;
    CHECK(kokkosmla_copy_to_device((void*)cache.seqlens, seqlens, sizeof(int)) == KOKKOSMLA_SUCCESS);
    EXPECT_ERROR(kokkosmla_cache_plan_execute_d(plan, dq, dq_rope, &cache, dw_uk, dw_uv, dout, dlse),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "cache.seqlens(0)");
    EXPECT_ERROR(kokkosmla_append_to_cache_d(&cache, dfresh, dfresh_rope, c.B - 1, c.Tq, NULL),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "cache.seqlens(0)");
    CHECK(strstr(kokkosmla_last_error(), "kokkosmla_append_to_cache_d") != NULL);
    {
      kokkosmla_cache_plan_d* refused = NULL;
      EXPECT_ERROR(kokkosmla_cache_plan_create_d(&refused, c.B, c.Tq, c.H, c.D, c.R, c.Dr, c.Tq - 1, NULL),
                   KOKKOSMLA_ERROR_INVALID_ARGUMENT, "capacity");
      CHECK(refused == NULL);
    }
    CHECK(kokkosmla_copy_to_host(out, dout, nq * sizeof(double)) == KOKKOSMLA_SUCCESS);
    fill(want, nq, 30, 100.0);
    CHECK(max_difference(out, want, nq) == 0);
  }

  CHECK(kokkosmla_cache_plan_destroy_d(plan) == KOKKOSMLA_SUCCESS);
  free_cache_operands(&cache, dq, dq_rope, dw_uk, dw_uv, dout, dlse, dfresh, dfresh_rope);
  free(q), free(q_rope), free(w_uk), free(w_uv), free(latent), free(k_rope), free(fresh), free(fresh_rope);
  free(out), free(lse), free(want), free(want_lse), free(table), free(seqlens);
}

/* The value of an e4m3 code (OCP E4M3: bias 7, NaN 0x7f / 0xff, subnormals k 2^-9). */
static double from_e4m3(unsigned char code) {
  const int e = (code >> 3) & 15, m = code & 7;
  const double v = e == 15 && m == 7 ? NAN : e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
  return code & 0x80 ? -v : v;
}

/* A float read from unaligned little- or big-endian bytes of this machine. */
static double float_at(const unsigned char* p) {
  float x;
  memcpy(&x, p, sizeof x);
  return x;
}

static double from_bf16_at(const unsigned char* p) {
  uint16_t bits;
  uint32_t wide;
  float x;
  memcpy(&bits, p, sizeof bits);
  wide = (uint32_t)bits << 16;
  memcpy(&x, &wide, sizeof x);
  return x;
}

/* An FP8 cache through the C interface, in double: append quantises the new
   tokens of every sequence but an idle last one into a paged cache whose
   other rows hold NaN bytes; the bytes read back decode (as docs/serving.md
   states the layout) to the new values within e4m3 rounding (bf16 for the
   per-block RoPE keys), a per-tensor value beyond 448 x scale saturating;
   cache attention through a storage plan equals the reference over the
   decoded values, for both FP8 storages. */
static void test_cache_fp8(int storage) {
  /* B, Tq, H, D, R, Dr, page_size, pages, pages_per_sequence, packed, paged */
  const cache_shape c = {3, 2, 2, 4, 128, 3, 3, 9, 3, 0, 1};
  const int64_t Tn = 7, rows = c.pages * c.page_size, capacity = c.pages_per_sequence * c.page_size;
  const size_t nq = (size_t)(c.B * c.Tq * c.H * c.D), nqr = (size_t)(c.B * c.Tq * c.H * c.Dr);
  const size_t nw = (size_t)(c.R * c.H * c.D), nrows = (size_t)(c.B * c.Tq * c.H);
  const size_t nnew = (size_t)((c.B - 1) * Tn * c.R), nnewr = (size_t)((c.B - 1) * Tn * c.Dr);
  const int per_block = storage == KOKKOSMLA_CACHE_FP8_PER_BLOCK;
  int64_t token_bytes = 0, b, i, x;
  double *q = malloc(nq * sizeof(double)), *q_rope = malloc(nqr * sizeof(double));
  double *w_uk = malloc(nw * sizeof(double)), *w_uv = malloc(nw * sizeof(double));
  double *fresh = malloc(nnew * sizeof(double)), *fresh_rope = malloc(nnewr * sizeof(double));
  double *latent = calloc((size_t)(rows * c.R), sizeof(double)),
         *k_rope = calloc((size_t)(rows * c.Dr), sizeof(double));
  double *out = malloc(nq * sizeof(double)), *lse = malloc(nrows * sizeof(double));
  double *want = malloc(nq * sizeof(double)), *want_lse = malloc(nrows * sizeof(double));
  int table[9], seqlens[3] = {7, 7, 0}, exponent = 0;
  unsigned char* bytes;
  double worst_quantised = 0;
  kokkosmla_cache cache;
  kokkosmla_cache_plan_d* plan = NULL;
  double *dq, *dq_rope, *dw_uk, *dw_uv, *dout, *dlse, *dfresh, *dfresh_rope;

  CHECK(kokkosmla_fp8_token_bytes(storage, c.R, c.Dr, &token_bytes) == KOKKOSMLA_SUCCESS);
  CHECK(token_bytes == (per_block ? c.R + 4 + 2 * c.Dr : c.R + c.Dr));
  bytes = malloc((size_t)(rows * token_bytes));
  memset(bytes, 0xff, (size_t)(rows * token_bytes)); /* NaN in every row no sequence holds */
  fill(q, nq, 41, 1.0);
  fill(q_rope, nqr, 42, 1.0);
  fill(w_uk, nw, 43, 0.1);
  fill(w_uv, nw, 44, 0.1);
  fill(fresh, nnew, 45, 1.0);
  fill(fresh_rope, nnewr, 46, 1.0);
  fresh[5] = 1000.0; /* per tensor: beyond 448 x scale, saturates */
  for (x = 0; x < c.B * c.pages_per_sequence; ++x) table[x] = (int)(c.pages - 1 - x % c.pages);

  memset(&cache, 0, sizeof cache);
  cache.latent = kokkosmla_malloc((size_t)(rows * token_bytes));
  CHECK(kokkosmla_copy_to_device(cache.latent, bytes, (size_t)(rows * token_bytes)) == KOKKOSMLA_SUCCESS);
  cache.block_table = kokkosmla_malloc(sizeof table);
  cache.seqlens = kokkosmla_malloc(sizeof seqlens);
  CHECK(kokkosmla_copy_to_device((void*)cache.block_table, table, sizeof table) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_copy_to_device((void*)cache.seqlens, seqlens, sizeof seqlens) == KOKKOSMLA_SUCCESS);
  cache.pages = c.pages;
  cache.page_size = c.page_size;
  cache.pages_per_sequence = c.pages_per_sequence;
  cache.latent_dim = c.R;
  cache.rope_dim = c.Dr;
  cache.storage = storage;
  cache.fp8_power_of_two_scales = 1;
  cache.fp8_latent_scale = 1.0f / 64; /* powers of two, as the option requires */
  cache.fp8_rope_scale = 1.0f / 32;

  /* Rejected before anything is written. */
  {
    kokkosmla_cache bad = cache;
    dfresh = to_device(fresh, nnew);
    dfresh_rope = to_device(fresh_rope, nnewr);
    bad.packed = 1;
    EXPECT_ERROR(kokkosmla_append_to_cache_d(&bad, dfresh, dfresh_rope, c.B - 1, Tn, NULL),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "an FP8 token holds its RoPE keys");
    bad = cache;
    bad.storage = 3;
    EXPECT_ERROR(kokkosmla_append_to_cache_d(&bad, dfresh, dfresh_rope, c.B - 1, Tn, NULL),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "cache->storage = 3 is not a kokkosmla_cache_storage");
    EXPECT_ERROR(kokkosmla_append_to_cache_d(&cache, dfresh, NULL, c.B - 1, Tn, NULL),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "new_k_rope is NULL");
    if (!per_block) {
      bad = cache;
      bad.fp8_latent_scale = 0;
      EXPECT_ERROR(kokkosmla_append_to_cache_d(&bad, dfresh, dfresh_rope, c.B - 1, Tn, NULL),
                   KOKKOSMLA_ERROR_INVALID_ARGUMENT, "cache.fp8.latent_scale");
      bad.fp8_latent_scale = 0.1f;
      EXPECT_ERROR(kokkosmla_append_to_cache_d(&bad, dfresh, dfresh_rope, c.B - 1, Tn, NULL),
                   KOKKOSMLA_ERROR_INVALID_ARGUMENT, "not a power of two");
    }
    CHECK(kokkosmla_copy_to_host(bytes, cache.latent, (size_t)(rows * token_bytes)) == KOKKOSMLA_SUCCESS);
    for (x = 0; x < rows * token_bytes; ++x) CHECK(bytes[x] == 0xff);
  }

  /* Sequences 0 and 1 get Tn tokens each; the idle last one none. */
  CHECK(kokkosmla_append_to_cache_d(&cache, dfresh, dfresh_rope, c.B - 1, Tn, NULL) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_copy_to_host(bytes, cache.latent, (size_t)(rows * token_bytes)) == KOKKOSMLA_SUCCESS);
  for (b = 0; b < c.B - 1; ++b)
    for (i = 0; i < Tn; ++i) {
      const int64_t row = row_of(c, table, b, i);
      const unsigned char* t = bytes + row * token_bytes;
      const double* xl = fresh + (b * Tn + i) * c.R;
      const double* xr = fresh_rope + (b * Tn + i) * c.Dr;
      const double scale = per_block ? float_at(t + c.R) : cache.fp8_latent_scale;
      int64_t r;
      if (per_block) CHECK(frexp(scale, &exponent) == 0.5); /* a power of two */
      for (r = 0; r < c.R; ++r) {
        /* the value saturated to +-448 scale, sign kept */
        const double got = from_e4m3(t[r]) * scale, v = fmax(-448 * scale, fmin(448 * scale, xl[r]));
        const double error = fabs(got - v);
        latent[row * c.R + r] = got;
        CHECK(error <= ldexp(fabs(v), -4) + ldexp(scale, -10));
        if (error > worst_quantised) worst_quantised = error;
      }
      for (r = 0; r < c.Dr; ++r) {
        const double got = per_block ? from_bf16_at(t + c.R + 4 + 2 * r)
                                     : from_e4m3(t[c.R + r]) * (double)cache.fp8_rope_scale;
        k_rope[row * c.Dr + r] = got;
        CHECK(fabs(got - xr[r]) <= (per_block ? ldexp(fabs(xr[r]), -8) : ldexp(fabs(xr[r]), -4) + 1e-4));
      }
    }
  if (!per_block) CHECK(latent[row_of(c, table, 0, 0) * c.R + 5] == 448.0 / 64);

  /* Attention over the FP8 cache: sequence 1 holds fewer tokens than it was given. */
  seqlens[1] = 5;
  CHECK(kokkosmla_copy_to_device((void*)cache.seqlens, seqlens, sizeof seqlens) == KOKKOSMLA_SUCCESS);
  dq = to_device(q, nq);
  dq_rope = to_device(q_rope, nqr);
  dw_uk = to_device(w_uk, nw);
  dw_uv = to_device(w_uv, nw);
  dout = to_device(q, nq);
  dlse = to_device(q, nrows);
  EXPECT_ERROR(
      kokkosmla_cache_plan_create_storage_d(&plan, c.B, c.Tq, c.H, c.D, c.R, c.Dr, capacity, 5, NULL),
      KOKKOSMLA_ERROR_INVALID_ARGUMENT, "storage = 5 is not a kokkosmla_cache_storage");
  CHECK(kokkosmla_cache_plan_create_d(&plan, c.B, c.Tq, c.H, c.D, c.R, c.Dr, capacity, NULL) ==
        KOKKOSMLA_SUCCESS);
  EXPECT_ERROR(kokkosmla_cache_plan_execute_d(plan, dq, dq_rope, &cache, dw_uk, dw_uv, dout, dlse),
               KOKKOSMLA_ERROR_INVALID_ARGUMENT, "given to a plan made for");
  CHECK(kokkosmla_cache_plan_destroy_d(plan) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_cache_plan_create_storage_d(&plan, c.B, c.Tq, c.H, c.D, c.R, c.Dr, capacity, storage,
                                              NULL) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_cache_plan_execute_d(plan, dq, dq_rope, &cache, dw_uk, dw_uv, dout, dlse) ==
        KOKKOSMLA_SUCCESS);
  cache_reference(c, q, q_rope, latent, k_rope, table, seqlens, w_uk, w_uv, want, want_lse);
  CHECK(kokkosmla_copy_to_host(out, dout, nq * sizeof(double)) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_copy_to_host(lse, dlse, nrows * sizeof(double)) == KOKKOSMLA_SUCCESS);
  printf("FP8 cache (storage %d): quantisation error %.3g, attention max error %.3g\n", storage,
         worst_quantised, max_difference(out, want, nq));
  CHECK(max_difference(out, want, nq) < 1e-12);
  for (x = 0; x < (int64_t)nrows; ++x)
    CHECK(isinf(want_lse[x]) ? isinf(lse[x]) && lse[x] > 0 : fabs(lse[x] - want_lse[x]) < 1e-12);
  /* The one-call form reads the storage from the cache. */
  fill(out, nq, 47, 100.0);
  CHECK(kokkosmla_copy_to_device(dout, out, nq * sizeof(double)) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_cache_attention_d(dq, dq_rope, &cache, dw_uk, dw_uv, dout, NULL, c.B, c.Tq, c.H, c.D,
                                    NULL) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_copy_to_host(out, dout, nq * sizeof(double)) == KOKKOSMLA_SUCCESS);
  CHECK(max_difference(out, want, nq) < 1e-12);

  CHECK(kokkosmla_cache_plan_destroy_d(plan) == KOKKOSMLA_SUCCESS);
  free_cache_operands(&cache, dq, dq_rope, dw_uk, dw_uv, dout, dlse, dfresh, dfresh_rope);
  free(q), free(q_rope), free(w_uk), free(w_uv), free(fresh), free(fresh_rope), free(latent), free(k_rope);
  free(out), free(lse), free(want), free(want_lse), free(bytes);
}

static void test_cache(void) {
  /* B, Tq, H, D, R, Dr, page_size, pages, pages_per_sequence, packed, paged */
  const cache_shape paged = {3, 2, 3, 4, 5, 2, 3, 9, 3, 0, 1};
  const cache_shape packed = {3, 1, 2, 4, 6, 3, 4, 7, 2, 1, 1};
  const cache_shape contiguous = {2, 3, 2, 5, 7, 0, 11, 0, 0, 0, 0};
  test_cache_double(paged);
  test_cache_double(packed);
  test_cache_double(contiguous);
  {
    int64_t bytes = 0;
    CHECK(kokkosmla_fp8_token_bytes(KOKKOSMLA_CACHE_FP8_PER_BLOCK, 512, 64, &bytes) == KOKKOSMLA_SUCCESS);
    CHECK(bytes == 656);
    EXPECT_ERROR(kokkosmla_fp8_token_bytes(KOKKOSMLA_CACHE_NATIVE, 512, 64, &bytes),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "not an FP8 storage");
    EXPECT_ERROR(kokkosmla_fp8_token_bytes(KOKKOSMLA_CACHE_FP8_PER_BLOCK, 100, 64, &bytes),
                 KOKKOSMLA_ERROR_INVALID_ARGUMENT, "multiple of 128");
  }
  test_cache_fp8(KOKKOSMLA_CACHE_FP8_PER_BLOCK);
  test_cache_fp8(KOKKOSMLA_CACHE_FP8_PER_TENSOR);
}

int main(void) {
  double x = 1;
  void* held;

  /* Before initialisation every call is refused. */
  CHECK(kokkosmla_is_initialized() == 0);
  EXPECT_ERROR(kokkosmla_attention_d(&x, &x, &x, &x, &x, 1, 1, 1, 1, 1, 1, NULL),
               KOKKOSMLA_ERROR_NOT_INITIALIZED, "kokkosmla_initialize");
  CHECK(kokkosmla_malloc(8) == NULL);
  CHECK(kokkosmla_finalize() == KOKKOSMLA_SUCCESS); /* unmatched: nothing to do */

  /* Nested initialisation: only the outermost pair acts. */
  CHECK(kokkosmla_initialize() == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_initialize() == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_finalize() == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_is_initialized() == 1);
  printf("host memory accessible: %d\n", kokkosmla_host_memory_is_accessible());

  test_double_against_reference();
  test_plan();
  test_float();
  test_errors();
  test_cache();

  /* Kokkos is not finalized under a live allocation. */
  held = kokkosmla_malloc(64);
  CHECK(held != NULL);
  EXPECT_ERROR(kokkosmla_finalize(), KOKKOSMLA_ERROR_INVALID_ARGUMENT, "1 kokkosmla_malloc allocation");
  CHECK(kokkosmla_is_initialized() == 1);
  CHECK(kokkosmla_free(held) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_finalize() == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_is_initialized() == 0);
  EXPECT_ERROR(kokkosmla_initialize(), KOKKOSMLA_ERROR_NOT_INITIALIZED, "cannot be initialized again");

  if (failures) {
    fprintf(stderr, "Test_CApi: %d failure(s)\n", failures);
    return 1;
  }
  printf("Test_CApi: all checks passed\n");
  return 0;
}
