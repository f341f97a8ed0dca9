// dirlock.c — the advisory lock of a checkpoint directory (see dirlock.h).
#include "dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common.h"

// What the holder wrote into the lock file ("pid 123 host h"), without the newline. The holder
// writes it just after taking the lock: an empty file is read again for up to a second.
static void holder(int fd, char *buf, size_t n) {
    for (int tries = 0; tries < 20; tries++) {
        ssize_t k = pread(fd, buf, n - 1, 0);
        buf[k > 0 ? k : 0] = 0;
        buf[strcspn(buf, "\n")] = 0;
        if (buf[0]) return;
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    snprintf(buf, n, "pid and host not written yet");
}

int dirlock_take(const char *dir) {
    char path[4200];
    if (mkdir(dir, 0755) && errno != EEXIST)
        return loom_fail("%s: cannot create checkpoint directory: %s", dir, strerror(errno));
    if (path_fmt(path, sizeof path, "%s/.lock", dir)) return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return loom_fail("%s: cannot open the lock file: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            char who[512];
            holder(fd, who, sizeof who);
            close(fd);
            loom_fail("%s is in use by another run (%s, lock %s); give this run another --save "
                      "directory, or wait for that one to end",
                      dir, who, path);
            return -2;
        }
        close(fd);
        return loom_fail("%s: cannot lock: %s", path, strerror(e));
    }
    char host[256] = "unknown", line[400];
    if (gethostname(host, sizeof host)) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;
    int len = snprintf(line, sizeof line, "pid %d host %s\n", (int)getpid(), host);
    if (ftruncate(fd, 0) || pwrite(fd, line, (size_t)len, 0) != len) {
        int e = errno;
        close(fd);
        return loom_fail("%s: cannot write the lock file: %s", path, strerror(e));
    }
    return fd;
}

void dirlock_release(int fd) {
    if (fd >= 0) close(fd);
}
