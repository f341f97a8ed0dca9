#!/bin/sh
# test_gpu_archs.sh NVCC: the GPU architectures `make test-gpu` builds for (Makefile), fewer than
# the every-architecture build of `make CUDA=1`: the oldest and the newest NVCC supports, which
# between them compile both sides of every __CUDA_ARCH__ test in the kernels, and the
# architecture of this machine's GPU where it has one (nvidia-smi), so the GPU tests run native
# code on it. Prints them space-separated, e.g. "75 90 121".
all=$("$1" --list-gpu-code 2>/dev/null | sed -n 's/^sm_//p' | sort -n)
[ -n "$all" ] || exit 0
native=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
keep=$(echo "$all" | head -1; echo "$all" | tail -1)
if [ -n "$native" ] && echo "$all" | grep -qx "$native"; then keep="$keep
$native"; fi
echo "$keep" | sort -nu | tr '\n' ' ' | sed 's/ $//'
echo
