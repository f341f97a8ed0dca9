// cuda_blas.c — the CUDA backend's matrix products: cuBLASLt for the linear layers (bias as
// an epilogue, so the bias costs no extra pass), cuBLAS strided-batched products for attention.
// Operands and results are fp32 in memory; the compute type follows the backend's dtype:
// CU_FP32 is plain fp32 (CUBLAS_COMPUTE_32F: no TF32), CU_BF16 lets cuBLAS round fp32
// operands to bf16 on the tensor cores and accumulate in fp32; CU_FP16 keeps fp32 operands
// fp32 (the linear layers pass fp16 ones, converted by k_half.cu).
//
// cuBLASLt plans (descriptors, layouts, the heuristic's algorithm) are cached by shape,
// operand alignment and dtype: the model asks for the same few dozen shapes every step.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdint.h>
#include <string.h>

#include "../../common.h"
#include "cuda_blas.h"
#include "cuda_impl.h"

static cublasHandle_t blas;
static cublasLtHandle_t lt;
static void *lt_work;
enum { LT_WORK_BYTES = 32 << 20, PLAN_CAP = 256 };

void cb_check(int status, const char *what, const char *file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    die(EXIT_IO, "cuBLAS error %d (%s) in %s (%s:%d)", status,
        cublasGetStatusString((cublasStatus_t)status), what, file, line);
}
#define CB(x) cb_check((int)(x), #x, __FILE__, __LINE__)

static cublasComputeType_t compute_type(void) {
    switch (cu_ctx.dtype) {
    case CU_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    // fp16: the linear layers round their operands to fp16 themselves (k_half.cu); the fp32
    // operands of the other products stay fp32 (FAST_16F lets cuBLAS choose, shape by shape)
    default: return CUBLAS_COMPUTE_32F;
    }
}

// the 16-bit operand type of CB_BF16_*: the context's half type
static cudaDataType half_type(void) { return cu_ctx.dtype == CU_FP16 ? CUDA_R_16F : CUDA_R_16BF; }

void cb_init(void) {
    CB(cublasCreate(&blas));
    CB(cublasSetStream(blas, cu_ctx.stream));
    CB(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH)); // no TF32 unless a compute type asks
    CB(cublasLtCreate(&lt));
    CU(cu_malloc(&lt_work, LT_WORK_BYTES));
    CB(cublasSetWorkspace(blas, lt_work, LT_WORK_BYTES)); // stream-ordered: shared is safe
}

// ------------------------------------------------------------------ cuBLASLt plans

typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, bias, beta1, dtype, align, bf16; // the key (bf16: CB_*)
    int ep, ldaux; // the key, too: the epilogue (CB_EP_*; 0: none or the bias) and aux's ld
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    int ok; // 0: the heuristic found nothing; use cublasGemmEx
} Plan;

static Plan plans[PLAN_CAP];
static int nplans;

// Largest power of two (≤ 256) dividing the address: what cuBLASLt may assume.
static int align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 4 && a % (uintptr_t)al)
        al >>= 1;
    return al;
}

static int same_key(const Plan *p, const Plan *k) {
    return p->ta == k->ta && p->tb == k->tb && p->m == k->m && p->n == k->n && p->k == k->k &&
           p->lda == k->lda && p->ldb == k->ldb && p->ldc == k->ldc && p->bias == k->bias &&
           p->beta1 == k->beta1 && p->dtype == k->dtype && p->align == k->align &&
           p->bf16 == k->bf16 && p->ep == k->ep && p->ldaux == k->ldaux;
}

// bf16 operands accumulate in plain fp32; fp32 operands in the dtype's compute type
static cublasComputeType_t compute_for(int bf16) {
    return bf16 & CB_BF16_AB ? CUBLAS_COMPUTE_32F : compute_type();
}

// 1 when the descriptor took the attribute
static int set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v,
                    size_t n) {
    return cublasLtMatmulDescSetAttribute(d, a, v, n) == CUBLAS_STATUS_SUCCESS;
}

