// cuda_fused.c — the CUDA backend's fused ops (backend.h "fused ops"):
//   * matmul_gelu_forward: the MLP's up product with its GELU in cuBLASLt's epilogue
//     (GELU_AUX_BIAS: gelu(x·wᵀ + b) into out, the pre-activation written beside it);
//   * matmul_gelu_backward: the down product's backward, dW and the bias first (they read gin,
//     which dpre may overwrite), then d(gin)·gelu'(pre) in the epilogue of the product that
//     forms d(gin) (DGELU): no fp32 d(gin) in memory, no GELU backward pass;
//   * residual_layernorm_forward: the residual add and the LayerNorm after it in one kernel
//     (the same bits as the two kernels);
//   * cu_dw_product: the products' weight gradient with the bias gradient in its epilogue
//     (BGRADB) instead of a column-sum pass over the output gradient (cuda_ops.c uses it too).
// LOOM_CUDA_FUSE picks which run: a list of gelu, ln, bgrad (separated by ',' or '+': "gelu+ln"
// passes through bench_gpu.sh's variants), or all, or none (the default, until a GPU run has
// measured them). An op not picked declines (returns 0) and the
// model runs the ops it stands for. The GELU epilogues run in the 16-bit modes only, with an
// fp32 pre-activation (or a marked one, ACT16_FCH: bf16, as llm.c keeps it) and widths that are
// multiples of 8; where cuBLASLt has no plan for them the ops decline from then on for that
// kind of GELU input (with one note on stderr).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common.h"
#include "cuda_blas.h"
#include "cuda_impl.h"
#include "cuda_ops.h"

// (read at every call: a test switches it between calls; a few reads a layer cost nothing)
int cu_fuse(int what) {
    const char *e = getenv("LOOM_CUDA_FUSE");
    if (e && !strcmp(e, "all")) return 1;
    int mask = (cu_list_has(e, "gelu") ? CU_FUSE_GELU : 0) |
               (cu_list_has(e, "ln") ? CU_FUSE_LN : 0) |
               (cu_list_has(e, "bgrad") ? CU_FUSE_BGRAD : 0);
    return (mask & what) != 0;
}

// cuBLASLt had no plan for one of the GELU epilogues with an fp32 (0) or a 16-bit (1) GELU
// input: both GELU ops decline with such an input from now on
static int gelu_off[2];
static int decline(const char *what, int pre16) {
    if (!gelu_off[pre16])
        fprintf(stderr,
                "loom: LOOM_CUDA_FUSE=gelu: cuBLASLt has no %s plan with a %s GELU input here; "
                "the MLP's products and GELU run unfused\n",
                what, pre16 ? "bf16" : "fp32");
    gelu_off[pre16] = 1;
    return 0;
}

static int gelu_fusable(int a, int b, const float *pre) {
    return cu_fuse(CU_FUSE_GELU) && !gelu_off[cu_act16(pre) != 0] &&
           (cu_ctx.dtype == CU_BF16 || cu_ctx.dtype == CU_FP16) && a % 8 == 0 && b % 8 == 0;
}

int cuda_matmul_gelu_forward(float *out, float *pre, const float *inp, const float *w,
                             const float *bias, int N, int C, int OC) {
    if (!gelu_fusable(C, OC, pre) || N <= 0) return 0;
    cu_prof_begin(PROF_MM_F);
    const void *x = cu_bf16_act(SCR_BF_A, inp, (size_t)N * C);
    const void *wb = cu_bf16_weight(w, (size_t)OC, (size_t)C, (size_t)OC);
    int o16 = (cu_act16(out) ? CB_BF16_C : 0) | (cu_act16(pre) ? CB_BF16_AUX : 0);
    // column-major (OC,N) = W·xᵀ, as cuda_ops.c's forward; aux (OC,N) too
    int ok = cb_matmul_ep(CB_EP_GELU_AUX, 1, 0, OC, N, C, wb, C, x, C, out, OC, 0.0f, (void *)bias,
                          pre, OC, CB_BF16_AB | o16, 0);
    cu_prof_end(PROF_MM_F);
    return ok ? 1 : decline("GELU_AUX_BIAS", cu_act16(pre) != 0);
}

