// cmd_keygen.c — `loom keygen -o FILE`: a new swarm secret for loom peer (swarm/net.h). Every
// peer of a swarm is started with the same file; only holders of it can join, send or read.
#include <stdio.h>

#include "../common.h"
#include "../swarm/net.h"
#include "commands.h"
#include "options.h"

int cmd_keygen(int argc, char **argv) {
    char *out = NULL;
    const Option opts[] = {
        {"output|o", OPT_STR, &out, "where to write the secret (mode 0600; never overwritten)",
         NULL, 0, 0},
    };
    int rc = options_parse(opts, 1, argc, argv, "usage: loom keygen -o FILE", NULL, 0, NULL);
    if (rc == 1) return 0;
    if (!rc && !out) rc = loom_fail("-o FILE is required");
    if (!rc) rc = net_keygen(out);
    if (rc) {
        fprintf(stderr, "loom keygen: %s\n", loom_errmsg());
        return EXIT_USAGE;
    }
    fprintf(stderr, "loom: wrote a swarm secret to %s (give it to every peer, keep it private)\n",
            out);
    return 0;
}
