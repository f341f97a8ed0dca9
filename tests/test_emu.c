// test_emu.c — the emulated device backend (emu.c, --device emu): its buffers are addresses the
// host cannot dereference, and every op computes exactly what the CPU backend computes.
//   * the same bits as the CPU backend on the same inputs: matmul forward and backward (dW and
//     dbias accumulated onto a non-zero start), LayerNorm, attention, the encoder and the loss
//     (token and target arrays in host memory), AdamW, sumsq and sumsq_chunks (out in host
//     memory), upload/download round trips, copy host→device, device→host and device→device;
//   * a host read through a buffer from alloc kills a forked child with SIGSEGV or SIGBUS (the
//     positive control: the same child reading a downloaded copy exits 0);
//   * a kernel given an untagged host pointer exits with an error that names the op (a status,
//     not a signal);
//   * mem_peak counts allocations and releases; owns; capabilities as the CPU's but host memory.
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/rng.h"
#include "test.h"

static Rng rng;
static const Backend *cpu, *emu;

static float *randv(size_t n) {
    float *x = xalloc_floats(n);
    for (size_t i = 0; i < n; i++)
        x[i] = rng_uniform(&rng) * 2.0f - 1.0f;
    return x;
}
// A device copy of host x (n floats).
static float *dev_of(const float *x, size_t n) {
    float *d = emu->alloc(n);
    emu->upload(d, x, n);
    return d;
}
// 1 when device buffer d holds the bits of host h.
static int same_bits(const float *d, const float *h, size_t n) {
    float *t = xalloc_floats(n);
    emu->download(t, d, n);
    int ok = !memcmp(t, h, n * sizeof(float));
    free(t);
    return ok;
}

// Runs fn(arg) in a forked child (no core file) with its stderr into err[n]; returns its wait
// status.
static int in_child(void (*fn)(void *), void *arg, char *err, size_t n) {
    int fd[2];
    if (pipe(fd)) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        signal(SIGSEGV, SIG_DFL), signal(SIGBUS, SIG_DFL); // (a sanitizer's handler exits 1)
        dup2(fd[1], 2), close(fd[0]), close(fd[1]);
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (n && got < n - 1 && (r = read(fd[0], err + got, n - 1 - got)) > 0)
        got += (size_t)r;
    if (n) err[got] = 0;
    close(fd[0]);
    int st = -1;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return st;
}
static void read_through(void *p) {
    volatile float *x = p;
    (void)x[1];
}
static void matmul_host_inp(void *p) {
    float **b = p; // b[0] device out, b[1] host inp, b[2] device w
    emu->matmul_forward(b[0], b[1], b[2], NULL, 2, 4, 3);
}

// The fork tests come first: a child must not start OpenMP after the parent has.
TEST(host_read_faults) {
    float *d = emu->alloc(64), host[64];
    char err[512];
    CHECK(emu->owns(d) && !emu->owns(host) && !emu->owns(NULL), "owns: device %d host %d NULL %d",
          emu->owns(d), emu->owns(host), emu->owns(NULL));
    int st = in_child(read_through, d, err, sizeof err);
    CHECK(WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS),
          "a host read of a device buffer did not fault (status 0x%x): %s", st, err);
    emu->download(host, d, 64); // positive control: the same read of the host copy
    st = in_child(read_through, host, err, sizeof err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "control: reading host memory gave 0x%x", st);
    st = in_child(read_through, d + 8, err, sizeof err); // pointer arithmetic keeps the tag
    CHECK(WIFSIGNALED(st), "a host read at an offset into a device buffer did not fault (0x%x)",
          st);
    emu->release(d);
}

TEST(host_pointer_to_kernel_fails) {
    float *out = emu->alloc(6), *w = emu->alloc(12), inp[8] = {0};
    float *args[3] = {out, inp, w};
    char err[512];
    int st = in_child(matmul_host_inp, args, err, sizeof err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0,
          "matmul_forward with a host inp: status 0x%x (want an error exit, not a signal)", st);
    CHECK(strstr(err, "emu backend: matmul_forward got a host pointer"), "its message: %s", err);
    emu->release(out), emu->release(w);
}

