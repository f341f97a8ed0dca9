// llama_layout.c — the LLaMA family's shape: its config defaults and checks, its parameter
// count, its tensor table (Hugging Face Llama names), its activation sizes and its FLOPs. The
// block list is GPT-2's: [embedding, layer 0 .. layer L-1, head], each one contiguous slice.
//
// Fused products without views: q_proj (H·hs, C), k_proj (KV·hs, C) and v_proj (KV·hs, C) are
// laid out back to back, which is exactly the fused ((H+2·KV)·hs, C) matrix of one product;
// gate_proj (F, C) then up_proj (F, C) are the fused (2F, C) [gate | up] matrix. Every tensor
// keeps its own Hugging Face name and shape, so exports need no splitting.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common.h"
#include "block_impl.h"

const char *gpt_arch_name(int arch) { return arch == ARCH_LLAMA ? "llama" : "gpt2"; }

int gpt_arch_parse(const char *name) {
    if (!strcmp(name, "gpt2")) return ARCH_GPT2;
    if (!strcmp(name, "llama")) return ARCH_LLAMA;
    return -1;
}

void gpt_config_defaults(GPTConfig *c) {
    if (!gpt_is_llama(c)) return;
    if (!c->KV) c->KV = c->H;
    if (!c->F && c->C > 0) c->F = (8 * c->C / 3 + 63) / 64 * 64; // 4C·2/3, up to 64
    if (!(c->rope_theta > 0)) c->rope_theta = 10000.f;
    if (!(c->norm_eps > 0)) c->norm_eps = 1e-5f;
    if (c->rope_scaling != ROPE_LLAMA3) return;
    if (!(c->rope_factor > 0)) c->rope_factor = 8.f; // Llama 3.1's published values
    if (!(c->rope_low > 0)) c->rope_low = 1.f;
    if (!(c->rope_high > 0)) c->rope_high = 4.f;
    if (!c->rope_orig) c->rope_orig = 8192;
}

// The llama3 scaling's parameters: all finite, factor ≥ 1, 0 < low < high.
static int rope_scaling_check(const GPTConfig *c) {
    if (c->rope_scaling == ROPE_PLAIN) return 0;
    if (c->rope_scaling != ROPE_LLAMA3)
        return loom_fail("--rope-scaling must be none or llama3 (got %d)", c->rope_scaling);
    if (!(c->rope_factor >= 1.f) || !isfinite(c->rope_factor))
        return loom_fail("--rope-factor must be a finite number >= 1 (got %g)", c->rope_factor);
    if (!(c->rope_low > 0.f) || !(c->rope_high > c->rope_low) || !isfinite(c->rope_high))
        return loom_fail("--rope-low-freq-factor %g and --rope-high-freq-factor %g: need "
                         "0 < low < high (finite)",
                         c->rope_low, c->rope_high);
    if (c->rope_orig < 1)
        return loom_fail("--rope-original-max-pos must be >= 1 (got %d)", c->rope_orig);
    return 0;
}

int llama_config_check(const GPTConfig *c) {
    if (c->KV < 1 || c->KV > c->H || c->H % c->KV)
        return loom_fail("--kv-heads %d must divide --heads %d (each kv head serves whole query "
                         "heads)",
                         c->KV, c->H);
    if ((c->C / c->H) % 2)
        return loom_fail("--arch llama: the head size --dim/--heads = %d/%d = %d must be even "
                         "(RoPE rotates pairs)",
                         c->C, c->H, c->C / c->H);
    if (c->F < 1 || c->F > GPT_MAX_DIM)
        return loom_fail("--ffn-dim must be in [1, %d] (got %d)", GPT_MAX_DIM, c->F);
    if (!(c->rope_theta > 1.f) || !isfinite(c->rope_theta))
        return loom_fail("--rope-theta must be a finite number > 1 (got %g)", c->rope_theta);
    if (!(c->norm_eps > 0.f) || c->norm_eps > 1.f)
        return loom_fail("--norm-eps must be in (0, 1] (got %g)", c->norm_eps);
    if (c->tie != 0 && c->tie != 1)
        return loom_fail("--tie-embeddings must be on or off (got %d)", c->tie);
    return rope_scaling_check(c);
}

