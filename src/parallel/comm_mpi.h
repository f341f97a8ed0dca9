// comm_mpi.h — what comm.c (start-up, the lock, point-to-point) and comm_jobs.c (collectives as
// a queue of jobs) share on the MPI side. Not for other files.
#pragma once
#include <mpi.h>
#include <stdatomic.h>

#include "comm_impl.h"

// comm.c
void comm_lock(void); // every MPI call holds it (MPI_THREAD_SERIALIZED)
void comm_unlock(void);
// An MPI return code: 0 when it succeeded, else the failure is reported (comm_op_failed).
int comm_check(int rc, const char *op, const Comm *c);
extern atomic_int comm_outstanding_ops; // tracked requests and queued jobs not collected

// comm_jobs.c (comm_jobs_advance holding the lock; comm_job_test and the collectives take it)
void comm_jobs_advance(void);                    // every queued job starts and retires pieces
int comm_job_test(CommReq *r, CommProgress *pr); // comm_test_progress of a job

static inline MPI_Comm comm_h(const Comm *c) { return *(MPI_Comm *)c->handle; }

// A request that is complete at once (one member, or nothing to move).
static inline CommReq comm_done_req(const Comm *c, const char *op) {
    return (CommReq){.handle = NULL, .op = op, .comm = c, .contributors = c ? c->size : 1};
}