TEST(products) {
    int N = 37, C = 50, OC = 61;
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *x = randv(nx), *w = randv(nw), *b = randv(OC), *g = randv(no);
    float *o = xalloc_floats(no), *di = xalloc_floats(nx), *dw = randv(nw), *db = randv(OC);
    float *X = dev_of(x, nx), *W = dev_of(w, nw), *Bi = dev_of(b, OC), *G = dev_of(g, no);
    float *O = emu->alloc(no), *DI = emu->alloc(nx), *DW = dev_of(dw, nw), *DB = dev_of(db, OC);
    cpu->matmul_forward(o, x, w, b, N, C, OC);
    emu->matmul_forward(O, X, W, Bi, N, C, OC);
    CHECK(same_bits(O, o, no), "matmul_forward");
    cpu->matmul_backward(di, dw, db, g, x, w, N, C, OC);
    emu->matmul_backward(DI, DW, DB, G, X, W, N, C, OC);
    CHECK(same_bits(DI, di, nx) && same_bits(DW, dw, nw) && same_bits(DB, db, OC),
          "matmul_backward");
    emu->matmul_forward(O, X, W, NULL, N, C, OC); // NULL bias stays NULL
    cpu->matmul_forward(o, x, w, NULL, N, C, OC);
    CHECK(same_bits(O, o, no), "matmul_forward without bias");
    free(x), free(w), free(b), free(g), free(o), free(di), free(dw), free(db);
    emu->release(X), emu->release(W), emu->release(Bi), emu->release(G);
    emu->release(O), emu->release(DI), emu->release(DW), emu->release(DB);
}

TEST(layers) {
    int B = 2, T = 12, C = 16, NH = 2, V = 40, N = B * T;
    size_t nx = (size_t)N * C, natt = cpu->attention_saved_floats(B, T, NH, C / NH);
    float *x = randv(nx), *w = randv(C), *b = randv(C), *qkv = randv(3 * nx);
    float *wte = randv((size_t)V * C), *wpe = randv((size_t)T * C), *lg = randv((size_t)N * V);
    int inp[24], tg[24];
    for (int i = 0; i < N; i++)
        inp[i] = (i * 7) % V, tg[i] = (i * 3 + 1) % V;
    float *o = xalloc_floats(nx), *mean = xalloc_floats(N), *rstd = xalloc_floats(N);
    float *att = xalloc_floats(natt), *ao = xalloc_floats(nx), *enc = xalloc_floats(nx);
    float *losses = xalloc_floats(N);
    float *X = dev_of(x, nx), *Wd = dev_of(w, C), *Bd = dev_of(b, C), *Q = dev_of(qkv, 3 * nx);
    float *WTE = dev_of(wte, (size_t)V * C), *WPE = dev_of(wpe, (size_t)T * C);
    float *LG = dev_of(lg, (size_t)N * V), *O = emu->alloc(nx), *M = emu->alloc(N);
    float *R = emu->alloc(N), *ATT = emu->alloc(natt), *AO = emu->alloc(nx);
    float *ENC = emu->alloc(nx), *L = emu->alloc(N);
    cpu->layernorm_forward(o, mean, rstd, x, w, b, N, C);
    emu->layernorm_forward(O, M, R, X, Wd, Bd, N, C);
    CHECK(same_bits(O, o, nx) && same_bits(M, mean, N) && same_bits(R, rstd, N),
          "layernorm_forward");
    cpu->attention_forward(ao, att, qkv, B, T, C, NH);
    emu->attention_forward(AO, ATT, Q, B, T, C, NH);
    CHECK(same_bits(AO, ao, nx) && same_bits(ATT, att, natt), "attention_forward");
    cpu->encoder_forward(enc, inp, wte, wpe, B, T, C);
    emu->encoder_forward(ENC, inp, WTE, WPE, B, T, C);
    CHECK(same_bits(ENC, enc, nx), "encoder_forward (host token ids)");
    double l1 = cpu->softmax_xent_forward(lg, losses, tg, N, V);
    double l2 = emu->softmax_xent_forward(LG, L, tg, N, V);
    CHECK(l1 == l2 && same_bits(LG, lg, (size_t)N * V) && same_bits(L, losses, N),
          "softmax_xent_forward: %.17g vs %.17g", l1, l2);
    free(x), free(w), free(b), free(qkv), free(wte), free(wpe), free(lg), free(o), free(mean);
    free(rstd), free(att), free(ao), free(enc), free(losses);
    float *all[] = {X, Wd, Bd, Q, WTE, WPE, LG, O, M, R, ATT, AO, ENC, L};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        emu->release(all[i]);
}

