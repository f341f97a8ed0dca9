// testhooks.h — every test hook loom reads from the environment, in one place. They exist so
// the test suite can provoke faults and slow links that are hard to make otherwise; none is
// needed in normal use.
//   LOOM_FAULT_KILL=RANK:STEP  that world rank SIGKILLs itself when the step starts (a crash)
//   LOOM_FAULT_HANG=RANK:STEP  that rank stops responding (a stuck peer: the watchdog's case)
//   LOOM_FAULT_STOP=RANK:STEP  that rank stops itself with SIGSTOP (every thread stops)
//   LOOM_FAULT_MISMATCH=RANK:STEP  that rank enters a world barrier the others never enter
//                              (mismatched collectives: every rank alive, none progressing)
//   LOOM_FAULT_SIGNAL=RANK:STEP[:TERM|INT|USR1]  that world rank (RANK "all": every rank) sends
//                              itself the signal (default TERM) as the step starts: a stop
//                              request reaching one rank, or all of them
//   LOOM_FAULT_SAVE=1          a checkpoint save fails just before its commit
//   LOOM_FAULT_SAVE=step:N[,N...]  only the saves of those steps fail (there); later ones work
//   LOOM_FAULT_SAVE=rank:R:step:N  rank R of the save fails writing its files for step N
//                              (after its shard), the other ranks' writes succeed
//   LOOM_FAULT_SAVE_PAUSE=RANK:STEP  that rank stops inside its shard write of the step-STEP
//                              save, after the first array is written (a partial file on disk),
//                              and says so on stderr with its pid, for a test to SIGKILL it
//   LOOM_FAULT_SAVE_KILL=POINT the committing rank SIGKILLs itself at a named point of the
//                              commit: "replace" (an older directory of the same step has just
//                              been moved out of the way, `latest` not yet rewritten)
//   LOOM_SAVE_NO_EXCHANGE=1    re-saving a step takes the path for filesystems without
//                              renameat2(RENAME_EXCHANGE) (old directory renamed to .old first)
//   LOOM_SAVE_DELAY=S[@STEP]   rank 0 takes S more seconds to commit a checkpoint (a slow disk;
//                              with @STEP only the checkpoint of that step)
//   LOOM_SAVE_GATE=FILE        as each save begins, rank 0 writes its step into FILE and waits
//                              until FILE is gone (a test changes the disk between saves)
//   LOOM_COMM_DELAY=S          collectives of ≥ 4096 floats complete no earlier than S seconds
//                              after they start (an emulated slow link, for overlap tests); a
//                              collective moved in pieces has the delay spread over its pieces
//                              in proportion to their size (a slow link that keeps moving)
//   LOOM_COMM_CHUNK=ELEMS      the most elements one piece of a collective moves (default 2^20)
//   LOOM_TAG_UB=N              use N as MPI_TAG_UB when it is lower (tag wrap-around tests)
//   LOOM_PIPE_CHUNK=FLOATS     chunk size of 2bw's background all-reduces (default 2^18)
//   LOOM_PIPE_SWAP_SLOTS=N     a swapped pipeline stage (--pp with --offload) uses at most N
//                              block slots, whatever --fast-mem leaves (a tiny model's blocks
//                              then really go through the tier)
//   LOOM_FAULT_OVERFLOW=N[,N...]  the backward of those (1-based) steps starts from an infinite
//                              gradient (an overflow, for loss scaling's skip; one process,
//                              --dp and --zero)
//   LOOM_CPU_NO_BF16=1         the CPU backend sees neither AVX512-BF16 nor AMX-BF16 (the
//                              refusal of --dtype bf16 on a CPU without them, on any CPU)
//   LOOM_CPU_NO_AVX512=1       the CPU backend sees no AVX-512 (the fp32 engine's default is
//                              then OpenBLAS, as on a CPU without it)
//   LOOM_FAULT_DIVERGE=ROUND   loom peer: this peer's anchor is perturbed after that round end
//                              (a peer whose anchor differs from the swarm's: it must re-sync)
//   LOOM_FAULT_PEER_KILL=ROUND loom peer --peer-exchange sharded: this peer SIGKILLs itself
//                              right after it sent the first part of its Δ of that round
//                              (a member lost in the middle of the reduce-scatter)
//   LOOM_PEER_ONE_DONOR=1      loom peer: a joiner downloads the swarm's state from its one
//                              donor only, not from every peer holding it (the single-source
//                              download, a negative control for the parallel one)
//   LOOM_PEER_NO_SPILL=1       loom peer --offload: the outer state and the swarm's arrays stay
//                              in host memory instead of files under --offload-dir (the
//                              negative control of the peer's memory bound)
//   LOOM_SWAP_NO_READ_WAIT=1   the swap executor computes on a unit without waiting for its read
//                              (a missing wait: the negative control of t_offload_host.sh)
//   LOOM_COMM_NO_STAGE=1       comm hands device buffers to MPI as they are, without host
//                              stages (the negative control of the staged path: with --device
//                              emu the first collective on a device buffer faults)
//   LOOM_OFFLOAD_COSTS=fixed   --offload plans from fixed block and tier costs instead of
//                              measuring them at start-up (the bit-for-bit comparisons hold
//                              for any plan; saves the 2-4 s of profiling and probes a run)
#pragma once
#include <stddef.h>