void cu_dw_product(float *dw, float *dbias, const float *dout, const void *x, const void *d, int N,
                   int C, int OC, int P) {
    // dW (OC,C) += doutᵀ·x: column-major (C,OC) += xᶜᵐ(C,N) · (dᶜᵐ)ᵀ(N,OC)
    if (dbias && cu_fuse(CU_FUSE_BGRAD) && P == OC) {
        float *bg = cu_scratch(SCR_BGRAD, (size_t)OC * sizeof(float));
        if (cb_matmul_ep(CB_EP_BGRADB, 0, 1, C, OC, N, x, C, d, P, dw, C, 1.0f, bg, NULL, 0,
                         CB_BF16_AB, 0)) {
            k_axpby(dbias, 1.0f, bg, 1.0f, (size_t)OC); // the epilogue writes; dbias accumulates
            return;
        }
        static int noted;
        if (!noted++)
            fprintf(stderr,
                    "loom: LOOM_CUDA_FUSE=bgrad: cuBLASLt has no BGRADB plan for a "
                    "%d x %d x %d product; its bias gradient is summed apart\n",
                    C, OC, N);
    }
    cb_matmul(0, 1, C, OC, N, x, C, d, P, dw, C, 1.0f, NULL, CB_BF16_AB);
    if (dbias && cu_act16(dout))
        k_bias_backward16(dbias, dout, N, OC);
    else if (dbias)
        k_bias_backward(dbias, dout, N, OC);
}

int cuda_matmul_gelu_backward(float *dpre, float *dw, float *dbias, const float *dout,
                              const float *gin, const float *pre, const float *w, int N, int C,
                              int OC) {
    if (!gelu_fusable(C, OC, pre) || N <= 0) return 0;
    int d16 = cu_act16(dout),
        p16 = (cu_act16(dpre) ? CB_BF16_C : 0) | (cu_act16(pre) ? CB_BF16_AUX : 0);
    const void *wb = cu_bf16_weight(w, (size_t)OC, (size_t)C, (size_t)OC);
    void *d = d16 ? (void *)dout : cu_scratch(SCR_BF_A, (size_t)N * OC * 2);
    // d(gin) (N,C) = dout·W: column-major (C,N) = Wᶜᵐ(C,OC) · dᶜᵐ(OC,N), times gelu'(pre)
    if (!cb_matmul_ep(CB_EP_DGELU, 0, 0, C, N, OC, wb, C, d, OC, dpre, C, 0.0f, NULL, (void *)pre,
                      C, CB_BF16_AB | p16, 1))
        return decline("DGELU", cu_act16(pre) != 0);
    cu_prof_begin(PROF_MM_B);
    if (!d16) k_to_half_pad(d, dout, (size_t)N, (size_t)OC, (size_t)OC);
    const void *x = cu_bf16_act(SCR_BF_B, gin, (size_t)N * C);
    cu_dw_product(dw, dbias, dout, x, d, N, C, OC, OC);
    // after dW and the bias, which read gin and dout (stream order): dpre may be gin
    if (!cb_matmul_ep(CB_EP_DGELU, 0, 0, C, N, OC, wb, C, d, OC, dpre, C, 0.0f, NULL, (void *)pre,
                      C, CB_BF16_AB | p16, 0))
        die(EXIT_IO, "CUDA: cuBLASLt refused a DGELU product it had planned (internal error)");
    cu_prof_end(PROF_MM_B);
    return 1;
}

int cuda_residual_layernorm_forward(float *res, float *ln, float *mean, float *rstd, const float *a,
                                    const float *b, const float *w, const float *bias, int N,
                                    int C) {
    if (!cu_fuse(CU_FUSE_LN)) return 0;
    cu_prof_begin(PROF_LN_F);
    k_residual_layernorm_forward(res, ln, cu_act16(ln), mean, rstd, a, b, w, bias, N, C);
    cu_prof_end(PROF_LN_F);
    return 1;
}
