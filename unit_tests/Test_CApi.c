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
  free(p->q);
  free(p->latent);
  free(p->w_uk);
  free(p->w_uv);
  free(p->out);
  CHECK(kokkosmla_free(p->dq) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_free(p->dlatent) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_free(p->dw_uk) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_free(p->dw_uv) == KOKKOSMLA_SUCCESS);
  CHECK(kokkosmla_free(p->dout) == KOKKOSMLA_SUCCESS);
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
    CHECK(kokkosmla_plan_create_f(&plan, s.B, s.T, s.S, s.H, s.D, s.R, NULL) == KOKKOSMLA_SUCCESS);
    CHECK(kokkosmla_plan_execute_f(plan, dev, dev + nq, dev + nq + nl, dev + nq + nl + nw, out) ==
          KOKKOSMLA_SUCCESS);
    CHECK(kokkosmla_plan_destroy_f(plan) == KOKKOSMLA_SUCCESS);
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
