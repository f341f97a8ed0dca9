// fsutil.c — file-tree helpers (see fsutil.h).
#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common.h"

// One entry of the tree: a directory (recursed into) or a regular file (copied); anything else
// — a symbolic link, a device, a FIFO — is refused rather than followed or read.
static int copy_entry(const char *s, const char *t) {
    struct stat st;
    if (lstat(s, &st)) return loom_fail("%s: cannot stat: %s", s, strerror(errno));
    if (S_ISLNK(st.st_mode))
        return loom_fail("%s: a symbolic link; only regular files and directories are copied "
                         "(links are not followed)",
                         s);
    if (S_ISDIR(st.st_mode)) return copy_tree(s, t);
    if (!S_ISREG(st.st_mode)) return loom_fail("%s: not a regular file or a directory", s);
    FILE *in = fopen(s, "rb");
    if (!in) return loom_fail("%s: cannot open: %s", s, strerror(errno));
    AtomicOut o;
    if (aout_open(&o, t)) return fclose(in), -1;
    enum { PIECE = 64 << 10 }; // streamed: a large file never sits in memory whole
    char *buf = xmalloc(PIECE);
    size_t n;
    while ((n = fread(buf, 1, PIECE, in)) > 0)
        aout_write(&o, buf, n);
    int err = ferror(in);
    fclose(in);
    free(buf);
    if (err) {
        aout_abort(&o);
        return loom_fail("%s: read error", s);
    }
    return aout_commit(&o);
}

int copy_tree(const char *src, const char *dst) {
    if (mkdir(dst, 0755) && errno != EEXIST)
        return loom_fail("%s: cannot create: %s", dst, strerror(errno));
    DIR *d = opendir(src);
    if (!d) return loom_fail("%s: cannot open: %s", src, strerror(errno));
    struct dirent *e;
    int rc = 0;
    char s[4200], t[4200];
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (path_fmt(s, sizeof s, "%s/%s", src, e->d_name) ||
            path_fmt(t, sizeof t, "%s/%s", dst, e->d_name))
            rc = -1;
        else
            rc = copy_entry(s, t);
    }
    closedir(d);
    return rc;
}
