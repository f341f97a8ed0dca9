// k_flash_bwd.cu — the flash attention backward (k_flash.cuh says how it works): D =
// rowsum(dO ∘ O), then dK, dV by a pass over the key tiles and dQ by a second pass over the
// query tiles (or by fp32 atomics in the first). qkv and dO both fp32, or both bf16 (a marked
// qkv and output gradient: cuda_ops.c converts one that is not like the other).
#include <type_traits>

#include "k_flash.cuh"

// ------------------------------------------------------------------ backward

// Drow[bh·T + t] = Σ_d dO[t,d]·O[t,d] (O the forward's output rows); a warp per row
template <typename O, typename G>
__global__ void flash_drow_kernel(float *drow, const G *dout, const O *out, int B, int T, int C,
                                  int NH) {
    size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= (size_t)B * NH * T) return;
    int t = (int)(r % T), bh = (int)(r / T), b = bh / NH, h = bh % NH;
    const O *o = out + ((size_t)b * T + t) * C + h * D;
    const G *d = dout + ((size_t)b * T + t) * C + h * D;
    float acc = ld_out(d, lane) * ld_out(o, lane) + ld_out(d, lane + 32) * ld_out(o, lane + 32);
    acc = warp_sum(acc);
    if (lane == 0) drow[r] = acc;
}

// shared memory: K, Q, dO, dS tiles (and V with KV_SMEM), the query rows' lse and D; with PIPE
// K, V, two Q, two dO and two of each row vector
constexpr int bwd_smem(bool kv_smem, bool pipe) {
    return pipe ? 6 * TILE * LD * 2 + 4 * TILE * 4
                : (kv_smem ? 5 : 4) * TILE * LD * 2 + 2 * TILE * 4;
}

// PIPE: the query tile qn's Q and dO rows, lse and D on their way into buffers Qb, dOb, lb, db by
// cp.async (one group; rows past T: zero Q and dO, lse +inf, D 0, as the loads below give)
static __device__ __forceinline__ void cp_async4(float *dst, const float *src) {
#if __CUDA_ARCH__ >= 800
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
#else
    __trap();
#endif
}
static __device__ void bwd_prefetch(bf16 *Qb, bf16 *dOb, float *lb, float *db, const bf16 *q,
                                    const bf16 *dO, const float *lse, const float *dr, int q0,
                                    int T, size_t C3, int C) {
    async_tile(Qb, q, q0, T, C3);
    async_tile(dOb, dO, q0, T, (size_t)C);
    for (int i = threadIdx.x; i < TILE; i += blockDim.x)
        if (q0 + i < T) {
            cp_async4(lb + i, lse + q0 + i), cp_async4(db + i, dr + q0 + i);
        } else {
            lb[i] = INFINITY, db[i] = 0.f; // P = 0 on rows past T
        }
    cp_commit();
}

