// stop.c — the stop request from a signal and its grace period (see stop.h).
#include "stop.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t first_sig; // the signal that asked to stop
static struct timespec first_at;        // when (CLOCK_MONOTONIC)
static double grace = 0;                // seconds (0: no alarm)
static int announce;                    // say so at the first signal
static char kept[2][600];               // what the directory holds; two buffers so a handler
static volatile sig_atomic_t kept_cur;  // never reads one being written
static const int SIGS[] = {SIGTERM, SIGINT, SIGUSR1};

const char *stop_signame(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGALRM: return "SIGALRM";
    default: return "a signal";
    }
}

double stop_elapsed(void);

static void say(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

// The process cannot finish its stop: say what is on disk, and go.
static void give_up(const char *why, const char *more) {
    say("\nloom: ");
    say(why);
    say(more);
    say(": exiting now without finishing the checkpoint; ");
    say(kept[kept_cur][0] ? kept[kept_cur] : "no checkpoint was saved by this run");
    say("\n");
    _exit(EXIT_INTERRUPTED);
}

static void on_signal(int sig) {
    if (sig == SIGALRM) give_up("the stop grace period ran out", "");
    if (first_sig) {
        // the same signal within a second is one request delivered twice (a scheduler that
        // signals every process of the job, and mpirun forwarding its own copy)
        if (sig == first_sig && stop_elapsed() < 1.0) return;
        give_up(stop_signame(sig), " again");
    }
    clock_gettime(CLOCK_MONOTONIC, &first_at);
    first_sig = sig;
    if (grace > 0) alarm((unsigned)ceil(grace));
    if (announce) {
        say("\nloom: ");
        say(stop_signame(sig));
        say(": stopping at the next step boundary and saving (a second signal exits at once)\n");
    }
}

void stop_install(double grace_s, int say_it) {
    grace = grace_s, announce = say_it;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; // a write or read in flight carries on
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof SIGS / sizeof SIGS[0]; i++)
        sigaddset(&sa.sa_mask, SIGS[i]);
    sigaddset(&sa.sa_mask, SIGALRM);
    for (size_t i = 0; i < sizeof SIGS / sizeof SIGS[0]; i++)
        sigaction(SIGS[i], &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
}

void stop_uninstall(void) {
    alarm(0);
    for (size_t i = 0; i < sizeof SIGS / sizeof SIGS[0]; i++)
        signal(SIGS[i], SIG_DFL);
    signal(SIGALRM, SIG_DFL);
}

int stop_signal(void) { return first_sig; }

double stop_elapsed(void) {
    if (!first_sig) return 0;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - first_at.tv_sec) + 1e-9 * (double)(t.tv_nsec - first_at.tv_nsec);
}

double stop_grace_left(void) { return grace > 0 ? grace - stop_elapsed() : 1e30; }

void stop_set_kept(const char *what) {
    int next = !kept_cur;
    snprintf(kept[next], sizeof kept[next], "%s", what);
    kept_cur = next;
}

const char *stop_kept(void) { return kept[kept_cur]; }
