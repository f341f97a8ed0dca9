// fsutil.c — file-tree helpers (see fsutil.h).
#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common.h"

int copy_tree(const char *src, const char *dst) {
    if (mkdir(dst, 0755) && errno != EEXIST) return loom_fail("%s: cannot create", dst);
    DIR *d = opendir(src);
    if (!d) return loom_fail("%s: cannot open: %s", src, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char s[4200], t[4200];
        snprintf(s, sizeof s, "%s/%s", src, e->d_name);
        snprintf(t, sizeof t, "%s/%s", dst, e->d_name);
        struct stat st;
        if (stat(s, &st)) continue;
        if (S_ISDIR(st.st_mode)) {
            rc = copy_tree(s, t);
            continue;
        }
        size_t len;
        char *buf = read_file(s, &len);
        if (!buf)
            rc = -1;
        else
            rc = write_file_atomic(t, buf, len);
        free(buf);
    }
    closedir(d);
    return rc;
}
