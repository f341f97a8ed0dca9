// options.c — flag and config-file parsing for the subcommands (see options.h).
#include "options.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"

#define MAX_OPTS 128
static unsigned char was_set[MAX_OPTS];
// OPT_STR values this parse allocated, so a key given twice (or a flag overriding the config
// file) frees the value it replaces
static char *owned[MAX_OPTS];

// a: a table name (its "|x" letter ignored); b: as given. '-' and '_' are interchangeable.
static int same_name(const char *a, const char *b) {
    for (; *a && *a != '|' && *b; a++, b++) {
        char x = *a == '_' ? '-' : *a, y = *b == '_' ? '-' : *b;
        if (x != y) return 0;
    }
    return (!*a || *a == '|') && !*b;
}

// An option's long name for messages (without its "|x" letter).
#define LONG_NAME(o) (int)strcspn((o)->name, "|"), (o)->name

// The one-letter form of an option named "name|x" ("" when it has none).
static const char *letter_of(const Option *o) {
    const char *bar = strchr(o->name, '|');
    return bar ? bar + 1 : "";
}

static const Option *find(const Option *opts, int n, const char *name, int *idx) {
    for (int i = 0; i < n; i++)
        if (same_name(opts[i].name, name) || !strcmp(letter_of(&opts[i]), name)) {
            *idx = i;
            return &opts[i];
        }
    return NULL;
}

static int in_choices(const char *choices, const char *v) {
    size_t len = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && !strncmp(p, v, n)) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

static int range_ok(const Option *o, double v, const char *where) {
    if (o->min == o->max) return 0;
    if (v < o->min || v > o->max)
        return loom_fail("%s--%.*s: %.15g is out of range [%.15g, %.15g]", where, LONG_NAME(o), v,
                         o->min, o->max);
    return 0;
}

// Sets option o (number idx in its table) from text; `where` prefixes messages ("" or "FILE: ").
static int set_value(const Option *o, int idx, const char *v, const char *where) {
    char *end;
    switch (o->type) {
    case OPT_INT: {
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < -2147483647L || x > 2147483647L)
            return loom_fail("%s--%.*s: '%s' is not an integer", where, LONG_NAME(o), v);
        if (range_ok(o, (double)x, where)) return -1;
        *(int *)o->ptr = (int)x;
        return 0;
    }
    case OPT_FLOAT: {
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x))
            return loom_fail("%s--%.*s: '%s' is not a finite number", where, LONG_NAME(o), v);
        if (range_ok(o, x, where)) return -1;
        *(float *)o->ptr = (float)x;
        return 0;
    }
    case OPT_STR:
        if (o->choices && !in_choices(o->choices, v))
            return loom_fail("%s--%.*s: '%s' is not one of %s", where, LONG_NAME(o), v, o->choices);
        {
            size_t n = strlen(v) + 1;
            char *dup = memcpy(xmalloc(n), v, n);
            char **dst = o->ptr;
            if (idx < MAX_OPTS && owned[idx] && *dst == owned[idx]) free(owned[idx]);
            *dst = dup;
            if (idx < MAX_OPTS) owned[idx] = dup;
            return 0;
        }
    case OPT_ONOFF:
        if (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "1"))
            *(int *)o->ptr = 1;
        else if (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "0"))
            *(int *)o->ptr = 0;
        else
            return loom_fail("%s--%.*s: '%s' must be on or off", where, LONG_NAME(o), v);
        return 0;
    case OPT_FLAG: *(int *)o->ptr = 1; return 0;
    }
    return 0;
}

void options_help(const Option *opts, int n, const char *usage) {
    printf("%s\n\noptions (default in brackets):\n", usage);
    for (int i = 0; i < n; i++) {
        const Option *o = &opts[i];
        char def[96] = "";
        switch (o->type) {
        case OPT_INT: snprintf(def, sizeof def, "%d", *(int *)o->ptr); break;
        case OPT_FLOAT: snprintf(def, sizeof def, "%g", *(float *)o->ptr); break;
        case OPT_STR: {
            const char *s = *(char **)o->ptr;
            snprintf(def, sizeof def, "%s", s ? s : "none");
            break;
        }
        case OPT_ONOFF: snprintf(def, sizeof def, "%s", *(int *)o->ptr ? "on" : "off"); break;
        case OPT_FLAG: snprintf(def, sizeof def, "off"); break;
        }
        const char *arg = o->type == OPT_INT     ? " N"
                          : o->type == OPT_FLOAT ? " X"
                          : o->type == OPT_ONOFF ? " on|off"
                          : o->type == OPT_FLAG  ? ""
                          : o->choices           ? " CHOICE"
                                                 : " VALUE";
        char left[64];
        const char *letter = letter_of(o);
        int len = (int)(strcspn(o->name, "|"));
        if (*letter)
            snprintf(left, sizeof left, "-%s, --%.*s%s", letter, len, o->name, arg);
        else
            snprintf(left, sizeof left, "--%s%s", o->name, arg);
        printf("  %-26s %s", left, o->help);
        if (o->choices) printf(" (%s)", o->choices);
        printf(" [%s]\n", def);
    }
    printf("  %-26s %s\n", "--config FILE", "read any of these options from a JSON file");
    printf("  %-26s %s\n", "--help", "show this help");
}

