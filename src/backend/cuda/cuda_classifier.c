// cuda_classifier.c — the classifier without its (N,V) logits (backend.h's `classifier`):
// a chunk of CLS_ROWS rows at a time, logits = x·wteᵀ into scratch (bf16 in --dtype bf16, the
// vocabulary padded to a multiple of 64 as the linear layers pad it; fp32 otherwise), then one
// kernel per chunk computes each row's loss and, for the gradient, overwrites the logits with
// dlogits = (softmax − onehot)·scale, which two products turn into dx and dwte += before the
// next chunk reuses the scratch. The head's backward calls it again instead of keeping the
// logits: one more forward product of the head, against passes over the (N,V) fp32
// probabilities and their memory (3.3 GB for GPT-2 at B·T = 16384).

#include "../../common.h"
#include "cuda_blas.h"
#include "cuda_impl.h"
#include "cuda_ops.h"

enum { CLS_ROWS = 2048 };

double cuda_classifier(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                       const int *targets, float scale, int N, int C, int V) {
    if (N <= 0) return 0.0;
    int grad = dx != NULL, bf = cu_ctx.dtype == CU_BF16;
    int P = bf && V % 8 ? (V + 63) / 64 * 64 : V; // padded vocabulary (zero weight rows)
    int R = N < CLS_ROWS ? N : CLS_ROWS;
    size_t es = bf ? 2 : 4;
    cu_prof_begin(grad ? PROF_XENT_B : PROF_XENT_F);
    const int *tg = cu_ints(targets, (size_t)N);
    const char *xa = bf ? cu_bf16_act(SCR_BF_B, x, (size_t)N * C) : (const void *)x;
    const void *wa = bf ? cu_bf16_weight(wte, (size_t)V, (size_t)C, (size_t)P) : (const void *)wte;
    void *lg = cu_scratch(SCR_BF_OUT, (size_t)R * P * es); // a chunk of logits (R,P)
    int fl = bf ? CB_BF16_AB | CB_BF16_C : 0, fg = bf ? CB_BF16_AB : 0;
    for (int n0 = 0; n0 < N; n0 += R) {
        int nr = N - n0 < R ? N - n0 : R;
        const void *xc = xa + (size_t)n0 * C * es;
        cb_matmul(1, 0, P, nr, C, wa, C, xc, C, lg, P, 0.0f, NULL, fl);
        k_xent_chunk(lg, bf, losses + n0, tg + n0, nr, V, P, grad ? scale : 0.0f, grad);
        if (!grad) continue;
        cb_matmul(0, 0, C, nr, P, wa, C, lg, P, dx + (size_t)n0 * C, C, 0.0f, NULL, fg);
        cb_matmul(0, 1, C, V, nr, xc, C, lg, P, dwte, C, 1.0f, NULL, fg);
    }
    cu_prof_end(grad ? PROF_XENT_B : PROF_XENT_F);
    return cu_sum_losses(losses, N);
}
