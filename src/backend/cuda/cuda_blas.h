// cuda_blas.h — the CUDA backend's matrix products (cuda_blas.c). Column-major, as cuBLAS:
// C (m×n, ldc) = op(A)·op(B) + beta·C (+ bias, m elements, added to every column);
// ta / tb nonzero transpose A / B. All pointers are device memory. A and B are fp32 (the
// backend's dtype picks the tensor-core precision) or 16-bit (bf16, or fp16 under --dtype
// fp16: the context's half type); C fp32 or 16-bit, the bias fp32; 16-bit operands accumulate
// in fp32.
#pragma once

void cb_init(void);
void cb_check(int status, const char *what, const char *file, int line);
// bf16: CB_BF16_AB (A and B are half), | CB_BF16_C (C is half too), | CB_BF16_AUX (an
// epilogue's GELU input is half: cb_matmul_ep).
enum { CB_BF16_AB = 1, CB_BF16_C = 2, CB_BF16_AUX = 4 };
void cb_matmul(int ta, int tb, int m, int n, int k, const void *A, int lda, const void *B, int ldb,
               void *C, int ldc, float beta, const void *bias, int bf16);
// cb_matmul with one of cuBLASLt's fused epilogues (beta·C as cb_matmul's), or none:
//   CB_EP_NONE:     cb_matmul's product (vec: its bias), but 0 where cuBLASLt has no plan;
//   CB_EP_GELU_AUX: C = gelu(op(A)·op(B) + vec), the GELU input written to aux (vec: the bias,
//                   m elements, or NULL);
//   CB_EP_DGELU:    C = (op(A)·op(B)) ∘ gelu'(aux) (aux read; vec NULL);
//   CB_EP_BGRADB:   C as cb_matmul's, and vec (n elements) = the column sums of op(B), the sum
//                   over k: a bias gradient, written (not accumulated).
// aux is fp32 (16-bit with CB_BF16_AUX) m×n column-major with leading dimension ldaux (a
// multiple of 8), the bias and the bias gradient fp32, whatever C's type. Returns 1 when it ran, 0
// when cuBLASLt has no plan for the combination (nothing ran; with dry it only says whether there
// is a plan).
enum { CB_EP_NONE, CB_EP_GELU_AUX, CB_EP_DGELU, CB_EP_BGRADB };
int cb_matmul_ep(int ep, int ta, int tb, int m, int n, int k, const void *A, int lda, const void *B,
                 int ldb, void *C, int ldc, float beta, void *vec, void *aux, int ldaux, int bf16,
                 int dry);
// batch products C_i = alpha·op(A_i)·op(B_i), X_i = X + i·sx
void cb_matmul_batched(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                       long long sa, const float *B, int ldb, long long sb, float *C, int ldc,
                       long long sc, int batch);
