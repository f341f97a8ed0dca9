// cuda_act16.c — which device tensors hold 16-bit activations (backend.h's act16_mark): the
// model marks the products' inputs of a GPT-2 workspace in --dtype bf16, and the kernels that
// write or read such a tensor look its first element up here (cu_act16) to take it as bf16.
// A mark is dropped when the buffer that holds it is released (cu_act16_drop).
// LOOM_CUDA_ACT16=0 turns the marks off (Backend.act16 0: every activation fp32, the products
// rounding their inputs into scratch per call, as before); LOOM_CUDA_ACT16=qkv adds the qkv
// product's output and the attention's output gradient (ACT16_QKV), =fch the fc product's output
// (ACT16_FCH: GELU's input), =all (or qkv+fch) both; not the default until a GPU run has
// measured them.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common.h"
#include "../backend.h"
#include "cuda_impl.h"

typedef struct {
    const char *p;
    size_t n; // elements
} Mark;

static Mark *marks;
static size_t nmarks, capmarks;

int cu_act16_enabled(void) {
    const char *e = getenv("LOOM_CUDA_ACT16");
    if (e && !strcmp(e, "0")) return 0;
    int all = cu_list_has(e, "all"); // a list: qkv, fch, all
    return ACT16_INPUTS | (all || cu_list_has(e, "qkv") ? ACT16_QKV : 0) |
           (all || cu_list_has(e, "fch") ? ACT16_FCH : 0);
}

void cu_act16_mark(const float *p, size_t n) {
    if (!p || !n || cu_act16(p)) return;
    if (cu_ctx.dtype != CU_BF16)
        die(EXIT_IO, "CUDA: a 16-bit activation marked outside --dtype bf16 (internal error)");
    if (nmarks == capmarks) {
        capmarks = capmarks ? 2 * capmarks : 64;
        Mark *nm = xmalloc(capmarks * sizeof *nm);
        if (nmarks) memcpy(nm, marks, nmarks * sizeof *nm);
        free(marks);
        marks = nm;
    }
    marks[nmarks++] = (Mark){(const char *)p, n};
}

int cu_act16(const void *p) {
    for (size_t i = nmarks; i-- > 0;)
        if (marks[i].p == (const char *)p) return 1;
    return 0;
}

void cu_act16_drop(const void *p, size_t bytes) {
    const char *lo = p, *hi = lo + bytes;
    for (size_t i = 0; i < nmarks;)
        if (marks[i].p >= lo && marks[i].p < hi)
            marks[i] = marks[--nmarks];
        else
            i++;
}
