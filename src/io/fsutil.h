// fsutil.h — file-tree helpers: copying a directory (a checkpoint's tokenizer/).
#pragma once

// Copies the regular files and subdirectories of src into dst (created), skipping dot files.
// src itself may be a link to a directory; inside it, a symbolic link (or any entry that is
// neither a regular file nor a directory) is refused, not followed: -1 naming it. A path that
// does not fit is an error too. Returns 0 or -1 (loom_errmsg names the file).
int copy_tree(const char *src, const char *dst);
