// stop.h — a request from outside to stop the run: SIGTERM, SIGINT or SIGUSR1 (what spot and
// preemptible machines, schedulers before a time limit, and Ctrl-C send). The first such signal
// only records itself: the training loop stops at the next step boundary its strategy agrees on
// (every rank the same step: the vote rides on the step's own reductions, strategy.h), saves a
// checkpoint through the normal atomic path and exits with EXIT_STOPPED. The grace period bounds
// all of it: when it runs out, or when a second signal arrives, the process prints what the
// checkpoint directory still holds (stop_set_kept) and exits at once with EXIT_INTERRUPTED,
// which leaves `latest` naming the last complete checkpoint (a save is atomic).
// Everything the handlers touch is async-signal-safe (a flag, a clock, write(2), _exit).
#pragma once

// Exit statuses of a stopped run (README's exit-status table).
enum { EXIT_STOPPED = 8, EXIT_INTERRUPTED = 9 };

// Installs the handlers; grace_s > 0 arms an alarm for that many seconds at the first signal.
// announce: the first signal prints that the run is stopping (the lead rank).
void stop_install(double grace_s, int announce);
// Restores the default dispositions (the run is over).
void stop_uninstall(void);
// The signal number that asked this process to stop (0: none yet).
int stop_signal(void);
// Seconds since that signal (0 when there was none).
double stop_elapsed(void);
// Seconds of the grace period left (a large number without one).
double stop_grace_left(void);
// The line printed if the process must exit before its stop completes: what the checkpoint
// directory holds now (e.g. "latest names ck/step_00000100"). Copied.
void stop_set_kept(const char *what);
const char *stop_kept(void);
// A short name of a stop signal ("SIGTERM").
const char *stop_signame(int sig);
