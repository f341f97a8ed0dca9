// test_lnsplit.c — the split LayerNorm kernels of 2D tensor parallelism (backend.h "split
// LayerNorm") against the whole LayerNorm: C channels cut into S shards, each shard's per-row
// partials summed here as the grid row's all-reduce would, must give the whole kernels' output,
// mean, rstd, input gradient and (shard by shard) weight and bias gradients within 1e-5.
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/rng.h"
#include "test.h"

enum { N = 7, C = 48, S = 3, CS = C / S };

static Rng rng;

static void fill(float *x, size_t n, float s, float mu) {
    for (size_t i = 0; i < n; i++)
        x[i] = mu + s * rng_normal(&rng);
}

// x (N,C) → shard k's columns (N,CS)
static void cut(float *dst, const float *src, int k) {
    for (int n = 0; n < N; n++)
        memcpy(dst + n * CS, src + n * C + k * CS, CS * sizeof(float));
}

static int near(const float *a, const float *b, size_t n, double tol) {
    for (size_t i = 0; i < n; i++)
        if (!close_enough(a[i], b[i], tol, tol)) return 0;
    return 1;
}

TEST(split_layernorm_equals_whole) {
    const Backend *be = backend_cpu();
    float x[N * C], w[C], b[C], dout[N * C], out[N * C], mean[N], rstd[N];
    float dx[N * C] = {0}, dw[C] = {0}, db[C] = {0};
    fill(x, N * C, 2.f, 0.5f), fill(w, C, 0.3f, 1.f), fill(b, C, 0.3f, 0.f);
    fill(dout, N * C, 1.f, 0.f);
    be->layernorm_forward(out, mean, rstd, x, w, b, N, C);
    be->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
    float xs[S][N * CS], ds[S][N * CS], part[N], sum[N], sq[N], ps[N * 2], psum[N * 2];
    memset(sum, 0, sizeof sum), memset(sq, 0, sizeof sq), memset(psum, 0, sizeof psum);
    for (int k = 0; k < S; k++) { // the row's all-reduce of Σ x
        cut(xs[k], x, k), cut(ds[k], dout, k);
        be->ln_split_stats(part, xs[k], NULL, N, CS);
        for (int n = 0; n < N; n++)
            sum[n] += part[n];
    }
    for (int n = 0; n < N; n++)
        sum[n] /= C;              // the mean
    for (int k = 0; k < S; k++) { // Σ (x − mean)²
        be->ln_split_stats(part, xs[k], sum, N, CS);
        for (int n = 0; n < N; n++)
            sq[n] += part[n];
    }
    CHECK(near(sum, mean, N, 1e-5), "mean");
    float rs[N];
    for (int k = 0; k < S; k++) {
        float o[N * CS], want[N * CS];
        be->ln_split_apply(o, rs, xs[k], sum, sq, w + k * CS, b + k * CS, N, CS, C);
        cut(want, out, k);
        CHECK(near(o, want, N * CS, 1e-5), "forward, shard %d", k);
        be->ln_split_bwd_stats(ps, ds[k], xs[k], w + k * CS, sum, rs, N, CS);
        for (int n = 0; n < 2 * N; n++)
            psum[n] += ps[n];
    }
    CHECK(near(rs, rstd, N, 1e-5), "rstd");
    for (int k = 0; k < S; k++) {
        float g[N * CS] = {0}, gw[CS] = {0}, gb[CS] = {0}, want[N * CS];
        be->ln_split_backward(g, gw, gb, ds[k], xs[k], w + k * CS, sum, rs, psum, N, CS, C);
        cut(want, dx, k);
        CHECK(near(g, want, N * CS, 1e-5), "input gradient, shard %d", k);
        CHECK(near(gw, dw + k * CS, CS, 1e-5) && near(gb, db + k * CS, CS, 1e-5),
              "weight/bias gradients, shard %d", k);
    }
}

int main(void) {
    rng_seed(&rng, 99, 1);
    RUN(split_layernorm_equals_whole);
    return test_summary();
}