// ATOMIC_DQ: this pass also adds dQ into dqkv (zeroed first) with fp32 atomics; otherwise
// flash_dq_kernel computes dQ. KV_SMEM: the block's K and V rows stay in shared memory and each
// warp reads its A fragments with ldmatrix per use, instead of holding them in 32 registers
// (fewer registers: 3 blocks per multiprocessor instead of 2); the same arithmetic. O: dqkv's
// element type (bf16 for a marked output gradient, cuda_act16.c; float whenever ATOMIC_DQ).
// PIPE (K, V in shared memory, dQ by its own pass, bf16 rows; LOOM_CUDA_FLASH_BWD=pipe, not the
// default until measured): two buffers of the query tile's Q, dO, lse and D, the next tile's
// copied in by cp.async while the warps compute on this one; the same arithmetic.
template <bool ATOMIC_DQ, bool KV_SMEM, bool PIPE, typename O, typename I>
__global__ void __launch_bounds__(128, KV_SMEM ? 3 : 1)
    flash_bwd_kernel(O *dqkv, const I *dout, const I *qkv, const float *lse_all, const float *drow,
                     int T, int C, int NH, float scale, float sl2) {
    static_assert(!PIPE || (KV_SMEM && !ATOMIC_DQ), "PIPE: K, V in shared memory, dQ apart");
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Ks = (bf16 *)smem, *Qs = Ks + TILE * LD, *dOs = Qs + TILE * LD, *dSs = dOs + TILE * LD;
    bf16 *Vs = dSs + TILE * LD; // KV_SMEM only
    float *lse_s = (float *)(dSs + (KV_SMEM ? 2 : 1) * TILE * LD), *d_s = lse_s + TILE;
    if constexpr (PIPE) { // K | V | Q Q | dO dO | lse lse | D D
        Vs = Ks + TILE * LD, Qs = Vs + TILE * LD, dOs = Qs + 2 * TILE * LD;
        lse_s = (float *)(dOs + 2 * TILE * LD), d_s = lse_s + 2 * TILE;
    }
    int kt = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    size_t C3 = 3 * (size_t)C;
    const I *q = qkv + (size_t)b * T * C3 + h * D, *k = q + C, *v = q + 2 * C;
    const I *dO = dout + (size_t)b * T * C + h * D;
    const float *lse = lse_all + (size_t)bh * T;
    const float *dr = drow + (size_t)bh * T;
    O *dq = dqkv + (size_t)b * T * C3 + h * D, *dk = dq + C, *dv = dq + 2 * C;
    int k0 = kt * TILE, key0 = k0 + w * 16 + g, key1 = key0 + 8;
    uint32_t ka[4][4], va[4][4]; // !KV_SMEM
    if (!KV_SMEM) {
        load_a(ka, k, k0 + w * 16, T, C3);
        load_a(va, v, k0 + w * 16, T, C3);
    }
    if (ATOMIC_DQ || KV_SMEM) load_tile(Ks, k, k0, T, C3);
    if (KV_SMEM) load_tile(Vs, v, k0, T, C3); // read after the loop's first barrier
    float dka[8][4] = {}, dva[8][4] = {};
    int nq = (T + TILE - 1) / TILE;
    if constexpr (PIPE) bwd_prefetch(Qs, dOs, lse_s, d_s, q, dO, lse, dr, kt * TILE, T, C3, C);
    for (int qt = kt; qt < nq; qt++) {
        int q0 = qt * TILE;
        bf16 *Qb = Qs, *dOb = dOs; // this tile's buffers
        float *lb = lse_s, *db = d_s;
        if constexpr (PIPE) {
            int bi = (qt - kt) & 1, nb = bi ^ 1;
            Qb += bi * TILE * LD, dOb += bi * TILE * LD, lb += bi * TILE, db += bi * TILE;
            if (qt + 1 < nq) { // the next tile into the other buffers (free since the last barrier)
                bwd_prefetch(Qs + nb * TILE * LD, dOs + nb * TILE * LD, lse_s + nb * TILE,
                             d_s + nb * TILE, q, dO, lse, dr, q0 + TILE, T, C3, C);
                cp_wait<1>();
            } else {
                cp_wait<0>();
            }
            __syncthreads(); // this tile's copies (and plain stores) are visible
        } else {
            __syncthreads(); // the previous tile's readers are done
            load_tile(Qs, q, q0, T, C3);
            load_tile(dOs, dO, q0, T, C);
            for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
                lse_s[i] = q0 + i < T ? lse[q0 + i] : INFINITY; // P = 0 on rows past T
                d_s[i] = q0 + i < T ? dr[q0 + i] : 0.f;
            }
            __syncthreads();
        }
        float st[8][4] = {}, dp[8][4] = {}; // Sᵀ and dPᵀ: 16 keys × 64 queries of this warp
        for (int kk = 0; kk < 4; kk++) {    // each st[nt], dp[nt] sums kk = 0..3 in order
            uint32_t a[4], b[4];
            if (KV_SMEM) {
                ldsm_a(a, Ks, w * 16, kk * 16);
                ldsm_a(b, Vs, w * 16, kk * 16);
            } else {
                for (int i = 0; i < 4; i++)
                    a[i] = ka[kk][i], b[i] = va[kk][i];
            }
            for (int nt = 0; nt < 8; nt++) {
                const bf16 *qr = Qb + (nt * 8 + g) * LD + kk * 16 + 2 * t;
                const bf16 *orow = dOb + (nt * 8 + g) * LD + kk * 16 + 2 * t;
                mma(st[nt], a, ld2(qr), ld2(qr + 8));
                mma(dp[nt], b, ld2(orow), ld2(orow + 8));
            }
        }
        for (int nt = 0; nt < 8; nt++)
            for (int e = 0; e < 2; e++) { // Pᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ − D) in dp
                int ql = nt * 8 + 2 * t + e, qi = q0 + ql;
                float p0 = key0 <= qi ? exp2f(st[nt][e] * sl2 - lb[ql]) : 0.f;
                float p1 = key1 <= qi ? exp2f(st[nt][2 + e] * sl2 - lb[ql]) : 0.f;
                st[nt][e] = p0, st[nt][2 + e] = p1;
                dp[nt][e] = p0 * (dp[nt][e] - db[ql]);
                dp[nt][2 + e] = p1 * (dp[nt][2 + e] - db[ql]);
                if (ATOMIC_DQ) {
                    dSs[ql * LD + w * 16 + g] = __float2bfloat16_rn(dp[nt][e]);
                    dSs[ql * LD + w * 16 + g + 8] = __float2bfloat16_rn(dp[nt][2 + e]);
                }
            }
        for (int kk = 0; kk < 4; kk++) { // dV += Pᵀ·dO, dK += dSᵀ·Q (k = queries)
            uint32_t pa[4] = {pack2(st[2 * kk][0], st[2 * kk][1]),
                              pack2(st[2 * kk][2], st[2 * kk][3]),
                              pack2(st[2 * kk + 1][0], st[2 * kk + 1][1]),
                              pack2(st[2 * kk + 1][2], st[2 * kk + 1][3])};
            uint32_t sa[4] = {pack2(dp[2 * kk][0], dp[2 * kk][1]),
                              pack2(dp[2 * kk][2], dp[2 * kk][3]),
                              pack2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                              pack2(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
            for (int nt = 0; nt < 8; nt++) {
                uint32_t o0, o1, q0b, q1b;
                ldsm_t(o0, o1, dOb, kk * 16, nt * 8);
                ldsm_t(q0b, q1b, Qb, kk * 16, nt * 8);
                mma(dva[nt], pa, o0, o1);
                mma(dka[nt], sa, q0b, q1b);
            }
        }
        if constexpr (PIPE) __syncthreads(); // done with this tile's buffers: the next copies
        if (!ATOMIC_DQ) continue;
        __syncthreads();      // dS complete
        float dqa[8][4] = {}; // dQ of queries w·16.. of the tile: dS (queries × keys)·K
        for (int kk = 0; kk < 4; kk++) {
            const bf16 *sr = dSs + (w * 16 + g) * LD + kk * 16 + 2 * t;
            uint32_t a[4] = {ld2(sr), ld2(sr + 8 * LD), ld2(sr + 8), ld2(sr + 8 * LD + 8)};
            for (int nt = 0; nt < 8; nt++) {
                uint32_t b0, b1;
                ldsm_t(b0, b1, Ks, kk * 16, nt * 8);
                mma(dqa[nt], a, b0, b1);
            }
        }
        int r0 = q0 + w * 16 + g, r1 = r0 + 8;
        for (int nt = 0; nt < 8; nt++)
            for (int e = 0; e < 2; e++) {
                int d = nt * 8 + 2 * t + e;
                float *dqf = (float *)dq; // (O is float with ATOMIC_DQ)
                if (r0 < T) atomicAdd(dqf + (size_t)r0 * C3 + d, scale * dqa[nt][e]);
                if (r1 < T) atomicAdd(dqf + (size_t)r1 * C3 + d, scale * dqa[nt][2 + e]);
            }
    }
    for (int nt = 0; nt < 8; nt++)
        for (int e = 0; e < 2; e++) {
            int d = nt * 8 + 2 * t + e;
            if (key0 < T) {
                st_out(dk, (size_t)key0 * C3 + d, scale * dka[nt][e]);
                st_out(dv, (size_t)key0 * C3 + d, dva[nt][e]);
            }
            if (key1 < T) {
                st_out(dk, (size_t)key1 * C3 + d, scale * dka[nt][2 + e]);
                st_out(dv, (size_t)key1 * C3 + d, dva[nt][2 + e]);
            }
        }
}

// dQ without atomics: a block per (64 queries, head), each warp owning 16 query rows with Q and
// dO in registers, loops over the key tiles up to the diagonal: S = Q·Kᵀ, dP = dO·Vᵀ,
// dS = P ∘ (dP − D), dQ += dS·K, then writes its rows of dQ once. PIPE (bf16 rows): two K, V
// buffers, the next key tile copied in by cp.async while the warps compute, as the forward's.
template <typename O, typename I, bool PIPE = false>
__global__ void __launch_bounds__(128)
    flash_dq_kernel(O *dqkv, const I *dout, const I *qkv, const float *lse_all, const float *drow,
                    int T, int C, int NH, float scale, float sl2) {
    __shared__ __align__(16) bf16 Ks[(PIPE ? 2 : 1) * TILE * LD];
    __shared__ __align__(16) bf16 Vs[(PIPE ? 2 : 1) * TILE * LD];
    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH; // long first
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    size_t C3 = 3 * (size_t)C;
    const I *base = qkv + (size_t)b * T * C3 + h * D;
    const I *dO = dout + (size_t)b * T * C + h * D;
    int row0 = qt * TILE + w * 16 + g, row1 = row0 + 8;
    const float *lse = lse_all + (size_t)bh * T, *dr = drow + (size_t)bh * T;
    float ls0 = row0 < T ? lse[row0] : INFINITY, ls1 = row1 < T ? lse[row1] : INFINITY;
    float dd0 = row0 < T ? dr[row0] : 0.f, dd1 = row1 < T ? dr[row1] : 0.f;
    uint32_t qa[4][4], da[4][4];
    load_a(qa, base, qt * TILE + w * 16, T, C3);
    load_a(da, dO, qt * TILE + w * 16, T, C);
    float dq[8][4] = {};
    kv_first<PIPE>(Ks, Vs, base, C, T, C3);
    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * TILE;
        bf16 *Kb, *Vb;
        kv_tile<PIPE>(Ks, Vs, base, C, T, C3, kt, qt, &Kb, &Vb);
        float s[8][4] = {}, dp[8][4] = {}; // 16 queries × 64 keys of this warp
        for (int nt = 0; nt < 8; nt++)
            for (int kk = 0; kk < 4; kk++) {
                const bf16 *kr = Kb + (nt * 8 + g) * LD + kk * 16 + 2 * t;
                const bf16 *vr = Vb + (nt * 8 + g) * LD + kk * 16 + 2 * t;
                mma(s[nt], qa[kk], ld2(kr), ld2(kr + 8));
                mma(dp[nt], da[kk], ld2(vr), ld2(vr + 8));
            }
        for (int nt = 0; nt < 8; nt++)
            for (int e = 0; e < 2; e++) { // dS = P ∘ (dP − D), keys after the query masked
                int key = k0 + nt * 8 + 2 * t + e;
                float p0 = key <= row0 ? exp2f(s[nt][e] * sl2 - ls0) : 0.f;
                float p1 = key <= row1 ? exp2f(s[nt][2 + e] * sl2 - ls1) : 0.f;
                s[nt][e] = p0 * (dp[nt][e] - dd0), s[nt][2 + e] = p1 * (dp[nt][2 + e] - dd1);
            }
        for (int kk = 0; kk < 4; kk++) { // dQ += dS·K, dS straight from the registers
            uint32_t sa[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),
                              pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            for (int nt = 0; nt < 8; nt++) {
                uint32_t b0, b1;
                ldsm_t(b0, b1, Kb, kk * 16, nt * 8);
                mma(dq[nt], sa, b0, b1);
            }
        }
        if constexpr (PIPE) __syncthreads(); // done with Kb, Vb: the next copies may overwrite
    }
    O *dqo = dqkv + (size_t)b * T * C3 + h * D;
    for (int nt = 0; nt < 8; nt++)
        for (int e = 0; e < 2; e++) {
            int d = nt * 8 + 2 * t + e;
            if (row0 < T) st_out(dqo, (size_t)row0 * C3 + d, scale * dq[nt][e]);
            if (row1 < T) st_out(dqo, (size_t)row1 * C3 + d, scale * dq[nt][2 + e]);
        }
}

