// cpu_lnsplit.h — the CPU backend's LayerNorm over columns split across ranks (cpu_lnsplit.c),
// for cpu.c's table.
#pragma once

void cpu_ln_split_stats(float *part, const float *inp, const float *mean, int N, int C);
void cpu_ln_split_apply(float *out, float *rstd, const float *inp, const float *mean,
                        const float *sq, const float *w, const float *b, int N, int C, int Cw);
void cpu_ln_split_bwd_stats(float *part, const float *dout, const float *inp, const float *w,
                            const float *mean, const float *rstd, int N, int C);
void cpu_ln_split_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, const float *part,
                           int N, int C, int Cw);
