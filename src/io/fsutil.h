// fsutil.h — file-tree helpers: copying a directory (a checkpoint's tokenizer/).
#pragma once

// Copies the regular files and subdirectories of src into dst (created), skipping dot files.
// Returns 0 or -1 (loom_errmsg names the file).
int copy_tree(const char *src, const char *dst);