// ------------------------------------------------------------------ launchers

// The defaults, K and V in shared memory and dQ by its own pass, measured fastest of the four
// (H200, GPT-2 124M bf16 B16 T1024: 54.9 ms a step against 56.1 with K, V in registers and dQ
// by atomics; BENCHMARKS.md). LOOM_CUDA_FLASH_BWD=regs keeps K and V in registers,
// LOOM_CUDA_FLASH_DQ=atomic adds dQ by fp32 atomics; read at every call (a dozen a step), so a
// test can run every combination.
static int env_is(const char *name, const char *value) {
    const char *e = getenv(name);
    return e && !strcmp(e, value);
}

template <bool A, bool S, typename O, typename I, bool P = false>
static void bwd_launch(dim3 grid, O *dqkv, const I *dout, const I *qkv, const float *lse,
                       const float *drow, int T, int C, int NH, float scale, float sl2) {
    static int attr_set;
    if (!attr_set) {
        CU(cudaFuncSetAttribute(flash_bwd_kernel<A, S, P, O, I>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, bwd_smem(S, P)));
        attr_set = 1;
    }
    flash_bwd_kernel<A, S, P, O, I><<<grid, 128, bwd_smem(S, P), cu_ctx.stream>>>(
        dqkv, dout, qkv, lse, drow, T, C, NH, scale, sl2);
    CU_LAUNCHED("flash_backward");
}

