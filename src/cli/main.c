// main.c — the `loom` command: dispatches to a subcommand.
#include <stdio.h>
#include <string.h>

#include "../common.h"
#include "commands.h"

static void usage(FILE *f) {
    fputs("usage: loom <command> [options]\n"
          "\n"
          "commands:\n"
          "  train     train a GPT model (loom train --help)\n"
          "  prepare   turn text files into token shards (loom prepare --help)\n"
          "  sample    generate text from a checkpoint (loom sample --help)\n"
          "  export    write a checkpoint as Hugging Face safetensors (loom export --help)\n"
          "  plot      draw the loss curve of a metrics file (loom plot --help)\n"
          "  plan      profile the model and pick dp/pp/micro-batch/recompute (loom plan --help)\n"
          "  peer      train as one peer of a swarm over ZeroMQ (loom peer --help)\n"
          "  keygen    make a swarm secret for loom peer (loom keygen -o FILE)\n"
          "  version   the version, commit, build flags and libraries (also loom --version)\n",
          f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *c = argv[1];
    if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(c, "--version") || !strcmp(c, "version")) return cmd_version(argc - 1, argv + 1);
    if (!strcmp(c, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(c, "prepare")) return cmd_prepare(argc - 1, argv + 1);
    if (!strcmp(c, "sample")) return cmd_sample(argc - 1, argv + 1);
    if (!strcmp(c, "export")) return cmd_export(argc - 1, argv + 1);
    if (!strcmp(c, "plot")) return cmd_plot(argc - 1, argv + 1);
    if (!strcmp(c, "plan")) return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(c, "peer")) return cmd_peer(argc - 1, argv + 1);
    if (!strcmp(c, "keygen")) return cmd_keygen(argc - 1, argv + 1);
    fprintf(stderr, "loom: unknown command '%s'\n", c);
    usage(stderr);
    return EXIT_USAGE;
}