// One layer's parameters: 2 RMSNorms (2C), q,k,v ((H+2KV)·hs·C), o (C·C), gate|up (2F·C),
// down (F·C). 0 when a product overflows.
static size_t layer_params(const GPTConfig *c) {
    size_t C = (size_t)c->C, hs = C / (size_t)c->H, F = (size_t)c->F;
    size_t qkv = ((size_t)c->H + 2 * (size_t)c->KV) * hs;
    if (qkv > SIZE_MAX / C / 4 || F > SIZE_MAX / C / 4) return 0;
    return 2 * C + qkv * C + C * C + 3 * F * C;
}

int llama_param_count(const GPTConfig *c, size_t *n) {
    size_t per = layer_params(c), V = (size_t)c->V, C = (size_t)c->C;
    size_t emb = V * C * (c->tie ? 1 : 2) + C; // embed_tokens, (lm_head), norm
    if (!per || per > (SIZE_MAX - emb) / (size_t)c->L)
        return loom_fail("model shape L=%d C=%d V=%d F=%d: parameter count overflows", c->L, c->C,
                         c->V, c->F);
    *n = per * (size_t)c->L + emb;
    return 0;
}

void llama_add_tensors(GPT *m, const Block *blk, size_t *off) {
    const GPTConfig *c = &m->cfg;
    int C = c->C, hs = C / c->H, F = c->F, L = c->L;
    float std = 0.02f, res_std = 0.02f / sqrtf(2.0f * L);
    char nm[64];
    // kv heads split over tp when it divides them, else one shared by tp/KV ranks each
    int kv = m->tp.n > 1 && c->KV % m->tp.n ? TP_KVSHARE : TP_ROWS, rep = TP_REPLICATED;
    if (blk->kind == BLOCK_EMBED) {
        gpt_add_tensor(m, off, "model.embed_tokens.weight", c->V, C, std, TP_VOCAB);
        return;
    }
    if (blk->kind == BLOCK_HEAD) {
        gpt_add_tensor(m, off, "model.norm.weight", C, 0, -1.f, rep);
        if (!c->tie) gpt_add_tensor(m, off, "lm_head.weight", c->V, C, std, TP_VOCAB);
        return;
    }
#define T_(suffix, r, cols, s, split)                                                              \
    snprintf(nm, sizeof nm, "model.layers.%d.%s", blk->layer, suffix);                             \
    gpt_add_tensor(m, off, nm, r, cols, s, split)
    // order matters: llama_params() in block_llama.c walks the same sequence. Under tensor
    // parallelism a rank's q|k|v and gate|up stay fused: its rows of each, back to back.
    T_("input_layernorm.weight", C, 0, -1.f, rep);
    T_("self_attn.q_proj.weight", c->H * hs, C, std, TP_ROWS);
    T_("self_attn.k_proj.weight", c->KV * hs, C, std, kv);
    T_("self_attn.v_proj.weight", c->KV * hs, C, std, kv);
    T_("self_attn.o_proj.weight", C, c->H * hs, res_std, TP_COLS);
    T_("post_attention_layernorm.weight", C, 0, -1.f, rep);
    T_("mlp.gate_proj.weight", F, C, std, TP_ROWS);
    T_("mlp.up_proj.weight", F, C, std, TP_ROWS);
    T_("mlp.down_proj.weight", C, F, res_std, TP_COLS);
#undef T_
}

int llama_tp_check(const GPTConfig *c, int tp) {
    if (c->H % tp)
        return loom_fail("--tp %d must divide --heads %d (each rank holds whole heads)", tp, c->H);
    if (c->KV % tp && tp % c->KV)
        return loom_fail("--arch llama --tp %d with --kv-heads %d: tp must divide the kv heads "
                         "(each rank holds KV/tp) or be a multiple of them (tp/KV ranks share one)",
                         tp, c->KV);
    if (c->F % tp)
        return loom_fail("--arch llama --tp %d must divide --ffn-dim %d (each rank holds F/tp "
                         "columns of gate and of up)",
                         tp, c->F);
    return 0;
}