// dK, dV by the key pass and dQ by its own pass, into dqkv of element type O
template <typename O, typename I>
static void bwd_two_pass(dim3 grid, bool smem, O *dqkv, const I *dout, const I *qkv,
                         const float *lse, const float *drow, int T, int C, int NH, float scale,
                         float sl2) {
    // LOOM_CUDA_FLASH_BWD=pipe with bf16 rows cp.async can copy (16-byte aligned): both passes
    if constexpr (std::is_same<I, bf16>::value)
        if (env_is("LOOM_CUDA_FLASH_BWD", "pipe") && ((uintptr_t)qkv | (uintptr_t)dout) % 16 == 0 &&
            C % 8 == 0) {
            bwd_launch<false, true, O, I, true>(grid, dqkv, dout, qkv, lse, drow, T, C, NH, scale,
                                                sl2);
            flash_dq_kernel<O, I, true>
                <<<grid, 128, 0, cu_ctx.stream>>>(dqkv, dout, qkv, lse, drow, T, C, NH, scale, sl2);
            CU_LAUNCHED("flash_dq");
            return;
        }
    (smem ? bwd_launch<false, true, O, I>
          : bwd_launch<false, false, O, I>)(grid, dqkv, dout, qkv, lse, drow, T, C, NH, scale, sl2);
    flash_dq_kernel<O, I>
        <<<grid, 128, 0, cu_ctx.stream>>>(dqkv, dout, qkv, lse, drow, T, C, NH, scale, sl2);
    CU_LAUNCHED("flash_dq");
}

