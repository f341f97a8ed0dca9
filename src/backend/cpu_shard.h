// cpu_shard.h — the CPU backend's vocabulary-shard kernels (cpu_shard.c), for cpu.c's table.
#pragma once

void cpu_encoder_forward_shard(float *out, const int *inp, const float *wte, const float *wpe,
                               int v0, int nv, int B, int T, int C);
void cpu_encoder_backward_shard(float *dwte, float *dwpe, const float *dout, const int *inp, int v0,
                                int nv, int B, int T, int C);
void cpu_xent_shard_max(float *mx, const float *logits, int N, int V, int nv);
void cpu_xent_shard_sum(float *st, const float *logits, const float *mx, const int *targets, int v0,
                        int N, int V, int nv);
double cpu_xent_shard_finish(float *lp, float *losses, const float *mx, const float *st, int N,
                             int V, int nv);
void cpu_xent_shard_backward(float *pd, const int *targets, int v0, float scale, int N, int V,
                             int nv);