// Kills, hangs or stops this rank if LOOM_FAULT_KILL / _HANG / _STOP name it and this step;
// returns 1 if LOOM_FAULT_MISMATCH does (the caller then enters a barrier nobody else does).
int testhook_fault(int rank, int step);
// LOOM_FAULT_SIGNAL: sends this process the signal when it names this rank and step.
void testhook_signal(int rank, int step);
// LOOM_FAULT_SAVE: whether the commit of the step-`step` save fails.
int testhook_save_fault(int step);
// LOOM_FAULT_SAVE=rank:R:step:N: whether that rank's file writes of that save fail.
int testhook_save_rank_fault(int rank, int step);
// LOOM_FAULT_SAVE_PAUSE: never returns when it names this rank and step.
void testhook_save_pause(int rank, int step);
// LOOM_FAULT_SAVE_KILL: SIGKILLs this process when it names `point`.
void testhook_save_kill(const char *point);
int testhook_save_no_exchange(void);
double testhook_save_delay(int step);
// LOOM_SAVE_GATE: writes `step` into the file and returns once the file has been removed.
void testhook_save_gate(int step);
double testhook_comm_delay(void);
size_t testhook_comm_chunk(void);
int testhook_tag_ub(void);
int testhook_comm_no_stage(void);
int testhook_swap_no_read_wait(void);
int testhook_offload_fixed_costs(void);
// LOOM_TIED_INTERLEAVED: the whole-model strategies accumulate the head's part of the tied
// embedding's gradient straight into the embedding's (the order before gpt.h head_dwte), so a
// test can show its comparison sees the order (negative control).
int testhook_tied_interleaved(void);
// LOOM_FAULT_OVERFLOW: whether the backward of 1-based step `step` starts from +inf.
int testhook_overflow(int step);
size_t testhook_pipe_chunk(void);
// LOOM_PIPE_SWAP_SLOTS: the most block slots of a swapped pipeline stage (0: no limit).
int testhook_pipe_swap_slots(void);
// LOOM_FAULT_DIVERGE: the round end after which a peer perturbs its anchor (0: never).
long testhook_peer_diverge(void);
// LOOM_FAULT_PEER_KILL: the round in whose reduce-scatter a peer kills itself (0: never).
long testhook_peer_kill_exchange(void);
// LOOM_PEER_ONE_DONOR: a joiner's state download uses its first donor only.
int testhook_peer_one_donor(void);
// LOOM_PEER_NO_SPILL: an offloaded peer keeps its outer state and the swarm's arrays in memory.
int testhook_peer_no_spill(void);
// LOOM_CPU_NO_BF16: the CPU backend's run-time check finds no bf16 instructions.
int testhook_cpu_no_bf16(void);
// LOOM_CPU_NO_AVX512: the CPU backend's run-time check finds no AVX-512 (the fp32 engine's
// default follows it).
int testhook_cpu_no_avx512(void);