// The fused ops (backend.h): the CPU's residual + LayerNorm equal to the two ops bit for bit
// (the residual written over its first input, as the model calls it); emu's three equal to the
// CPU's ops one by one, the GELU backward's dpre written over its gin.
TEST(fused_ops) {
    int N = 19, C = 24, OC = 40;
    size_t nc = (size_t)N * C, no = (size_t)N * OC;
    float *a = randv(nc), *x = randv(nc), *w = randv(C), *b = randv(C);
    float *res = xalloc_floats(nc), *ln = xalloc_floats(nc), *mean = xalloc_floats(N);
    float *rstd = xalloc_floats(N), *res2 = xalloc_floats(nc), *ln2 = xalloc_floats(nc);
    float *mean2 = xalloc_floats(N), *rstd2 = xalloc_floats(N);
    cpu->residual_forward(res, a, x, nc);
    cpu->layernorm_forward(ln, mean, rstd, res, w, b, N, C);
    memcpy(res2, a, nc * sizeof(float));
    CHECK(cpu->residual_layernorm_forward(res2, ln2, mean2, rstd2, res2, x, w, b, N, C) &&
              !memcmp(res2, res, nc * 4) && !memcmp(ln2, ln, nc * 4) &&
              !memcmp(mean2, mean, N * 4) && !memcmp(rstd2, rstd, N * 4),
          "cpu residual_layernorm_forward");
    float *RES = dev_of(a, nc), *X = dev_of(x, nc), *Wd = dev_of(w, C), *Bd = dev_of(b, C);
    float *LN = emu->alloc(nc), *M = emu->alloc(N), *R = emu->alloc(N);
    CHECK(emu->residual_layernorm_forward(RES, LN, M, R, RES, X, Wd, Bd, N, C) &&
              same_bits(RES, res, nc) && same_bits(LN, ln, nc) && same_bits(M, mean, N) &&
              same_bits(R, rstd, N),
          "emu residual_layernorm_forward");
    // the MLP's up product with GELU, and its backward through the down product
    float *inp = randv(nc), *wf = randv((size_t)OC * C), *bf = randv(OC), *dout = randv(nc);
    float *wp = randv((size_t)C * OC), *gw = randv((size_t)C * OC), *gb = randv(C);
    float *pre = xalloc_floats(no), *gl = xalloc_floats(no), *dg = xalloc_floats(no);
    float *dpre = xalloc_floats(no);
    float *INP = dev_of(inp, nc), *WF = dev_of(wf, (size_t)OC * C), *BF = dev_of(bf, OC);
    float *DOUT = dev_of(dout, nc), *WP = dev_of(wp, (size_t)C * OC);
    float *GW = dev_of(gw, (size_t)C * OC), *GB = dev_of(gb, C);
    float *PRE = emu->alloc(no), *GL = emu->alloc(no);
    cpu->matmul_forward(pre, inp, wf, bf, N, C, OC);
    cpu->gelu_forward(gl, pre, no);
    CHECK(emu->matmul_gelu_forward(GL, PRE, INP, WF, BF, N, C, OC) && same_bits(PRE, pre, no) &&
              same_bits(GL, gl, no),
          "emu matmul_gelu_forward");
    cpu->matmul_backward(dg, gw, gb, dout, gl, wp, N, OC, C); // y (N,C) = gl · wpᵀ + b
    cpu->gelu_backward(dpre, pre, dg, no);
    CHECK(emu->matmul_gelu_backward(GL, GW, GB, DOUT, GL, PRE, WP, N, OC, C) &&
              same_bits(GL, dpre, no) && same_bits(GW, gw, (size_t)C * OC) && same_bits(GB, gb, C),
          "emu matmul_gelu_backward (dpre over gin)");
    float *h[] = {a,   x,  w,  b,    res, ln, mean, rstd, res2, ln2, mean2, rstd2,
                  inp, wf, bf, dout, wp,  gw, gb,   pre,  gl,   dg,  dpre};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        free(h[i]);
    float *d[] = {RES, X, Wd, Bd, LN, M, R, INP, WF, BF, DOUT, WP, GW, GB, PRE, GL};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        emu->release(d[i]);
}

