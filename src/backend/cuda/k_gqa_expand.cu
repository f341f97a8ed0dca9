// k_gqa_expand.cu — grouped-query attention on the flash kernels (the default in bf16): the
// LLaMA qkv rows (B,T,(NH+2·NKV)·hs) are copied into MHA rows (B,T,3C), C = NH·hs, each kv head
// repeated for the NH/NKV query heads that read it (one layer's copy, in scratch, while the
// kernel runs), and the MHA gradient (B,T,3C) is folded back: dq copied, dk and dv of a kv
// head summed over its query heads in a fixed order. Layouts as k_llama.cu's: query head h at
// h·hs, key head g at (NH+g)·hs, value head g at (NH+NKV+g)·hs; query head h reads kv head
// h / (NH/NKV).
#include "k_common.cuh"

// One thread per element of the MHA row: (row, j < 3C).
__global__ void gqa_expand_kernel(float *full, const float *qkv, size_t rows, int NH, int NKV,
                                  int hs) {
    size_t C = (size_t)NH * hs, W = (size_t)(NH + 2 * NKV) * hs, n = rows * 3 * C;
    int G = NH / NKV;
    GRID_STRIDE(i, n) {
        size_t r = i / (3 * C), j = i % (3 * C);
        size_t part = j / C, h = (j % C) / hs, d = j % hs, src;
        if (part == 0)
            src = j; // query head h
        else
            src = ((size_t)NH + (part - 1) * NKV + h / G) * hs + d; // its key / value head
        full[i] = qkv[r * W + src];
    }
}

// One thread per element of the GQA row: (row, j < W).
__global__ void gqa_fold_kernel(float *dqkv, const float *dfull, size_t rows, int NH, int NKV,
                                int hs) {
    size_t C = (size_t)NH * hs, W = (size_t)(NH + 2 * NKV) * hs, n = rows * W;
    int G = NH / NKV;
    GRID_STRIDE(i, n) {
        size_t r = i / W, j = i % W;
        const float *src = dfull + r * 3 * C;
        if (j < C) {
            dqkv[i] = src[j];
            continue;
        }
        size_t kv = j - C, part = kv / ((size_t)NKV * hs); // 0: key, 1: value
        size_t g = (kv % ((size_t)NKV * hs)) / hs, d = kv % hs;
        const float *p = src + (1 + part) * C + g * G * hs + d;
        float s = 0.f;
        for (int k = 0; k < G; k++)
            s += p[(size_t)k * hs];
        dqkv[i] = s;
    }
}

extern "C" {
void k_gqa_expand(float *full, const float *qkv, int B, int T, int NH, int NKV, int hs) {
    size_t rows = (size_t)B * T;
    if (!rows) return;
    gqa_expand_kernel<<<k_blocks(rows * 3 * NH * hs), K_THREADS, 0, cu_ctx.stream>>>(
        full, qkv, rows, NH, NKV, hs);
    CU_LAUNCHED("gqa_expand");
}
void k_gqa_fold(float *dqkv, const float *dfull, int B, int T, int NH, int NKV, int hs) {
    size_t rows = (size_t)B * T;
    if (!rows) return;
    gqa_fold_kernel<<<k_blocks(rows * (NH + 2 * NKV) * hs), K_THREADS, 0, cu_ctx.stream>>>(
        dqkv, dfull, rows, NH, NKV, hs);
    CU_LAUNCHED("gqa_fold");
}
}
