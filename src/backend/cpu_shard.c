// cpu_shard.c — the CPU kernels of tensor parallelism's vocabulary shards (backend.h,
// "vocabulary shards"): a rank holds rows [v0, v0+nv) of the embedding (its local table has
// `rows` ≥ nv rows; the rest is padding that never counts) and the matching columns of the
// logits. The cross-entropy over all shards is built from per-row partials the caller reduces
// across the tensor-parallel group: the max, then Σ exp(z − max) and the target's logit.
#include <math.h>
#include <omp.h>
#include <stddef.h>

#include "cpu_shard.h"

void cpu_encoder_forward_shard(float *out, const int *inp, const float *wte, const float *wpe,
                               int v0, int nv, int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int tok = inp[bt] - v0;
        float *o = out + (size_t)bt * C;
        const float *pe = wpe ? wpe + (size_t)(bt % T) * C : NULL;
        const float *te = tok >= 0 && tok < nv ? wte + (size_t)tok * C : NULL;
        for (int c = 0; c < C; c++)
            o[c] = (te ? te[c] : 0.f) + (pe ? pe[c] : 0.f);
    }
}

void cpu_encoder_backward_shard(float *dwte, float *dwpe, const float *dout, const int *inp, int v0,
                                int nv, int B, int T, int C) {
    // channels split across threads: no two threads add to the same element
#pragma omp parallel
    {
        int nth = omp_get_num_threads(), id = omp_get_thread_num();
        int c0 = (int)((long)C * id / nth), c1 = (int)((long)C * (id + 1) / nth);
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C;
            int tok = inp[bt] - v0;
            if (tok >= 0 && tok < nv) {
                float *te = dwte + (size_t)tok * C;
                for (int c = c0; c < c1; c++)
                    te[c] += d[c];
            }
            if (dwpe) {
                float *pe = dwpe + (size_t)(bt % T) * C;
                for (int c = c0; c < c1; c++)
                    pe[c] += d[c];
            }
        }
    }
}

void cpu_xent_shard_max(float *mx, const float *logits, int N, int V, int nv) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * V;
        float m = -INFINITY;
        for (int j = 0; j < nv; j++)
            m = row[j] > m ? row[j] : m;
        mx[n] = m;
    }
}

void cpu_xent_shard_sum(float *st, const float *logits, const float *mx, const int *targets, int v0,
                        int N, int V, int nv) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * V;
        float s = 0.f, m = mx[n];
        for (int j = 0; j < nv; j++)
            s += expf(row[j] - m);
        int t = targets[n] - v0;
        st[2 * n] = s;
        st[2 * n + 1] = t >= 0 && t < nv ? row[t] : 0.f;
    }
}

double cpu_xent_shard_finish(float *lp, float *losses, const float *mx, const float *st, int N,
                             int V, int nv) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = lp + (size_t)n * V, m = mx[n], inv = 1.0f / st[2 * n];
        for (int j = 0; j < nv; j++)
            row[j] = expf(row[j] - m) * inv;
        for (int j = nv; j < V; j++)
            row[j] = 0.f; // padding: probability 0, gradient 0
        losses[n] = logf(st[2 * n]) - (st[2 * n + 1] - m);
    }
    double total = 0.0; // in order: reproducible
    for (int n = 0; n < N; n++)
        total += losses[n];
    return total;
}

void cpu_xent_shard_backward(float *pd, const int *targets, int v0, float scale, int N, int V,
                             int nv) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = pd + (size_t)n * V;
        for (int j = 0; j < V; j++)
            row[j] *= scale;
        int t = targets[n] - v0;
        if (t >= 0 && t < nv) row[t] -= scale;
    }
}
