// options.h — one table-driven parser for command-line flags and config files, so every
// subcommand documents its flags (with defaults) in --help and rejects bad values the same way.
// A config file (JSON, parsed with cJSON) uses the same names as the flags, without "--"
// ("-" and "_" are interchangeable); flags given on the command line override the file.
#pragma once

typedef enum { OPT_INT, OPT_FLOAT, OPT_STR, OPT_ONOFF, OPT_FLAG } OptType;

typedef struct {
    const char *name; // without "--"
    OptType type;
    void *ptr; // int*, float*, char** (string), int* (on/off, flag); holds the default
    const char *help;
    const char *choices; // OPT_STR: "a|b|c" restricts the value; NULL = free text
    double min, max;     // OPT_INT / OPT_FLOAT: allowed range (min == max: unchecked)
} Option;

// Parses argv[1..] (argv[0] is the subcommand). Positional arguments are collected into
// positional[] (up to max_pos; NULL to reject any); after "--" every argument is positional.
// Flags are "--name VALUE", "--name=VALUE" or, for a table name "name|x", also "-x VALUE".
// Handles --help (-h) and --config FILE.
// Returns 0 to continue, 1 when help was printed, -1 on error (message via loom_errmsg).
int options_parse(const Option *opts, int n, int argc, char **argv, const char *usage,
                  char **positional, int max_pos, int *npos);
// Applies a JSON config object: keys are option names. Unknown keys and wrong types are errors.
int options_load_json(const Option *opts, int n, const char *path);
void options_help(const Option *opts, int n, const char *usage);
// 1 when the named option was set explicitly (command line or config file).
int options_was_set(const Option *opts, int n, const char *name);
