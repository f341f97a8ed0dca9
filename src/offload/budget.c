// budget.c — what block swapping holds in fast memory and moves per step (see offload.h), the
// numbers the executor allocates by and the static analysis plans with; plan helpers.
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "offload.h"
#include "tier.h"

const char *offload_size_str(double bytes, char *buf, size_t n) {
    if (bytes >= (double)(1 << 30))
        snprintf(buf, n, "%.2f GiB", bytes / (1 << 30));
    else
        snprintf(buf, n, "%.1f MiB", bytes / (1 << 20));
    return buf;
}

size_t offload_pad(size_t n) {
    size_t a = TIER_ALIGN / sizeof(float);
    return (n + a - 1) / a * a;
}

// The tied embedding's table: a tensor-parallel part holds its rows of the vocabulary.
size_t offload_wte_floats(const GPT *m) { return (size_t)gpt_vocab_rows(m) * m->cfg.C; }

size_t offload_unit_floats(const GPT *m, OffloadUnit u) {
    size_t f = 0;
    for (int b = u.first; b <= u.last; b++) {
        const Block *blk = &m->blocks[b];
        f += (blk->kind == BLOCK_EMBED ? 1 : 2) * offload_pad(blk->n);
        if (blk->kind == BLOCK_HEAD && u.first > 0) f += 2 * offload_pad(offload_wte_floats(m));
        if (blk->kind == BLOCK_HEAD && u.first == 0)
            f += offload_pad(offload_wte_floats(m)); // H only
    }
    return f;
}

size_t offload_slots_floats(const GPT *m, const OffloadPlan *p) {
    int S = p->prefetch + 2;
    size_t total = 0;
    for (int i = 0; i < S; i++) {
        size_t big = 0;
        for (int u = i; u < p->nunits; u += S) {
            size_t f = offload_unit_floats(m, p->unit[u]);
            if (f > big) big = f;
        }
        total += big;
    }
    return total;
}

double offload_workspace_bytes(const GPT *m, const OffloadShape *s) {
    size_t BT = (size_t)s->B * s->T;
    double own = (double)workspace_own_floats(&m->cfg, m->be, s->B, s->T, s->recompute);
    double shared = (double)workspace_shared_floats(&m->cfg, m->be, s->B, s->T, s->recompute);
    return sizeof(float) * (shared + s->K * own) + (double)s->K * 2 * BT * sizeof(int);
}

size_t offload_opt_chunk(const GPT *m) {
    size_t big = 0;
    for (int b = 0; b < m->nblocks; b++)
        if (m->blocks[b].n > big) big = m->blocks[b].n;
    big = (big + GPT_CHUNK - 1) / GPT_CHUNK * GPT_CHUNK; // pieces on norm-chunk boundaries
    return big < ((size_t)1 << 18) ? big : (size_t)1 << 18;
}

double offload_fast_bytes(const GPT *m, const OffloadShape *s, const OffloadPlan *p) {
    double slots = sizeof(float) * (double)offload_slots_floats(m, p);
    double opt = sizeof(float) * (s->co2 ? 10.0 : 8.0) * (double)offload_opt_chunk(m);
    double norms = sizeof(double) * (double)m->nchunks;
    return slots + offload_workspace_bytes(m, s) + opt + norms + OFFLOAD_IO_BYTES;
}

double offload_min_bytes(const GPT *m, const OffloadShape *s) {
    OffloadPlan p;
    offload_plan_per_block(m, &p);
    double b = offload_fast_bytes(m, s, &p);
    offload_plan_free(&p);
    return b;
}

// Floats of the unit's parameters (all of them, or its layers' only: what a backward reads).
static size_t unit_params(const GPT *m, OffloadUnit u, int layers_only) {
    size_t f = 0;
    for (int b = u.first; b <= u.last; b++)
        if (!layers_only || m->blocks[b].kind == BLOCK_LAYER) f += offload_pad(m->blocks[b].n);
    return f;
}

