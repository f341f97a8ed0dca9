// net.h — the swarm's transport: ZeroMQ (libzmq) with CURVE authentication and encryption.
// Every peer binds one ROUTER socket (its inbox, a CURVE server) at --listen and reaches each
// other peer through two DEALER sockets of its own (CURVE clients) connected to that peer's
// address, each its own TCP connection: bulk (the Δ pieces, sums and downloads, 8 queued) and
// control (everything else, 256 queued), so that gossip and commits neither wait behind nor
// are dropped for megabytes of pieces on a slow link. Messages are one-way posts, a reply goes
// back through the replier's own DEALERs.
//
// The swarm secret (--secret FILE, made by `loom keygen`) is one CURVE secret key shared by all
// peers; every peer serves with it and connects with it, and a ZAP handler on the inbox admits
// only clients that prove they hold it (their public key is the swarm's). Without the secret
// no handshake completes: nothing can be sent, read or injected.
//
// Used by one thread only (ZeroMQ sockets are not thread-safe). Sends never block: a full
// queue (a slow or dead peer) returns NET_BUSY and the caller retries later.
#pragma once
#include <stddef.h>

#define NET_KEY_LEN 40 // Z85 text of a 32-byte CURVE key

typedef struct Net Net;

typedef struct {
    long denied;           // handshakes the ZAP handler refused (a wrong secret)
    long oversized;        // messages dropped for exceeding the receive cap
    long handshake_failed; // our outgoing handshakes that failed (a peer with another secret)
    long lost;             // bulk connections that closed after being up (what was queued on
                           // one is gone: a dead peer, a reset, a heartbeat that timed out)
} NetStats;

enum { NET_OK = 0, NET_BUSY = 1, NET_ERR = -1 };

// Reads the swarm secret from path: one line holding a 40-character Z85 CURVE secret key
// (surrounding whitespace ignored). Returns 0 or -1 with loom_errmsg naming the file and what is
// wrong (missing, unreadable, not 40 Z85 characters, world-readable is only a warning).
int net_secret_read(const char *path, char secret[NET_KEY_LEN + 1]);
// Writes a new random secret to path (mode 0600); refuses to overwrite an existing file.
int net_keygen(const char *path);
// Opens the transport and binds the inbox at listen ("HOST:PORT"; port 0 picks a free port:
// net_bound_addr then tells which). max_msg bounds an incoming message (larger: dropped and
// counted; over 2 * max_msg libzmq drops the sender's connection instead, uncounted).
// Returns NULL with loom_errmsg (address in use, bad address, no CURVE in libzmq).
Net *net_open(const char *listen, const char secret[NET_KEY_LEN + 1], size_t max_msg);
// "HOST:PORT" actually bound (the port resolved when 0 was asked for).
const char *net_bound_addr(const Net *n);
// A DEALER to addr ("HOST:PORT") under the name key (a peer id, or any label such as
// "boot:HOST:PORT"); a second call with the same key and address does nothing, with another
// address it reconnects. Returns 0 or -1 (loom_errmsg).
int net_connect(Net *n, const char *key, const char *addr);
// Closes the DEALER named key (pending messages are dropped). No-op for an unknown key.
void net_disconnect(Net *n, const char *key);
// 1 if a DEALER named key exists.
int net_has(const Net *n, const char *key);
// Queues one message to key on its control (control != 0) or bulk connection without blocking:
// NET_OK, NET_BUSY (that queue is full or its connection not complete yet: try later), NET_ERR
// (unknown key).
int net_send(Net *n, const char *key, const void *buf, size_t len, int control);
// 1 if a bulk message to key would be queued now (net_send would not say NET_BUSY): ask before
// encoding a large one.
int net_writable(const Net *n, const char *key);
// Waits up to timeout_ms for an incoming message (also serves the ZAP handler and counts
// handshake failures meanwhile). Returns 1 if one is ready, 0 on timeout or net_wake.
int net_wait(Net *n, int timeout_ms);
// From any thread: the net_wait in progress (or the next one) returns at once, so the thread
// that owns n looks at work another thread just gave it without polling for it.
void net_wake(Net *n);
// Takes one incoming message without blocking: 1 and *buf, *len (valid until the next
// net_recv), or 0 if none. Oversized ones are dropped and counted, never returned.
int net_recv(Net *n, const void **buf, size_t *len);
NetStats net_stats(const Net *n);
// When the bulk connection to key closed, if it has not come back and a reconnect attempt has
// failed since (nothing accepts at that address: the peer's process is gone); else 0. Events
// are read in net_wait.
double net_dead_since(const Net *n, const char *key);
// How many times the bulk connection to key closed after being up (0 for an unknown key).
long net_lost(const Net *n, const char *key);
// Closes every socket without lingering (queued messages are dropped).
void net_close(Net *n);
