// net.c — the swarm's transport (net.h) over libzmq: one context per Net, a ROUTER inbox that
// is a CURVE server guarded by an in-process ZAP handler (RFC 27) admitting only the swarm's
// public key, and one CURVE-client DEALER per peer key with a socket monitor counting failed
// handshakes. Sends never block (ZMQ_DONTWAIT + ZMQ_IMMEDIATE: no connection yet = NET_BUSY).
// The ZAP handler and the monitors are served only from net_wait and net_recv, so a peer's
// handshake with us completes only while the owner thread waits or receives.
// Receive caps: ZMQ_MAXMSGSIZE = 2 * max_msg makes libzmq drop the connection of a sender of a
// larger message; messages in (max_msg, 2 * max_msg] arrive and are dropped and counted here.
#include "net.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "../common.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ADDR_MAX 256
#define NET_HEARTBEAT_MS 5000       // the control connections' heartbeats
#define NET_BULK_HEARTBEAT_MS 60000 // the bulk connections' and the inbox's (peer_open)

typedef struct {
    char *key, *addr;
    void *sock, *mon; // the bulk DEALER and the PAIR reading its monitor events
    void *ctl;        // the control DEALER: its own connection, never behind bulk pieces
    int connected;    // the bulk connection was up once
    int retries;      // reconnect attempts since it closed (lost_at > 0)
    double lost_at;   // when it closed and has not come back since (0: up)
    long lost;        // times it closed after being up
} Peer;

struct Net {
    void *ctx, *inbox, *zap;
    char secret[NET_KEY_LEN + 1], pub[NET_KEY_LEN + 1];
    uint8_t pub_bin[32];
    size_t max_msg;
    char bound[ADDR_MAX + 8];
    Peer *peers;
    int npeers, cap;
    zmq_pollitem_t *items;
    zmq_msg_t last; // the payload net_recv returned last (kept alive until the next call)
    int have_last;
    unsigned mon_seq;
    int wake_fd; // an eventfd net_wake writes and net_wait polls (-1: none)
    NetStats st;
};

static const char z85_chars[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                ".-:+=^!/*?&<>()[]{}@%$#";

// ---- the secret file ----

int net_secret_read(const char *path, char secret[NET_KEY_LEN + 1]) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); // a FIFO must not block
    if (fd < 0) return loom_fail("--secret %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return loom_fail("--secret %s: not a regular file", path);
    }
    if (st.st_size > 4096) {
        close(fd);
        return loom_fail("--secret %s: too large (%lld bytes) for a secret key", path,
                         (long long)st.st_size);
    }
    char buf[4097];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int err = errno;
    close(fd);
    if (n < 0) return loom_fail("--secret %s: cannot read: %s", path, strerror(err));
    if (st.st_mode & 077)
        fprintf(stderr, "loom: warning: %s is readable by others; chmod 600 it\n", path);
    size_t b = 0, e = (size_t)n;
    while (b < e && buf[b] && strchr(" \t\r\n\v\f", buf[b]))
        b++;
    while (e > b && buf[e - 1] && strchr(" \t\r\n\v\f", buf[e - 1]))
        e--;
    int ok = e - b == NET_KEY_LEN;
    for (size_t i = b; ok && i < e; i++)
        ok = buf[i] && strchr(z85_chars, buf[i]) != NULL;
    uint8_t bin[32];
    if (ok) {
        memcpy(secret, buf + b, NET_KEY_LEN);
        secret[NET_KEY_LEN] = 0;
        ok = zmq_z85_decode(bin, secret) != NULL;
    }
    explicit_bzero(buf, sizeof buf);
    explicit_bzero(bin, sizeof bin);
    if (!ok) {
        explicit_bzero(secret, NET_KEY_LEN + 1);
        return loom_fail("--secret %s: not a swarm secret (want one line of %d Z85 characters, "
                         "as `loom keygen` writes)",
                         path, NET_KEY_LEN);
    }
    return 0;
}

int net_keygen(const char *path) {
    char pub[NET_KEY_LEN + 1], sec[NET_KEY_LEN + 2];
    if (zmq_curve_keypair(pub, sec) != 0)
        return loom_fail("keygen: libzmq cannot make CURVE keys: %s", zmq_strerror(errno));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        explicit_bzero(sec, sizeof sec);
        if (errno == EEXIST) return loom_fail("%s exists; not overwriting the swarm secret", path);
        return loom_fail("%s: cannot create: %s", path, strerror(errno));
    }
    sec[NET_KEY_LEN] = '\n';
    int ok = write(fd, sec, NET_KEY_LEN + 1) == NET_KEY_LEN + 1 && fsync(fd) == 0;
    int err = errno;
    explicit_bzero(sec, sizeof sec);
    if (close(fd) != 0 && ok) ok = 0, err = errno;
    if (!ok) {
        unlink(path);
        return loom_fail("%s: cannot write: %s", path, strerror(err));
    }
    return 0;
}