int options_load_json(const Option *opts, int n, const char *path) {
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return loom_fail("%s: not a JSON object (config files are JSON: {\"lr\": 3e-4, ...})",
                         path);
    }
    char where[600];
    snprintf(where, sizeof where, "%s: ", path);
    int rc = 0;
    for (cJSON *it = root->child; it && !rc; it = it->next) {
        int idx;
        const Option *o = find(opts, n, it->string, &idx);
        if (!o || !strcmp(it->string, "config")) {
            rc = loom_fail("%s: unknown key '%s'", path, it->string);
            break;
        }
        char buf[64];
        const char *v = NULL;
        if (cJSON_IsString(it))
            v = it->valuestring;
        else if (cJSON_IsBool(it))
            v = cJSON_IsTrue(it) ? "on" : "off";
        else if (cJSON_IsNumber(it)) {
            double d = it->valuedouble; // range first: casting a huge double to long is UB
            if (o->type == OPT_INT &&
                (!(d >= -2147483647.0 && d <= 2147483647.0) || d != (double)(long)d)) {
                rc = loom_fail("%s: key '%s' must be an integer in [-2147483647, 2147483647] "
                               "(got %.17g)",
                               path, it->string, d);
                break;
            }
            if (o->type == OPT_INT)
                snprintf(buf, sizeof buf, "%ld", (long)it->valuedouble);
            else
                snprintf(buf, sizeof buf, "%.17g", it->valuedouble);
            v = buf;
        } else {
            rc = loom_fail("%s: key '%s' has an unsupported value type", path, it->string);
            break;
        }
        if (o->type == OPT_FLAG && cJSON_IsBool(it)) {
            *(int *)o->ptr = cJSON_IsTrue(it);
        } else if ((o->type == OPT_INT || o->type == OPT_FLOAT) && cJSON_IsString(it)) {
            rc = loom_fail("%s: key '%s' must be a number, not a string", path, it->string);
        } else {
            rc = set_value(o, idx, v, where);
        }
        if (!rc && idx < MAX_OPTS) was_set[idx] = 1;
    }
    cJSON_Delete(root);
    return rc;
}

int options_parse(const Option *opts, int n, int argc, char **argv, const char *usage,
                  char **positional, int max_pos, int *npos) {
    if (npos) *npos = 0;
    memset(was_set, 0, sizeof was_set);
    memset(owned, 0, sizeof owned);
    // config file first, so explicit flags override it
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            options_help(opts, n, usage);
            return 1;
        }
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) return loom_fail("--config needs a file name");
            if (options_load_json(opts, n, argv[i + 1])) return -1;
        }
    }
    int only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config") && !only_pos) {
            i++;
            continue;
        }
        if (!strcmp(a, "--") && !only_pos) {
            only_pos = 1;
            continue;
        }
        int letter = a[0] == '-' && a[1] && a[1] != '-' && !a[2]; // "-x"
        if (only_pos || (strncmp(a, "--", 2) != 0 && !letter)) {
            if (!positional || !npos || *npos >= max_pos)
                return loom_fail("unexpected argument '%s' (see --help)", a);
            positional[(*npos)++] = argv[i];
            continue;
        }
        char name[128];
        snprintf(name, sizeof name, "%s", a + (letter ? 1 : 2));
        char *eq = strchr(name, '=');
        const char *val = NULL;
        if (eq) {
            *eq = 0;
            val = a + 2 + (eq - name) + 1;
        }
        int idx;
        const Option *o = find(opts, n, name, &idx);
        if (!o) return loom_fail("unknown flag --%s (see --help)", name);
        if (o->type == OPT_FLAG) {
            if (val) return loom_fail("--%.*s takes no value", LONG_NAME(o));
            *(int *)o->ptr = 1;
        } else {
            if (!val) {
                if (i + 1 >= argc) return loom_fail("--%.*s needs a value", LONG_NAME(o));
                val = argv[++i];
            }
            if (set_value(o, idx, val, "")) return -1;
        }
        if (idx < MAX_OPTS) was_set[idx] = 1;
    }
    return 0;
}

int options_was_set(const Option *opts, int n, const char *name) {
    int idx;
    return find(opts, n, name, &idx) && idx < MAX_OPTS && was_set[idx];
}