// The fused epilogues (cb_matmul_ep): the GELU input (aux) in fp32 whatever D's type (16-bit
// with CB_BF16_AUX), a bias read or a bias gradient written in fp32 (the model's parameters and
// gradients are).
// 0 when the descriptor refused one of them (the plan is then not usable).
static int set_epilogue(Plan *p, const void *vec, const void *aux) {
    cublasLtEpilogue_t ep = p->ep == CB_EP_GELU_AUX ? (p->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                               : CUBLASLT_EPILOGUE_GELU_AUX)
                            : p->ep == CB_EP_DGELU  ? CUBLASLT_EPILOGUE_DGELU
                                                    : CUBLASLT_EPILOGUE_BGRADB;
    int ok = set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
    int32_t f32 = CUDA_R_32F;
    if (p->bias) {
        ok &= set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof vec);
        ok &= set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &f32, sizeof f32);
    }
    if (p->ep != CB_EP_BGRADB) {
        int64_t ld = p->ldaux;
        ok &= set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
        ok &= set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
        int32_t at = p->bf16 & CB_BF16_AUX ? (int32_t)half_type() : f32;
        ok &= set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at);
    }
    return ok;
}

static void plan_build(Plan *p, const void *bias_ptr, const void *aux, int al[4]) {
    cublasOperation_t ta = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                      tb = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType ab = p->bf16 & CB_BF16_AB ? half_type() : CUDA_R_32F;
    cudaDataType cd = p->bf16 & CB_BF16_C ? half_type() : CUDA_R_32F;
    CB(cublasLtMatmulDescCreate(&p->desc, compute_for(p->bf16), CUDA_R_32F));
    CB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    int ep_ok = !p->ep || set_epilogue(p, bias_ptr, aux);
    if (!p->ep && p->bias) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        CB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
        CB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                          sizeof bias_ptr));
        int32_t f32 = CUDA_R_32F; // the bias is fp32 whatever C's type (the model's parameter)
        if (p->bf16 & CB_BF16_C)
            ep_ok = set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &f32, sizeof f32);
    }
    // column-major layouts: A is (ta ? k×m : m×k), B is (tb ? n×k : k×n), C is m×n
    CB(cublasLtMatrixLayoutCreate(&p->a, ab, p->ta ? p->k : p->m, p->ta ? p->m : p->k, p->lda));
    CB(cublasLtMatrixLayoutCreate(&p->b, ab, p->tb ? p->n : p->k, p->tb ? p->k : p->n, p->ldb));
    CB(cublasLtMatrixLayoutCreate(&p->c, cd, p->m, p->n, p->ldc));
    cublasLtMatmulPreference_t pref;
    CB(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = LT_WORK_BYTES;
    CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof ws));
    static const cublasLtMatmulPreferenceAttributes_t attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        uint32_t v = (uint32_t)al[i];
        CB(cublasLtMatmulPreferenceSetAttribute(pref, attr[i], &v, sizeof v));
    }
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    p->ok = ep_ok && st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p->ok) p->algo = res.algo;
}

// The cached plan for this product (built on first use). The alignment key packs the
// alignments of A, B, C, the bias and aux (cuBLASLt reads their pointers' at plan time).
static Plan *plan_get(Plan *key, const void *A, const void *B, const void *C, const void *bias,
                      const void *aux) {
    int al[4] = {align_of(A), align_of(B), align_of(C), align_of(C)};
    int ab = bias ? __builtin_ctz((unsigned)align_of(bias)) : 15; // log2 codes, 4 bits each
    int ax = aux ? __builtin_ctz((unsigned)align_of(aux)) : 15;
    key->align = __builtin_ctz((unsigned)al[0]) | __builtin_ctz((unsigned)al[1]) << 4 |
                 __builtin_ctz((unsigned)al[2]) << 8 | ab << 12 | ax << 16;
    key->dtype = (int)cu_ctx.dtype;
    for (int i = 0; i < nplans; i++)
        if (same_key(&plans[i], key)) return &plans[i];
    Plan *p = nplans < PLAN_CAP ? &plans[nplans++] : NULL;
    if (!p) { // full: reuse the oldest slot
        static int victim;
        p = &plans[victim];
        victim = (victim + 1) % PLAN_CAP;
        cublasLtMatmulDescDestroy(p->desc);
        cublasLtMatrixLayoutDestroy(p->a), cublasLtMatrixLayoutDestroy(p->b);
        cublasLtMatrixLayoutDestroy(p->c);
    }
    *p = *key;
    plan_build(p, bias, aux, al);
    return p;
}