// ---- sockets ----

static int set_int(void *s, int opt, int v) { return zmq_setsockopt(s, opt, &v, sizeof v); }

// The options inbox and DEALERs share: no lingering, a receive cap, heartbeats (a PING every
// second; the connection closes when nothing at all came back for timeout_ms after one).
static int common_opts(Net *n, void *s, int ipv6, int timeout_ms) {
    int64_t cap = (int64_t)(2 * n->max_msg);
    return set_int(s, ZMQ_LINGER, 0) | zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &cap, sizeof cap) |
           set_int(s, ZMQ_HEARTBEAT_IVL, 1000) | set_int(s, ZMQ_HEARTBEAT_TIMEOUT, timeout_ms) |
           set_int(s, ZMQ_IPV6, ipv6);
}

static void close_sock(void **s) {
    if (*s) zmq_close(*s);
    *s = NULL;
}

// Splits "HOST:PORT" at the last ':' into host and port; -1 if malformed.
static int split_addr(const char *addr, char host[ADDR_MAX], long *port) {
    const char *c = strrchr(addr, ':');
    if (!c || c == addr || (size_t)(c - addr) >= ADDR_MAX || !c[1]) return -1;
    char *end;
    errno = 0;
    *port = strtol(c + 1, &end, 10);
    if (*end || errno || *port < 0 || *port > 65535 || c[1] < '0' || c[1] > '9') return -1;
    memcpy(host, addr, (size_t)(c - addr));
    host[c - addr] = 0;
    return 0;
}

static int open_inbox(Net *n, const char *listen) {
    char host[ADDR_MAX], ep[ADDR_MAX + 16];
    long port;
    if (split_addr(listen, host, &port) != 0)
        return loom_fail("--listen %s: not HOST:PORT", listen);
    n->zap = zmq_socket(n->ctx, ZMQ_REP);
    if (!n->zap || set_int(n->zap, ZMQ_LINGER, 0) || zmq_bind(n->zap, ZAP_ENDPOINT))
        return loom_fail("cannot start the ZAP handler: %s", zmq_strerror(errno));
    n->inbox = zmq_socket(n->ctx, ZMQ_ROUTER);
    if (!n->inbox || common_opts(n, n->inbox, host[0] == '[', NET_BULK_HEARTBEAT_MS) ||
        set_int(n->inbox, ZMQ_CURVE_SERVER, 1) ||
        zmq_setsockopt(n->inbox, ZMQ_CURVE_SECRETKEY, n->secret, NET_KEY_LEN) ||
        zmq_setsockopt(n->inbox, ZMQ_ZAP_DOMAIN, "loom", 4) || set_int(n->inbox, ZMQ_RCVHWM, 64))
        return loom_fail("cannot set up the inbox: %s", zmq_strerror(errno));
    if (port)
        snprintf(ep, sizeof ep, "tcp://%s:%ld", host, port);
    else
        snprintf(ep, sizeof ep, "tcp://%s:*", host);
    if (zmq_bind(n->inbox, ep) != 0)
        return loom_fail("--listen %s: cannot bind: %s", listen, zmq_strerror(errno));
    char last[ADDR_MAX + 16];
    size_t sz = sizeof last;
    if (zmq_getsockopt(n->inbox, ZMQ_LAST_ENDPOINT, last, &sz) == 0 && strrchr(last, ':'))
        port = strtol(strrchr(last, ':') + 1, NULL, 10);
    snprintf(n->bound, sizeof n->bound, "%s:%ld", host, port);
    return 0;
}