// The backward after D: dK, dV and dQ into dqkv (bf16 when dqkv16), from qkv rows of type I
template <typename I>
static void bwd_passes(dim3 grid, void *dqkv, int dqkv16, const I *dout, const I *qkv,
                       const float *lse, const float *drow, int B, int T, int C, int NH,
                       float scale, float sl2) {
    int atomic = env_is("LOOM_CUDA_FLASH_DQ", "atomic"),
        smem = !env_is("LOOM_CUDA_FLASH_BWD", "regs");
    size_t C3 = 3 * (size_t)C;
    if (atomic) { // dQ accumulates in fp32: into scratch first when dqkv is bf16
        float *d = dqkv16 ? (float *)cu_scratch(SCR_FLASH_DQKV, (size_t)B * T * C3 * sizeof(float))
                          : (float *)dqkv;
        CU(cudaMemset2DAsync(d, C3 * sizeof(float), 0, (size_t)C * sizeof(float), (size_t)B * T,
                             cu_ctx.stream));
        (smem ? bwd_launch<true, true, float, I>
              : bwd_launch<true, false, float, I>)(grid, d, dout, qkv, lse, drow, T, C, NH, scale,
                                                   sl2);
        if (dqkv16) k_to_bf16(dqkv, d, (size_t)B * T * C3);
        return;
    }
    if (dqkv16)
        bwd_two_pass(grid, smem, (bf16 *)dqkv, dout, qkv, lse, drow, T, C, NH, scale, sl2);
    else
        bwd_two_pass(grid, smem, (float *)dqkv, dout, qkv, lse, drow, T, C, NH, scale, sl2);
}

extern "C" {
void k_flash_backward(void *dqkv, int dqkv16, const void *dout, const void *qkv, int in16,
                      const void *out, int out16, const float *lse, float *drow, int B, int T,
                      int C, int NH) {
    size_t rows = (size_t)B * NH * T;
    unsigned nb = (unsigned)((rows + 7) / 8);
    if (out16 && in16)
        flash_drow_kernel<<<nb, 256, 0, cu_ctx.stream>>>(drow, (const bf16 *)dout,
                                                         (const bf16 *)out, B, T, C, NH);
    else if (out16)
        flash_drow_kernel<<<nb, 256, 0, cu_ctx.stream>>>(drow, (const float *)dout,
                                                         (const bf16 *)out, B, T, C, NH);
    else if (in16)
        flash_drow_kernel<<<nb, 256, 0, cu_ctx.stream>>>(drow, (const bf16 *)dout,
                                                         (const float *)out, B, T, C, NH);
    else
        flash_drow_kernel<<<nb, 256, 0, cu_ctx.stream>>>(drow, (const float *)dout,
                                                         (const float *)out, B, T, C, NH);
    CU_LAUNCHED("flash_drow");
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
    float scale = 1.0f / sqrtf((float)D), sl2 = 1.4426950408889634f * scale;
    if (in16)
        bwd_passes(grid, dqkv, dqkv16, (const bf16 *)dout, (const bf16 *)qkv, lse, drow, B, T, C,
                   NH, scale, sl2);
    else
        bwd_passes(grid, dqkv, dqkv16, (const float *)dout, (const float *)qkv, lse, drow, B, T, C,
                   NH, scale, sl2);
}
}