TEST(optimizer_and_reductions) {
    size_t n = 100003; // above the CPU's parallel threshold, not a multiple of the chunks
    float *p = randv(n), *g = randv(n), *m = randv(n), *v = randv(n);
    for (size_t i = 0; i < n; i++)
        v[i] *= v[i];
    float *P = dev_of(p, n), *G = dev_of(g, n), *M = dev_of(m, n), *V = dev_of(v, n);
    for (int t = 1; t <= 3; t++) {
        cpu->adamw(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
        emu->adamw(P, G, M, V, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
    }
    CHECK(same_bits(P, p, n) && same_bits(M, m, n) && same_bits(V, v, n), "adamw");
    double s1 = cpu->sumsq(p, n), s2 = emu->sumsq(P, n);
    CHECK(s1 == s2, "sumsq %.17g vs %.17g", s1, s2);
    double c1[8], c2[8];
    cpu->sumsq_chunks(p, n, 16384, c1);
    emu->sumsq_chunks(P, n, 16384, c2); // out: host memory
    CHECK(!memcmp(c1, c2, 7 * sizeof(double)), "sumsq_chunks");
    CHECK(emu->all_finite(P, n) == 1, "all_finite");
    free(p), free(g), free(m), free(v);
    emu->release(P), emu->release(G), emu->release(M), emu->release(V);
}

TEST(transfers) {
    size_t n = 1000;
    float *h = randv(n), *back = xalloc_floats(n), *h2 = xalloc_floats(n);
    float *D1 = emu->alloc(n), *D2 = emu->alloc(n);
    emu->upload(D1, h, n);
    emu->download(back, D1, n);
    CHECK(!memcmp(back, h, n * sizeof(float)), "upload/download round trip");
    emu->copy(D2, D1, n); // device → device
    CHECK(same_bits(D2, h, n), "copy device→device");
    emu->fill(D2, 0.0f, n);
    emu->copy(D2 + 10, h + 10, n - 20); // host → device, at offsets
    emu->copy(h2, D2, n);               // device → host
    CHECK(h2[0] == 0.0f && h2[n - 1] == 0.0f && !memcmp(h2 + 10, h + 10, (n - 20) * sizeof(float)),
          "copy host→device and device→host at offsets");
    emu->download(back, D1 + 500, 10); // a device pointer at an offset
    CHECK(!memcmp(back, h + 500, 10 * sizeof(float)), "download from an offset");
    free(h), free(back), free(h2);
    emu->release(D1), emu->release(D2);
}

TEST(mem_peak) {
    size_t p0 = emu->mem_peak();
    float *a = emu->alloc(1 << 20), *b = emu->alloc(1 << 20);
    size_t p1 = emu->mem_peak();
    CHECK(p1 >= p0 && p1 >= (size_t)2 * (4 << 20), "peak %zu after two 4 MiB buffers", p1);
    emu->release(a), emu->release(b);
    float *c = emu->alloc(1 << 20);
    CHECK(emu->mem_peak() == p1, "peak moved to %zu from %zu after release + a smaller alloc",
          emu->mem_peak(), p1);
    emu->release(c);
    float *d = emu->alloc(1 << 22); // 16 MiB: above the old peak if releases were subtracted
    size_t p2 = emu->mem_peak();
    CHECK(p2 > p1 && p2 - p1 < (size_t)(16 << 20),
          "peak %zu after 16 MiB with everything else released (was %zu)", p2, p1);
    emu->release(d);
    emu->release(NULL);
}

// The copy stream runs a copy when its ticket (or a later one) is waited for, in queue order:
// before that the destination holds its old bytes, and the source is read at that time.
TEST(copy_stream) {
    size_t n = 1000;
    float *h = emu->host_alloc(n * sizeof(float)), *d = emu->alloc(n), *back = xalloc_floats(n);
    CHECK(!emu->owns(h) && emu->owns(d), "host_alloc is host memory");
    for (size_t i = 0; i < n; i++)
        h[i] = (float)i;
    uint64_t t1 = emu->copy_async(d, h, n * sizeof(float));         // host -> device
    h[0] = -1;                                                      // read when the copy runs
    uint64_t t2 = emu->copy_async(h + 500, d, 100 * sizeof(float)); // device -> host, after t1
    CHECK(t2 > t1 && h[500] == 500.f, "a copy ran before its wait");
    emu->copy_wait(t2); // t1 too
    emu->download(back, d, n);
    CHECK(back[0] == -1.f && back[999] == 999.f, "device after the waits: %g %g", back[0],
          back[999]);
    CHECK(h[500] == -1.f && h[599] == 99.f, "host after the second copy: %g %g", h[500], h[599]);
    CHECK(emu->copy_done(t1) && emu->copy_done(t2), "done after the wait");
    size_t used = emu->mem_used();
    float *x = emu->alloc(256);
    CHECK(emu->mem_used() == used + 256 * sizeof(float), "mem_used counts an allocation");
    emu->release(x), emu->release(d), emu->host_free(h), free(back);
}

TEST(table) {
    CHECK(!strcmp(emu->name, "emu") && !strcmp(emu->precision, "fp32") && !emu->host_memory &&
              !emu->act16 && !emu->act16_mark && !cpu->owns,
          "name, precision, host_memory, act16, the CPU's owns");
    CHECK(!backend_supports(emu, BACKEND_HOST_MEMORY), "host memory");
    CHECK(backend_supports(emu, BACKEND_COPY_STREAM) && !backend_supports(cpu, BACKEND_COPY_STREAM),
          "the copy stream: a device's (emu's), not the CPU's");
    for (int c = BACKEND_HOST_MEMORY + 1; c < BACKEND_NCAPS; c++)
        CHECK(c == BACKEND_COPY_STREAM || backend_supports(emu, c) == backend_supports(cpu, c),
              "%s: emu %d, cpu %d", backend_cap_name(c), backend_supports(emu, c),
              backend_supports(cpu, c));
    CHECK(!emu->classifier == !cpu->classifier, "the fused classifier: emu.c must wrap the CPU's");
    const Backend *e = backend_select_dtype("emu", "bf16", 0);
    CHECK(!e && strstr(loom_errmsg(), "emu"), "--device emu --dtype bf16: %s", loom_errmsg());
    CHECK(backend_select("emu:fp32", 0) == emu, "emu:fp32");
}

int main(void) {
    rng_seed(&rng, 7, 1);
    cpu = backend_select("cpu", 0);
    emu = backend_select("emu", 0);
    if (!cpu || !emu) {
        printf("FAIL - select: %s\n", loom_errmsg());
        return 1;
    }
    RUN(host_read_faults);
    RUN(host_pointer_to_kernel_fails);
    RUN(products);
    RUN(layers);
    RUN(fused_ops);
    RUN(optimizer_and_reductions);
    RUN(transfers);
    RUN(mem_peak);
    RUN(copy_stream);
    RUN(table);
    return test_summary();
}