Net *net_open(const char *listen, const char secret[NET_KEY_LEN + 1], size_t max_msg) {
    if (!zmq_has("curve")) {
        loom_fail("this libzmq has no CURVE security (build it with libsodium)");
        return NULL;
    }
    Net *n = xcalloc(1, sizeof *n);
    n->max_msg = max_msg;
    n->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (n->wake_fd < 0) {
        loom_fail("cannot create an eventfd for the swarm's network thread: %s", strerror(errno));
        net_close(n);
        return NULL;
    }
    memcpy(n->secret, secret, NET_KEY_LEN);
    if (zmq_curve_public(n->pub, n->secret) != 0 || !zmq_z85_decode(n->pub_bin, n->pub)) {
        loom_fail("the swarm secret is not a CURVE secret key");
        net_close(n);
        return NULL;
    }
    n->ctx = zmq_ctx_new();
    if (!n->ctx) {
        loom_fail("cannot create a ZeroMQ context: %s", zmq_strerror(errno));
        net_close(n);
        return NULL;
    }
    if (open_inbox(n, listen) != 0) {
        net_close(n);
        return NULL;
    }
    return n;
}

const char *net_bound_addr(const Net *n) { return n->bound; }

static Peer *find(const Net *n, const char *key) {
    for (int i = 0; i < n->npeers; i++)
        if (!strcmp(n->peers[i].key, key)) return &n->peers[i];
    return NULL;
}

int net_has(const Net *n, const char *key) { return find(n, key) != NULL; }

static void peer_free(Peer *p) {
    if (p->sock) zmq_socket_monitor(p->sock, NULL, 0);
    close_sock(&p->mon);
    close_sock(&p->sock);
    close_sock(&p->ctl);
    free(p->key);
    free(p->addr);
}

// A CURVE-client DEALER to addr queueing at most hwm messages (a completed connection only),
// its heartbeats timing out after timeout_ms.
static void *dealer(Net *n, const char *addr, int hwm, int timeout_ms) {
    void *s = zmq_socket(n->ctx, ZMQ_DEALER);
    if (s && !(common_opts(n, s, addr[0] == '[', timeout_ms) ||
               zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, n->pub, NET_KEY_LEN) ||
               zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, n->pub, NET_KEY_LEN) ||
               zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, n->secret, NET_KEY_LEN) ||
               set_int(s, ZMQ_IMMEDIATE, 1) || set_int(s, ZMQ_SNDHWM, hwm) ||
               set_int(s, ZMQ_RECONNECT_IVL, 100) || set_int(s, ZMQ_RECONNECT_IVL_MAX, 2000)))
        return s;
    if (s) zmq_close(s);
    return NULL;
}

// Two CURVE-client DEALERs connected to addr: bulk (8 messages queued: pieces of up to 1 MiB)
// and control (256: small messages that must not wait behind the pieces, nor be dropped
// because the pieces filled the queue), and a monitor PAIR for the bulk one's failed handshakes.
// The bulk one's heartbeats, and the inbox's (which ping the far ends of those connections),
// time out only after NET_BULK_HEARTBEAT_MS: a PING waits behind every byte queued before it in
// the kernel (megabytes: seconds on a slow link shared by many connections), and a connection
// whose sender TCP backs off after drops hears nothing for seconds; a connection closed by a
// timed-out heartbeat loses every piece queued on it (at 10 Mbit/s among 8 peers, 5 s timeouts
// closed the busiest peers' bulk connections 49–82 times in a 7-minute run; with 60 s at the
// sender only, 35–47: the receiving inbox closed them). A killed peer's connections close at
// once (a reset); a silent one is --peer-timeout's.
static int peer_open(Net *n, Peer *p, const char *addr) {
    char ep[ADDR_MAX + 16], mon[64];
    if (strlen(addr) >= ADDR_MAX || !strrchr(addr, ':'))
        return loom_fail("peer address %.200s: not HOST:PORT", addr);
    snprintf(ep, sizeof ep, "tcp://%s", addr);
    if (!(p->sock = dealer(n, addr, 8, NET_BULK_HEARTBEAT_MS)) ||
        !(p->ctl = dealer(n, addr, 256, NET_HEARTBEAT_MS)))
        return loom_fail("cannot set up a socket to %s: %s", addr, zmq_strerror(errno));
    snprintf(mon, sizeof mon, "inproc://loom-net-mon-%u", n->mon_seq++);
    int ev = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED |
             ZMQ_EVENT_CONNECT_RETRIED;
    if (zmq_socket_monitor(p->sock, mon, ev) != 0 || !(p->mon = zmq_socket(n->ctx, ZMQ_PAIR)) ||
        set_int(p->mon, ZMQ_LINGER, 0) || zmq_connect(p->mon, mon) != 0)
        return loom_fail("cannot monitor the socket to %s: %s", addr, zmq_strerror(errno));
    if (zmq_connect(p->sock, ep) != 0 || zmq_connect(p->ctl, ep) != 0)
        return loom_fail("cannot connect to %s: %s", addr, zmq_strerror(errno));
    return 0;
}

