// k_flash_fwd.cu — the flash attention forward (k_flash.cuh says how it works): a block per
// (64 queries, head), the online softmax over the key tiles up to the diagonal, the output and
// the rows' log-sum-exps. qkv fp32, or bf16 (a marked qkv). PIPE (bf16 qkv only,
// LOOM_CUDA_FLASH_FWD=pipe: not the default until a GPU run has measured it): two K, V buffers,
// the next tile copied in by cp.async while the warps compute on this one, instead of a load
// between two barriers each tile; the same values, so the same results.
#include "k_flash.cuh"

template <typename O, typename I, bool PIPE>
__global__ void __launch_bounds__(128)
    flash_fwd_kernel(O *out, float *lse_all, const I *qkv, int T, int C, int NH, float sl2) {
    __shared__ __align__(16) bf16 Ks[(PIPE ? 2 : 1) * TILE * LD];
    __shared__ __align__(16) bf16 Vs[(PIPE ? 2 : 1) * TILE * LD];
    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH; // long first
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    size_t C3 = 3 * (size_t)C;
    const I *base = qkv + (size_t)b * T * C3 + h * D;
    int row0 = qt * TILE + w * 16 + g, row1 = row0 + 8;
    uint32_t qa[4][4];
    load_a(qa, base, qt * TILE + w * 16, T, C3);
    float o[8][4] = {}, m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    kv_first<PIPE>(Ks, Vs, base, C, T, C3);
    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * TILE;
        bf16 *Kb, *Vb;
        kv_tile<PIPE>(Ks, Vs, base, C, T, C3, kt, qt, &Kb, &Vb);
        float s[8][4] = {};
        for (int nt = 0; nt < 8; nt++)
            for (int kk = 0; kk < 4; kk++) {
                const bf16 *kr = Kb + (nt * 8 + g) * LD + kk * 16 + 2 * t;
                mma(s[nt], qa[kk], ld2(kr), ld2(kr + 8));
            }
        float mx0 = -INFINITY, mx1 = -INFINITY;
        for (int nt = 0; nt < 8; nt++)
            for (int e = 0; e < 2; e++) { // scores in log2 units; keys after the query masked
                int key = k0 + nt * 8 + 2 * t + e;
                s[nt][e] = key <= row0 ? s[nt][e] * sl2 : -INFINITY;
                s[nt][2 + e] = key <= row1 ? s[nt][2 + e] * sl2 : -INFINITY;
                mx0 = fmaxf(mx0, s[nt][e]), mx1 = fmaxf(mx1, s[nt][2 + e]);
            }
        float n0 = fmaxf(m0, quad_max(mx0)), n1 = fmaxf(m1, quad_max(mx1));
        float a0 = exp2f(m0 - n0), a1 = exp2f(m1 - n1), r0 = 0.f, r1 = 0.f;
        m0 = n0, m1 = n1;
        for (int nt = 0; nt < 8; nt++)
            for (int e = 0; e < 2; e++) {
                s[nt][e] = exp2f(s[nt][e] - m0), r0 += s[nt][e];
                s[nt][2 + e] = exp2f(s[nt][2 + e] - m1), r1 += s[nt][2 + e];
            }
        l0 = l0 * a0 + quad_sum(r0), l1 = l1 * a1 + quad_sum(r1);
        for (int nt = 0; nt < 8; nt++)
            o[nt][0] *= a0, o[nt][1] *= a0, o[nt][2] *= a1, o[nt][3] *= a1;
        for (int kk = 0; kk < 4; kk++) { // O += P·V, P straight from the score registers
            uint32_t pa[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),
                              pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            for (int nt = 0; nt < 8; nt++) {
                uint32_t b0, b1;
                ldsm_t(b0, b1, Vb, kk * 16, nt * 8);
                mma(o[nt], pa, b0, b1);
            }
        }
        if constexpr (PIPE) __syncthreads(); // done with Kb, Vb: the next copies may overwrite
    }
    float *lse = lse_all + (size_t)bh * T; // T log-sum-exps per head
    float i0 = 1.0f / l0, i1 = 1.0f / l1;
    for (int nt = 0; nt < 8; nt++)
        for (int e = 0; e < 2; e++) {
            int d = nt * 8 + 2 * t + e;
            if (row0 < T) st_out(out, ((size_t)b * T + row0) * C + h * D + d, o[nt][e] * i0);
            if (row1 < T) st_out(out, ((size_t)b * T + row1) * C + h * D + d, o[nt][2 + e] * i1);
        }
    if (t == 0 && row0 < T) lse[row0] = m0 + log2f(l0);
    if (t == 0 && row1 < T) lse[row1] = m1 + log2f(l1);
}

// LOOM_CUDA_FLASH_FWD=pipe with a bf16 qkv whose rows cp.async can copy (16-byte aligned)
static int pipe_ok(const void *qkv, int C) {
    const char *e = getenv("LOOM_CUDA_FLASH_FWD");
    return e && !strcmp(e, "pipe") && (uintptr_t)qkv % 16 == 0 && C % 8 == 0;
}

template <typename O>
static void fwd_launch(dim3 grid, O *out, float *lse, const void *qkv, int qkv16, int T, int C,
                       int NH, float sl2) {
    if (qkv16 && pipe_ok(qkv, C))
        flash_fwd_kernel<O, bf16, true>
            <<<grid, 128, 0, cu_ctx.stream>>>(out, lse, (const bf16 *)qkv, T, C, NH, sl2);
    else if (qkv16)
        flash_fwd_kernel<O, bf16, false>
            <<<grid, 128, 0, cu_ctx.stream>>>(out, lse, (const bf16 *)qkv, T, C, NH, sl2);
    else
        flash_fwd_kernel<O, float, false>
            <<<grid, 128, 0, cu_ctx.stream>>>(out, lse, (const float *)qkv, T, C, NH, sl2);
    CU_LAUNCHED("flash_forward");
}

extern "C" {
int k_flash_ok(int T, int C, int NH) { return NH > 0 && C == NH * D && T > D; }

void k_flash_forward(void *out, int out16, float *lse, const void *qkv, int qkv16, int B, int T,
                     int C, int NH) {
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
    float sl2 = 1.4426950408889634f / sqrtf((float)D);
    if (out16)
        fwd_launch(grid, (bf16 *)out, lse, qkv, qkv16, T, C, NH, sl2);
    else
        fwd_launch(grid, (float *)out, lse, qkv, qkv16, T, C, NH, sl2);
}
}
