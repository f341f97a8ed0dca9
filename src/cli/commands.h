// commands.h — the loom subcommands; each returns the process exit status.
#pragma once

int cmd_train(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_peer(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_version(int argc, char **argv);