int net_connect(Net *n, const char *key, const char *addr) {
    Peer *old = find(n, key);
    if (old && !strcmp(old->addr, addr)) return 0;
    if (old) net_disconnect(n, key);
    Peer p = {0};
    p.key = xmalloc(strlen(key) + 1);
    strcpy(p.key, key);
    p.addr = xmalloc(strlen(addr) + 1);
    strcpy(p.addr, addr);
    if (peer_open(n, &p, addr) != 0) {
        peer_free(&p);
        return -1;
    }
    if (n->npeers == n->cap) {
        n->cap = n->cap ? 2 * n->cap : 8;
        Peer *np = xmalloc((size_t)n->cap * sizeof *np);
        if (n->npeers) memcpy(np, n->peers, (size_t)n->npeers * sizeof *np);
        free(n->peers);
        n->peers = np;
        free(n->items);
        n->items = xmalloc((size_t)(n->cap + 3) * sizeof *n->items);
    }
    n->peers[n->npeers++] = p;
    return 0;
}

void net_disconnect(Net *n, const char *key) {
    Peer *p = find(n, key);
    if (!p) return;
    peer_free(p);
    *p = n->peers[--n->npeers];
}

int net_send(Net *n, const char *key, const void *buf, size_t len, int control) {
    Peer *p = find(n, key);
    if (!p) return loom_fail("send to unknown peer %.200s", key), NET_ERR;
    if (zmq_send(control ? p->ctl : p->sock, buf, len, ZMQ_DONTWAIT) >= 0) return NET_OK;
    if (errno == EAGAIN) return NET_BUSY;
    return loom_fail("send to %s (%s): %s", key, p->addr, zmq_strerror(errno)), NET_ERR;
}

int net_writable(const Net *n, const char *key) {
    Peer *p = find(n, key);
    int ev = 0;
    size_t len = sizeof ev;
    return p && zmq_getsockopt(p->sock, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLOUT);
}

// ---- the ZAP handler and the monitors ----

// Answers one ZAP request (RFC 27): frames version, request id, domain, address, identity,
// mechanism, credentials. Admits CURVE clients whose public key is the swarm's. 0 if none.
static int zap_serve_one(Net *n) {
    zmq_msg_t f[8], extra;
    int nf = 0, more = 1;
    while (more) {
        zmq_msg_t *m = nf < 8 ? &f[nf] : &extra;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, n->zap, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(m);
            if (nf == 0) return 0;
            break;
        }
        more = zmq_msg_more(m);
        if (nf < 8)
            nf++;
        else
            zmq_msg_close(m);
    }
    int ok = nf == 7 && zmq_msg_size(&f[0]) == 3 && !memcmp(zmq_msg_data(&f[0]), "1.0", 3) &&
             zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) &&
             zmq_msg_size(&f[6]) == 32 && !memcmp(zmq_msg_data(&f[6]), n->pub_bin, 32);
    if (!ok) n->st.denied++;
    const char *status = ok ? "200" : "400", *text = ok ? "OK" : "not a swarm member";
    zmq_send(n->zap, "1.0", 3, ZMQ_SNDMORE);
    if (nf >= 2)
        zmq_send(n->zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
    else
        zmq_send(n->zap, "", 0, ZMQ_SNDMORE);
    zmq_send(n->zap, status, 3, ZMQ_SNDMORE);
    zmq_send(n->zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(n->zap, "", 0, ZMQ_SNDMORE); // user id
    zmq_send(n->zap, "", 0, 0);           // metadata
    for (int i = 0; i < nf; i++)
        zmq_msg_close(&f[i]);
    return 1;
}

static void zap_serve(Net *n) {
    while (zap_serve_one(n)) {
    }
}

// The events waiting on a peer's monitor PAIR (frames: 6 bytes of event id u16 + value u32,
// then the endpoint): failed handshakes are counted; the bulk connection's state is tracked
// (up; closed, then each reconnect attempt scheduled, for net_dead_since).
static void mon_drain(Net *n, Peer *p) {
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, p->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return;
        }
        uint16_t ev = 0;
        if (zmq_msg_size(&m) == 6) memcpy(&ev, zmq_msg_data(&m), 2);
        if (ev & (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                  ZMQ_EVENT_HANDSHAKE_FAILED_AUTH))
            n->st.handshake_failed++;
        if (ev == ZMQ_EVENT_CONNECTED) p->connected = 1, p->lost_at = 0, p->retries = 0;
        if (ev == ZMQ_EVENT_DISCONNECTED && p->connected && !p->lost_at)
            p->lost_at = now_sec(), p->retries = 0, p->lost++, n->st.lost++;
        if (ev == ZMQ_EVENT_CONNECT_RETRIED && p->lost_at) p->retries++;
        while (zmq_msg_more(&m) && zmq_msg_recv(&m, p->mon, ZMQ_DONTWAIT) >= 0) {
        }
        zmq_msg_close(&m);
    }
}

