// dirlock.h — one run per checkpoint directory: an advisory lock on DIR/.lock.
//
// A training run takes it on its --save directory at start-up, before it writes anything there,
// and holds it until it exits: flock(LOCK_EX | LOCK_NB) on DIR/.lock, which then holds the
// holder's "pid PID host HOST". The kernel drops the lock when the holding process dies however
// it dies, so a lock file left by a dead run never blocks (only a live holder does); the file
// itself stays (removing it would race with a run that has just opened it). Readers
// (checkpoint_resolve, pruning, export, sample) never look at it.
// flock is per open file: a second open of the file in the same process does not share the
// lock, so one process takes it once. On a network filesystem flock spans machines only where
// the filesystem makes it (Linux NFS maps it to a POSIX byte-range lock, which the server
// arbitrates; Lustre only when mounted with -o flock).
#pragma once

// Creates DIR if needed and takes its lock: returns the descriptor that holds it (close it to
// release), -2 when another live process holds it (loom_errmsg names DIR and the holder's pid
// and host), or -1 on another error (loom_errmsg names the file).
int dirlock_take(const char *dir);
void dirlock_release(int fd);