size_t llama_layer_act_floats(const GPTConfig *c, const Backend *be, int tp, size_t R, int B,
                              int T) {
    size_t BT = (size_t)B * T, C = (size_t)c->C, hs = C / (size_t)c->H, F = (size_t)c->F / tp;
    int H = c->H / tp, KV = c->KV % tp ? 1 : c->KV / tp; // this rank's heads
    size_t qkv = ((size_t)H + 2 * (size_t)KV) * hs;
    // ln1, res2, ln2 (R,C) | atty (N, H·hs) | qkv (after RoPE) | gate|up (2F), swiglu (F) |
    // 2 rstd (R) | att
    return R * (3 * C + 2) + BT * (H * hs + qkv + 3 * F) +
           be->attention_saved_floats(B, T, H, (int)hs);
}

size_t llama_scratch_floats(const GPTConfig *c, size_t BT, int sp) {
    size_t C = (size_t)c->C, hs = C / (size_t)c->H, F = (size_t)c->F;
    size_t qkv = ((size_t)c->H + 2 * (size_t)c->KV) * hs, big = qkv > 2 * F ? qkv : 2 * F;
    // layer backward: big (d gate|up or d qkv), dln (C), dsmall (max(F, C)), recompute out (C);
    // a tensor-parallel rank's widths are at most these; --sp: gathered and reordered (C) each
    size_t need = big + 2 * C + (F > C ? F : C) + (sp ? 2 * C : 0), gpt = 7 * C;
    return BT * (need > gpt ? need : gpt) + (sp ? C : 0); // and the RMSNorm weight's (C)
}

double llama_flops_per_step(const GPTConfig *c, int B, int T) {
    double C = c->C, L = c->L, V = c->V, BT = (double)B * T, F = c->F;
    double hs = C / c->H, qkv = (c->H + 2.0 * c->KV) * hs;
    double matmul_params = L * (qkv * C + C * C + 3.0 * F * C) + V * C; // weights in products
    double attn = L * 2.0 * 2.0 * T * C; // QKᵀ and att·V per token (full, as computed)
    return 6.0 * matmul_params * BT + 3.0 * attn * BT;
}

// Llama 3.1's rule on one inverse frequency f (wavelength λ = 2π/f, original context n):
// λ < n/high: f; λ > n/low: f/factor; between: (1−s)·f/factor + s·f, s = (n/λ − low)/(high − low).
static float llama3_scaled(float f, const GPTConfig *c) {
    float n = (float)c->rope_orig, wavelen = 2.0f * (float)M_PI / f;
    if (wavelen < n / c->rope_high) return f;
    if (wavelen > n / c->rope_low) return f / c->rope_factor;
    float s = (n / wavelen - c->rope_low) / (c->rope_high - c->rope_low);
    return (1.0f - s) * f / c->rope_factor + s * f;
}

void llama_rope_tables(int *pos, float *freq, const GPTConfig *c, int T,
                       const ContextParallel *cp) {
    int hs = c->C / c->H, ch, p0, p1;
    for (int t = 0; t < T; t++)
        pos[t] = t;
    if (cp->n > 1) { // a context-parallel rank's T = Tl rows: its two chunks' global positions
        gpt_cp_chunks(T * cp->n, cp->n, cp->i, &ch, &p0, &p1);
        for (int t = 0; t < T; t++)
            pos[t] = t < ch ? p0 + t : p1 + t - ch;
    }
    for (int i = 0; i < hs / 2; i++) { // float32, as the reference computes theta^(2i/hs)
        freq[i] = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)hs);
        if (c->rope_scaling == ROPE_LLAMA3) freq[i] = llama3_scaled(freq[i], c);
    }
}