void offload_io_bytes(const GPT *m, const OffloadShape *s, const OffloadPlan *p, double *read,
                      double *written) {
    size_t all = 0, wte = offload_pad(offload_wte_floats(m)), rd = 0, wr = 0;
    for (int b = 0; b < m->nblocks; b++)
        all += offload_pad(m->blocks[b].n);
    int n = p->nunits;
    for (int u = 0; u < n; u++) // forward
        rd += unit_params(m, p->unit[u], 0);
    if (n > 1) rd += wte;                          // the head's tied wte
    for (int u = n - 3 - p->prefetch; u >= 0; u--) // backward: units no longer in a slot
        rd += unit_params(m, p->unit[u], 1);
    rd += wte, wr += wte; // the head's wte gradient H, out and back
    int N = s->dp > 1 ? s->dp : 1;
    size_t own = s->zero >= 1 ? (all + (size_t)N - 1) / (size_t)N : all;
    if (s->fused) {                                  // each unit updated from its slot:
        rd += 2 * own + offload_pad(m->blocks[0].n); // m, v and the embedding's parameters
    } else {
        wr += own;           // gradients (the owned part: the update reads nothing else)
        rd += all + 3 * own; // update: parameters, and gradients, m, v of the owned part
    }
    wr += all + 2 * own; // parameters (all-gathered under ZeRO-1), m, v
    *read = (double)rd * sizeof(float);
    *written = (double)wr * sizeof(float);
}

void offload_plan_per_block(const GPT *m, OffloadPlan *p) {
    memset(p, 0, sizeof *p);
    p->nunits = m->nblocks;
    p->prefetch = 1;
    p->unit = xcalloc((size_t)m->nblocks, sizeof(OffloadUnit));
    for (int b = 0; b < m->nblocks; b++)
        p->unit[b] = (OffloadUnit){b, b};
}

void offload_plan_free(OffloadPlan *p) {
    free(p->unit);
    memset(p, 0, sizeof *p);
}

static int skip_ws(const char **q) {
    while (isspace((unsigned char)**q))
        (*q)++;
    return **q;
}

int offload_plan_parse_units(const GPT *m, const char *text, OffloadPlan *p) {
    const char *q = text;
    int cap = m->nblocks, n = 0, next = 0;
    OffloadUnit *u = xcalloc((size_t)cap, sizeof *u);
    if (skip_ws(&q) != '[') goto bad;
    q++;
    while (skip_ws(&q) == '[') {
        char *end;
        q++;
        long a = strtol(q, &end, 10);
        q = end;
        if (skip_ws(&q) != ',') goto bad;
        q++;
        long b = strtol(q, &end, 10);
        q = end;
        if (skip_ws(&q) != ']' || a != next || b < a || b >= m->nblocks || n >= cap) goto bad;
        q++;
        u[n++] = (OffloadUnit){(int)a, (int)b};
        next = (int)b + 1;
        if (skip_ws(&q) == ',') q++;
    }
    if (skip_ws(&q) != ']' || next != m->nblocks) goto bad;
    free(p->unit);
    p->unit = u;
    p->nunits = n;
    return 0;
bad:
    free(u);
    return loom_fail("units: '%s' is not a list of consecutive [first, last] block ranges "
                     "covering blocks 0..%d",
                     text, m->nblocks - 1);
}

int offload_parse_size(const char *flag, const char *text, size_t *bytes) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    double mult = 1;
    if (*end == 'K' || *end == 'k')
        mult = 1024.0, end++;
    else if (*end == 'M' || *end == 'm')
        mult = 1048576.0, end++;
    else if (*end == 'G' || *end == 'g')
        mult = 1073741824.0, end++;
    if (errno || end == text || *end || !(v > 0) || v * mult > 1e18)
        return loom_fail("%s: '%s' is not a size (bytes, or a number with K, M or G = KiB, MiB, "
                         "GiB)",
                         flag, text);
    *bytes = (size_t)(v * mult);
    return 0;
}
