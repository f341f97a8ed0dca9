// spill.h — arrays that live in a file instead of host memory: an offloaded peer's outer state
// (anchor, outer momentum, Δ/average, error feedback) and the swarm's buffers (the Δs of a
// round, the averages kept, a donor's snapshot). Each array is an unlinked file in the
// directory given to spill_setup (--offload-dir), its blocks reserved up front (a full disk is
// a clear error, never a SIGBUS later) and mapped shared. The passes over such an array touch
// at most SPILL_CHUNK floats of it at a time and hand each chunk back with spill_drop: madvise
// MADV_DONTNEED, which for a shared file mapping keeps every byte (dirty pages go to the page
// cache and the file) and only takes the pages out of this process's resident set. So a
// pass's resident cost is a chunk per array it walks, whatever the model's size.
// Before spill_setup (an in-memory peer, the tests of the swarm) spill_alloc is host memory
// (from 1 MiB an anonymous mapping, whose zeroed pages the kernel supplies as they are first
// touched) and spill_drop does nothing: one code path serves both.
#pragma once
#include <stddef.h>

#define SPILL_CHUNK ((size_t)1 << 18) // floats a pass keeps resident per array (1 MiB)

// Arrays allocated from now on live in files under dir. 0, or -1 with loom_errmsg.
int spill_setup(const char *dir);
// 1 after spill_setup.
int spill_active(void);
// A zeroed array of `bytes`, 64-byte aligned: a file mapping after spill_setup, else host
// memory. Dies with a clear message when neither can be had (the disk full, out of memory).
void *spill_alloc(size_t bytes);
float *spill_floats(size_t n);
// Frees what spill_alloc returned, or anything malloc returned (NULL too).
void spill_free(void *p);
// [p, p + bytes) is not needed resident for now: the pages of it inside a spilled array leave
// the resident set (the data stays). Anything else: nothing happens. Thread-safe.
void spill_drop(const void *p, size_t bytes);
// The contents of the whole pages inside [p, p + bytes) are no longer needed: an anonymous
// mapping's go back to the kernel (they read as zeros when touched again), a spilled array's
// leave the resident set as with spill_drop. Anything else: nothing happens. Thread-safe.
void spill_discard(void *p, size_t bytes);
// dst[0, n) = src[0, n), a chunk at a time, both dropped behind it.
void spill_copy(float *dst, const float *src, size_t n);