long net_lost(const Net *n, const char *key) {
    const Peer *p = find(n, key);
    return p ? p->lost : 0;
}

double net_dead_since(const Net *n, const char *key) {
    const Peer *p = find(n, key);
    // (the first retry is scheduled as the connection closes; a second one means a connect
    // attempt failed: nothing accepts at that address any more)
    return p && p->lost_at > 0 && p->retries >= 2 ? p->lost_at : 0;
}

int net_wait(Net *n, int timeout_ms) {
    double deadline = now_sec() + timeout_ms / 1000.0;
    zmq_pollitem_t fixed[3], *it = n->items ? n->items : fixed;
    for (;;) {
        it[0] = (zmq_pollitem_t){.socket = n->inbox, .events = ZMQ_POLLIN};
        it[1] = (zmq_pollitem_t){.socket = n->zap, .events = ZMQ_POLLIN};
        for (int i = 0; i < n->npeers; i++)
            it[2 + i] = (zmq_pollitem_t){.socket = n->peers[i].mon, .events = ZMQ_POLLIN};
        it[2 + n->npeers] = (zmq_pollitem_t){.fd = n->wake_fd, .events = ZMQ_POLLIN};
        double left = deadline - now_sec();
        long ms = left > 0 ? (long)(left * 1000.0 + 0.999) : 0;
        int rc = zmq_poll(it, 3 + n->npeers, ms);
        if (rc < 0 && errno != EINTR) return 0;
        if (rc > 0) {
            if (it[1].revents & ZMQ_POLLIN) zap_serve(n);
            for (int i = 0; i < n->npeers; i++)
                if (it[2 + i].revents & ZMQ_POLLIN) mon_drain(n, &n->peers[i]);
            if (it[0].revents & ZMQ_POLLIN) return 1;
            if (it[2 + n->npeers].revents & ZMQ_POLLIN) { // woken: the caller looks at its work
                uint64_t v;
                ssize_t got = read(n->wake_fd, &v, sizeof v); // (resets the count)
                (void)got;
                return 0;
            }
        }
        if (now_sec() >= deadline) return 0;
    }
}

int net_recv(Net *n, const void **buf, size_t *len) {
    zap_serve(n);
    if (n->have_last) zmq_msg_close(&n->last);
    n->have_last = 0;
    for (;;) {
        zmq_msg_t id, m;
        zmq_msg_init(&id);
        if (zmq_msg_recv(&id, n->inbox, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&id);
            return 0;
        }
        int more = zmq_msg_more(&id), frames = 1;
        zmq_msg_close(&id);
        zmq_msg_init(&m);
        while (more && zmq_msg_recv(&m, n->inbox, 0) >= 0) {
            more = zmq_msg_more(&m);
            if (++frames == 2 && !more) break;
        }
        if (frames == 2 && !more) {
            if (zmq_msg_size(&m) <= n->max_msg) {
                zmq_msg_init(&n->last);
                zmq_msg_move(&n->last, &m);
                zmq_msg_close(&m);
                n->have_last = 1;
                *buf = zmq_msg_data(&n->last), *len = zmq_msg_size(&n->last);
                return 1;
            }
            n->st.oversized++;
        }
        zmq_msg_close(&m); // oversized, or not [routing id][payload]: dropped
    }
}

NetStats net_stats(const Net *n) { return n->st; }

void net_wake(Net *n) {
    uint64_t one = 1;
    ssize_t put = write(n->wake_fd, &one, sizeof one); // (it cannot fill: read resets it)
    (void)put;
}

void net_close(Net *n) {
    if (!n) return;
    if (n->have_last) zmq_msg_close(&n->last);
    while (n->npeers)
        net_disconnect(n, n->peers[0].key);
    close_sock(&n->inbox);
    close_sock(&n->zap);
    if (n->ctx) zmq_ctx_term(n->ctx);
    if (n->wake_fd >= 0) close(n->wake_fd);
    explicit_bzero(n->secret, sizeof n->secret);
    free(n->peers);
    free(n->items);
    free(n);
}
