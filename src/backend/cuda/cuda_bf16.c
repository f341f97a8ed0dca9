// cuda_bf16.c — 16-bit operands for the matrix products of --dtype bf16 (and fp16: the
// context's half type, k_half.cu). Weights stay fp32
// (the master copy AdamW updates); each weight matrix a product reads gets a bf16 copy,
// converted once and reused until an op that can change parameters runs (cu_gen: AdamW, the
// vector ops, uploads, copies). Activations and gradients are converted into scratch per call,
// except the activations the model keeps in bf16 already (cuda_act16.c).
#include <stdint.h>
#include <stdlib.h>

#include "../../common.h"
#include "cuda_impl.h"

unsigned cu_gen = 1;

typedef struct {
    const float *src;
    size_t n;
    void *dst;
    unsigned gen;
} Entry;

static Entry *tab;
static size_t cap, used;

static size_t slot_of(const float *p, size_t mask) {
    return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 20) & mask;
}

static Entry *find(const float *p) {
    if (2 * (used + 1) > cap) { // grow (and rehash) at half full
        size_t ncap = cap ? 2 * cap : 256;
        Entry *nt = xcalloc(ncap, sizeof *nt);
        for (size_t i = 0; i < cap; i++)
            if (tab[i].src) {
                size_t j = slot_of(tab[i].src, ncap - 1);
                while (nt[j].src)
                    j = (j + 1) & (ncap - 1);
                nt[j] = tab[i];
            }
        free(tab);
        tab = nt, cap = ncap;
    }
    size_t j = slot_of(p, cap - 1);
    while (tab[j].src && tab[j].src != p)
        j = (j + 1) & (cap - 1);
    return &tab[j];
}

const void *cu_bf16_weight(const float *w, size_t rows, size_t cols, size_t prows) {
    size_t n = prows * cols;
    Entry *e = find(w);
    if (!e->src) e->src = w, used++;
    if (e->dst && e->n != n) cu_free(e->dst), e->dst = NULL;
    if (!e->dst) {
        CU(cu_malloc(&e->dst, (n ? n : 1) * 2));
        e->n = n, e->gen = 0;
    }
    unsigned gen = cu_gen_now();
    if (e->gen != gen) {
        k_to_half(e->dst, w, rows * cols);
        if (prows > rows) // padding rows are zero
            CU(cudaMemsetAsync((char *)e->dst + rows * cols * 2, 0, (prows - rows) * cols * 2,
                               cu_ctx.stream));
        e->gen = gen;
    }
    return e->dst;
}

void cu_bf16_flush(void) {
    for (size_t i = 0; i < cap; i++)
        cu_free(tab[i].dst);
    free(tab);
    tab = NULL, cap = used = 0;
}

const void *cu_bf16_act(int slot, const float *x, size_t n) {
    if (cu_act16(x)) return x; // a marked activation already holds bf16
    void *d = cu_scratch(slot, (n ? n : 1) * 2);
    k_to_half(d, x, n);
    return d;
}