// The key a product's plan is cached under (plan_get adds the dtype and the alignments)
static Plan plan_key(int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc, int bias,
                     float beta, int bf16, int ep, int ldaux) {
    return (Plan){.ta = ta,
                  .tb = tb,
                  .m = m,
                  .n = n,
                  .k = k,
                  .lda = lda,
                  .ldb = ldb,
                  .ldc = ldc,
                  .bias = bias,
                  .beta1 = beta != 0.0f,
                  .bf16 = bf16,
                  .ep = ep,
                  .ldaux = ldaux};
}

void cb_matmul(int ta, int tb, int m, int n, int k, const void *A, int lda, const void *B, int ldb,
               void *C, int ldc, float beta, const void *bias, int bf16) {
    if (m <= 0 || n <= 0) return;
    float alpha = 1.0f;
    if (k <= 0) { // C = beta·C (+ bias): nothing to multiply
        if (bf16 & CB_BF16_C) die(EXIT_IO, "cb_matmul: k = 0 with a bf16 result");
        if (beta == 0.0f) CU(cudaMemsetAsync(C, 0, (size_t)m * n * sizeof(float), cu_ctx.stream));
        if (bias) k_bias_rows(C, bias, n, m);
        return;
    }
    Plan key = plan_key(ta, tb, m, n, k, lda, ldb, ldc, bias != NULL, beta, bf16, CB_EP_NONE, 0);
    Plan *p = plan_get(&key, A, B, C, bias, NULL);
    if (p->ok) {
        if (bias)
            CB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
        CB(cublasLtMatmul(lt, p->desc, &alpha, A, p->a, B, p->b, &beta, C, p->c, C, p->c, &p->algo,
                          lt_work, LT_WORK_BYTES, cu_ctx.stream));
        return;
    }
    if (bias && (bf16 & CB_BF16_C))
        die(EXIT_IO, "cb_matmul: no cuBLASLt plan for a 16-bit result with a bias (internal error: "
                     "cb_matmul_ep says so first)");
    if (bias) { // fallback: the bias rows first, then accumulate the product onto them
        k_bias_rows(C, bias, n, m);
        beta = 1.0f;
    }
    cudaDataType ab = bf16 & CB_BF16_AB ? half_type() : CUDA_R_32F;
    cudaDataType cd = bf16 & CB_BF16_C ? half_type() : CUDA_R_32F;
    CB(cublasGemmEx(blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                    &alpha, A, ab, lda, B, ab, ldb, &beta, C, cd, ldc, compute_for(bf16),
                    CUBLAS_GEMM_DEFAULT));
}

int cb_matmul_ep(int ep, int ta, int tb, int m, int n, int k, const void *A, int lda, const void *B,
                 int ldb, void *C, int ldc, float beta, void *vec, void *aux, int ldaux, int bf16,
                 int dry) {
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    Plan key =
        plan_key(ta, tb, m, n, k, lda, ldb, ldc, vec != NULL, beta, bf16, ep, aux ? ldaux : 0);
    Plan *p = plan_get(&key, A, B, C, vec, aux);
    if (!p->ok || dry) return p->ok;
    if (vec)
        CB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec,
                                          sizeof vec));
    if (aux)
        CB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                          sizeof aux));
    float alpha = 1.0f;
    cublasStatus_t st = cublasLtMatmul(lt, p->desc, &alpha, A, p->a, B, p->b, &beta, C, p->c, C,
                                       p->c, &p->algo, lt_work, LT_WORK_BYTES, cu_ctx.stream);
    if (st == CUBLAS_STATUS_SUCCESS) return 1;
    if (st != CUBLAS_STATUS_INVALID_VALUE && st != CUBLAS_STATUS_NOT_SUPPORTED) CB(st);
    p->ok = 0; // not this combination after all: nothing ran
    return 0;
}

void cb_matmul_batched(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                       long long sa, const float *B, int ldb, long long sb, float *C, int ldc,
                       long long sc, int batch) {
    float beta = 0.0f;
    if (m <= 0 || n <= 0 || batch <= 0) return;
    CB(cublasGemmStridedBatchedEx(blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, CUDA_R_32F,
                                  lda, sa, B, CUDA_R_32F, ldb, sb, &beta, C, CUDA_R_32F, ldc, sc,
                                  batch, compute_type(), CUBLAS_GEMM_DEFAULT));
}
