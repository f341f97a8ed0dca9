// testhooks.c — the environment's test hooks (see testhooks.h).
#include "testhooks.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int testhook_fault(int rank, int step) {
    const char *names[4] = {"LOOM_FAULT_KILL", "LOOM_FAULT_HANG", "LOOM_FAULT_STOP",
                            "LOOM_FAULT_MISMATCH"};
    for (int k = 0; k < 4; k++) {
        const char *v = getenv(names[k]);
        int r, s;
        if (!v || sscanf(v, "%d:%d", &r, &s) != 2 || r != rank || s != step) continue;
        fprintf(stderr, "loom[rank %d]: %s at step %d\n", rank, names[k], step);
        fflush(stderr);
        if (k == 0) raise(SIGKILL);
        if (k == 2) raise(SIGSTOP); // the whole process, its MPI and progress threads included
        if (k == 3) return 1;
        for (;;)
            pause();
    }
    return 0;
}

void testhook_signal(int rank, int step) {
    const char *v = getenv("LOOM_FAULT_SIGNAL");
    int r, s;
    char name[16] = "TERM";
    if (v && !strncmp(v, "all:", 4) && sscanf(v + 4, "%d:%15[A-Z0-9]", &s, name) >= 1)
        r = rank; // every rank
    else if (!v || sscanf(v, "%d:%d:%15[A-Z0-9]", &r, &s, name) < 2)
        return;
    if (r != rank || s != step) return;
    int sig = !strcmp(name, "INT") ? SIGINT : !strcmp(name, "USR1") ? SIGUSR1 : SIGTERM;
    fprintf(stderr, "loom[rank %d]: LOOM_FAULT_SIGNAL: SIG%s at the start of step %d\n", rank,
            sig == SIGINT    ? "INT"
            : sig == SIGUSR1 ? "USR1"
                             : "TERM",
            step);
    fflush(stderr);
    kill(getpid(), sig); // process-directed, as one from outside
}

int testhook_save_fault(int step) {
    const char *v = getenv("LOOM_FAULT_SAVE");
    if (!v || !strncmp(v, "rank:", 5)) return 0;
    if (strncmp(v, "step:", 5)) return 1; // every save
    for (const char *p = v + 5; *p;) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',')) return 0; // not a list of step numbers
        if (n == step) return 1;
        p = end + (*end == ',');
    }
    return 0;
}

int testhook_save_rank_fault(int rank, int step) {
    const char *v = getenv("LOOM_FAULT_SAVE");
    int r, s;
    return v && sscanf(v, "rank:%d:step:%d", &r, &s) == 2 && r == rank && s == step;
}

void testhook_save_pause(int rank, int step) {
    const char *v = getenv("LOOM_FAULT_SAVE_PAUSE");
    int r, s;
    if (!v || sscanf(v, "%d:%d", &r, &s) != 2 || r != rank || s != step) return;
    fprintf(stderr,
            "loom[rank %d]: LOOM_FAULT_SAVE_PAUSE at step %d: paused in the shard write, pid %d\n",
            rank, step, (int)getpid());
    fflush(stderr);
    for (;;)
        pause();
}

void testhook_save_kill(const char *point) {
    const char *v = getenv("LOOM_FAULT_SAVE_KILL");
    if (!v || strcmp(v, point)) return;
    fprintf(stderr, "loom: LOOM_FAULT_SAVE_KILL at '%s'\n", point);
    fflush(stderr);
    raise(SIGKILL);
}

int testhook_save_no_exchange(void) { return getenv("LOOM_SAVE_NO_EXCHANGE") != NULL; }
double testhook_save_delay(int step) {
    const char *v = getenv("LOOM_SAVE_DELAY");
    if (!v) return 0;
    const char *at = strchr(v, '@');
    return !at || atoi(at + 1) == step ? atof(v) : 0;
}

void testhook_save_gate(int step) {
    const char *v = getenv("LOOM_SAVE_GATE");
    if (!v) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", v);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%d\n", step);
    if (fclose(f) || rename(tmp, v)) return; // whole, at once
    struct timespec nap = {0, 10 * 1000 * 1000};
    while (access(v, F_OK) == 0)
        nanosleep(&nap, NULL);
}

size_t testhook_comm_chunk(void) {
    const char *v = getenv("LOOM_COMM_CHUNK");
    return v && atol(v) > 0 ? (size_t)atol(v) : (size_t)1 << 20;
}

int testhook_tag_ub(void) {
    const char *v = getenv("LOOM_TAG_UB");
    return v ? atoi(v) : 0;
}

double testhook_comm_delay(void) {
    const char *v = getenv("LOOM_COMM_DELAY");
    return v ? atof(v) : 0;
}

size_t testhook_pipe_chunk(void) {
    const char *v = getenv("LOOM_PIPE_CHUNK");
    return v && atol(v) > 0 ? (size_t)atol(v) : (size_t)1 << 18;
}

int testhook_pipe_swap_slots(void) {
    const char *v = getenv("LOOM_PIPE_SWAP_SLOTS");
    return v && atoi(v) > 0 ? atoi(v) : 0;
}

int testhook_offload_fixed_costs(void) {
    const char *v = getenv("LOOM_OFFLOAD_COSTS");
    return v && !strcmp(v, "fixed");
}
int testhook_comm_no_stage(void) { return getenv("LOOM_COMM_NO_STAGE") != NULL; }
int testhook_swap_no_read_wait(void) { return getenv("LOOM_SWAP_NO_READ_WAIT") != NULL; }
int testhook_tied_interleaved(void) { return getenv("LOOM_TIED_INTERLEAVED") != NULL; }

long testhook_peer_diverge(void) {
    const char *v = getenv("LOOM_FAULT_DIVERGE");
    return v ? atol(v) : 0;
}

long testhook_peer_kill_exchange(void) {
    const char *v = getenv("LOOM_FAULT_PEER_KILL");
    return v ? atol(v) : 0;
}

int testhook_peer_one_donor(void) {
    const char *v = getenv("LOOM_PEER_ONE_DONOR");
    return v && *v && strcmp(v, "0");
}

int testhook_peer_no_spill(void) {
    const char *v = getenv("LOOM_PEER_NO_SPILL");
    return v && *v && strcmp(v, "0");
}

int testhook_cpu_no_bf16(void) {
    const char *v = getenv("LOOM_CPU_NO_BF16");
    return v && *v && strcmp(v, "0");
}

int testhook_cpu_no_avx512(void) {
    const char *v = getenv("LOOM_CPU_NO_AVX512");
    return v && *v && strcmp(v, "0");
}

int testhook_overflow(int step) {
    const char *v = getenv("LOOM_FAULT_OVERFLOW");
    for (const char *p = v; p && *p; p++) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end != p && n == step) return 1;
        p = strchr(end, ',');
        if (!p) break;
    }
    return 0;
}
