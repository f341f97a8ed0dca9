// cuda_blas.h — the CUDA backend's matrix products (cuda_blas.c). Column-major, as cuBLAS:
// C (m×n, ldc) = op(A)·op(B) + beta·C (+ bias, m elements, added to every column);
// ta / tb nonzero transpose A / B. All pointers are device memory, all values fp32; the
// backend's dtype picks the tensor-core precision.
#pragma once

void cb_init(void);
void cb_check(int status, const char *what, const char *file, int line);
void cb_matmul(int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B,
               int ldb, float *C, int ldc, float beta, const float *bias);
// batch products C_i = alpha·op(A_i)·op(B_i), X_i = X + i·sx
void cb_matmul_batched(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                       long long sa, const float *B, int ldb, long long sb, float *C, int ldc,
                       long long sc, int batch);
