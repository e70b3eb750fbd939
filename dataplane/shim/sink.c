/* The stream sink: see wsgw_sink.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shim_internal.h"
#include "wsgw_engine.h"
#include "wsgw_sink.h"
#include "wsgw_ws.h"

/* Records looked at per sendmsg: two iovecs each (the WebSocket head, the payload), within
 * IOV_MAX (1024). */
#define CHUNK 256
#define IOV_PER 2
#define WS_HEAD_MAX 10
#define NATS_LEN_MAX 16 /* "4294967295\r\n" */
/* A NATS slot's PUBs wait in its buffer until the writer's burst ends (wsgw_sink_burst_end),
 * at most this many bytes or this long (checked at each append), then go in one send. */
#define OUT_FLUSH_BYTES (64u << 10)
#define OUT_MAX_AGE_NS 1000000u

struct sink_sock {
    int fd; /* the sink's dup; -1: a free slot */
    uint32_t session_id;
    uint32_t ntopics; /* 0: every topic of the session */
    uint32_t *topics; /* sorted */
    int armed;
    uint32_t reason;
    uint64_t next_seq;
    int err;
    uint8_t *rest;
    uint32_t rest_len;
    uint64_t messages, bytes, disarms;
    int nats;         /* a NATS connection: every session, PUB records (wsgw_sink_add_nats) */
    char **pub;       /* by topic id: "PUB <subject>  " (NULL: not told yet) */
    uint16_t *pub_len;
    uint32_t npub;    /* entries of pub/pub_len */
    uint32_t busy_sends; /* NATS: more sends than this in a millisecond hand back (0: never) */
    uint32_t win_sends;
    uint64_t win_start_ns;
    uint8_t *out;     /* NATS: PUBs of whole records not sent yet (next_seq is past them) */
    uint32_t out_len, out_cap;
    uint64_t out_since_ns; /* when out was last empty */
    uint64_t out_ts_ns;    /* the ring stamp of out's first record (the lag samples) */
    uint64_t sends;   /* sendmsg calls that sent something */
    int wake_fd;      /* a dup of the follower's eventfd, written when the sink stops; -1 */
    int envelope;     /* a stream of JSON envelopes (wsgw_sink_add_envelope): pub holds, by
                       * topic id, the envelope's middle (wsgw_sink_envelope_topic) */
    uint8_t *env;     /* envelope: the chunk's frames, built before the send */
    uint32_t env_cap;
};

struct wsgw_sink {
    wsgw_ring_writer *w;
    uint32_t gap_tid;
    pthread_mutex_t mu; /* the table; taken by the writer's hook and by Python's calls */
    uint32_t armed;     /* sockets armed now (the hook's fast exit) */
    /* Stream (not NATS) sockets armed now, and how many may be (arms beyond: -EDQUOT);
     * written under mu, read without it by wsgw_sink_stream_room. */
    atomic_uint streams_armed;
    atomic_uint max_streams;
    uint32_t used;      /* slots in use, from 0 */
    uint64_t lag_n;     /* lag samples taken (wsgw_sink_lags) */
    uint32_t lag[WSGW_SINK_LAG_SAMPLES];
    struct sink_sock socks[WSGW_SINK_MAX_SOCKETS];
    struct wsgw_sink *next; /* the registry's list */
};

/* This process's sinks (one per hub), walked by the writers' hooks. */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static wsgw_sink *registry;
static atomic_uint registry_count;

/* This thread's burst (wsgw_sink_burst_begin/end nest): while open, NATS PUBs wait in their
 * slot's buffer; dirty: some did, so the end flushes. */
static __thread uint32_t burst_depth;
static __thread int burst_dirty;
/* This thread's writes carry what only Python puts in an envelope (wsgw_sink_envelope_hold). */
static __thread int envelope_hold;

/* The envelope's constant pieces (gateway.hub.events.Delivery.envelope, orjson's spelling):
 * ENV_HEAD seq <middle: ,"session":S,"topic":"T","recv_ts_ns":> ts ENV_PAYLOAD escaped ENV_TAIL */
static const char ENV_HEAD[] = "{\"type\":\"msg\",\"seq\":";
static const char ENV_PAYLOAD[] = ",\"payload\":\"";
static const char ENV_TAIL[] = "\"}";
#define ENV_HEAD_LEN (sizeof(ENV_HEAD) - 1)
#define ENV_PAYLOAD_LEN (sizeof(ENV_PAYLOAD) - 1)
#define ENV_TAIL_LEN (sizeof(ENV_TAIL) - 1)
#define U64_DIGITS_MAX 20


/* A send went out: how long after its oldest record's ring stamp (CLOCK_REALTIME). */
static void note_lag(wsgw_sink *s, uint64_t ts_ns)
{
    if (ts_ns == 0)
        return;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t now = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
    uint64_t d = now > ts_ns ? now - ts_ns : 0;
    s->lag[s->lag_n++ % WSGW_SINK_LAG_SAMPLES] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

/* RFC 6455 5.2: FIN, opcode, no mask, the shortest length form; its length. */
static uint32_t put_head(uint8_t *h, uint8_t opcode, uint64_t len)
{
    h[0] = 0x80 | opcode;
    if (len < 126) {
        h[1] = (uint8_t)len;
        return 2;
    }
    if (len < 65536) {
        h[1] = 126;
        h[2] = (uint8_t)(len >> 8);
        h[3] = (uint8_t)len;
        return 4;
    }
    h[1] = 127;
    for (int i = 0; i < 8; i++)
        h[2 + i] = (uint8_t)(len >> (56 - 8 * i));
    return 10;
}

/* A raw payload's frame head: text when it is UTF-8, else binary. */
static uint32_t frame_head(uint8_t *h, const uint8_t *payload, uint32_t len)
{
    return put_head(h, wsgw_utf8_valid(payload, len) ? 0x1 : 0x2, len);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int wants(const struct sink_sock *k, uint32_t session_id, uint32_t tid)
{
    if (k->session_id != session_id)
        return 0;
    if (k->ntopics == 0)
        return 1;
    return bsearch(&tid, k->topics, k->ntopics, sizeof tid, cmp_u32) != NULL;
}

/* The NATS buffer from byte `sent` on becomes the rest (Python writes it first): its records
 * are past next_seq already. No copy: the buffer itself moves. */
static void out_to_rest(struct sink_sock *k, size_t sent)
{
    if (k->out_len == 0)
        return;
    uint32_t left = k->out_len - (uint32_t)sent;
    if (sent)
        memmove(k->out, k->out + sent, left);
    k->rest = k->out;
    k->rest_len = left;
    k->out = NULL;
    k->out_len = k->out_cap = 0;
}

static void disarm(wsgw_sink *s, struct sink_sock *k, uint32_t reason, int err)
{
    out_to_rest(k, 0); /* never armed with a rest: disarmed, whatever is buffered is owed */
    if (k->armed) {
        k->armed = 0;
        s->armed--;
        if (!k->nats)
            atomic_fetch_sub_explicit(&s->streams_armed, 1, memory_order_relaxed);
        if (reason != WSGW_SINK_PYTHON) {
            k->disarms++;
            if (k->wake_fd >= 0) { /* the parked follower's loop: Python's turn */
                uint64_t one = 1;
                ssize_t rc = write(k->wake_fd, &one, sizeof one);
                (void)rc; /* EAGAIN: the counter is full, a wake-up is pending anyway */
            }
        }
    }
    k->reason = reason;
    k->err = err;
}

/* Keep the bytes of iov[0..n) from offset `in` on (the rest of a frame sent in part). */
static uint8_t *rest_of(const struct iovec *iov, uint32_t n, size_t in, uint32_t *len)
{
    size_t total = 0;
    for (uint32_t j = 0; j < n; j++)
        total += iov[j].iov_len;
    uint8_t *rest = malloc(total - in);
    if (rest == NULL)
        return NULL;
    size_t r = 0, skip = in;
    for (uint32_t j = 0; j < n; j++) {
        size_t l = iov[j].iov_len;
        if (skip >= l) {
            skip -= l;
            continue;
        }
        memcpy(rest + r, (const uint8_t *)iov[j].iov_base + skip, l - skip);
        r += l - skip;
        skip = 0;
    }
    *len = (uint32_t)r;
    return rest;
}

/* Send the frames iov[at[f]..at[f+1]) (f < frames; frame f is record first + idx[f]) to the
 * stream socket k in one sendmsg: 1 when all went whole (next_seq is the caller's), else 0
 * with k disarmed where it stopped (the rest of a frame sent in part kept). ts_ns: the first
 * record's ring stamp (the lag sample). */
static int send_frames(wsgw_sink *s, struct sink_sock *k, struct iovec *iov, uint32_t niov,
                       const uint32_t *idx, const uint32_t *at, uint32_t frames, size_t total,
                       uint64_t first, uint64_t ts_ns)
{
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = niov};
    ssize_t sent;
    do
        sent = sendmsg(k->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    if (sent < 0) {
        int err = errno;
        k->next_seq = first + idx[0];
        disarm(s, k, err == EAGAIN || err == EWOULDBLOCK ? WSGW_SINK_AGAIN : WSGW_SINK_ERROR,
               err);
        return 0;
    }
    k->bytes += (uint64_t)sent;
    k->sends++;
    note_lag(s, ts_ns);
    if ((size_t)sent < total) {
        /* Find the frame the send cut: those before it went whole. */
        size_t done = 0;
        uint32_t f = 0;
        for (; f < frames; f++) {
            size_t flen = 0;
            for (uint32_t j = at[f]; j < at[f + 1]; j++)
                flen += iov[j].iov_len;
            if (done + flen > (size_t)sent)
                break;
            done += flen;
        }
        k->messages += f;
        size_t in = (size_t)sent - done; /* bytes of frame f already out */
        uint32_t i = idx[f];
        k->next_seq = first + i;
        if (in == 0) {
            disarm(s, k, WSGW_SINK_AGAIN, EAGAIN);
            return 0;
        }
        uint32_t rest_len = 0;
        uint8_t *rest = rest_of(iov + at[f], at[f + 1] - at[f], in, &rest_len);
        if (rest == NULL) { /* cannot keep the rest: the stream is broken, say so */
            disarm(s, k, WSGW_SINK_ERROR, ENOMEM);
            return 0;
        }
        k->rest = rest;
        k->rest_len = rest_len;
        k->next_seq = first + i + 1; /* that record is out once the rest is */
        k->messages++;
        disarm(s, k, WSGW_SINK_PARTIAL, 0);
        return 0;
    }
    k->messages += frames;
    return 1;
}

/* JSON string escaping as orjson writes it: the extra bytes per byte ('"' and '\\': 1; control
 * bytes: 1 for \b \t \n \f \r, else 5 for \u00XX; anything else, UTF-8 included: 0). */
static const uint8_t ESC_EXTRA[256] = {
    5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
};

static size_t escaped_len(const uint8_t *p, uint32_t n)
{
    size_t len = n;
    for (uint32_t i = 0; i < n; i++)
        len += ESC_EXTRA[p[i]];
    return len;
}

static uint8_t *escape(uint8_t *o, const uint8_t *p, uint32_t n)
{
    static const char hex[] = "0123456789abcdef";
    for (uint32_t i = 0; i < n; i++) {
        uint8_t b = p[i];
        if (ESC_EXTRA[b] == 0) {
            *o++ = b;
            continue;
        }
        *o++ = '\\';
        switch (b) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\b': *o++ = 'b'; break;
        case '\t': *o++ = 't'; break;
        case '\n': *o++ = 'n'; break;
        case '\f': *o++ = 'f'; break;
        case '\r': *o++ = 'r'; break;
        default:
            o[0] = 'u';
            o[1] = '0';
            o[2] = '0';
            o[3] = (uint8_t)hex[b >> 4];
            o[4] = (uint8_t)hex[b & 15];
            o += 5;
        }
    }
    return o;
}

/* v in decimal at o: the end. */
static uint8_t *put_u64(uint8_t *o, uint64_t v)
{
    uint8_t tmp[U64_DIGITS_MAX];
    uint32_t n = 0;
    do {
        tmp[n++] = (uint8_t)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *o++ = tmp[--n];
    return o;
}

/* After a chunk's frames went out: the socket goes on at the chunk's end, or stops
 * (disarmed, with why) at the record it could not send. */
static void end_chunk(wsgw_sink *s, struct sink_sock *k, uint64_t first, uint32_t n,
                      uint32_t stop_at, uint32_t stop_reason)
{
    if (stop_at != UINT32_MAX) {
        k->next_seq = first + stop_at;
        disarm(s, k, stop_reason, 0);
        return;
    }
    k->next_seq = first + n;
}

/* An envelope slot's records of the chunk m[0..n) (numbered first on; now: the stamp of the
 * records written without one): each as one text frame of the envelope Python would make
 * (Delivery.envelope_wire), built in k->env, then one sendmsg. Stops (disarmed) at a gap
 * record of its session, a record it wants whose topic has no middle yet (TOPIC), whose
 * payload is not UTF-8 (UTF8: payload_b64 is Python's) or that this thread writes under
 * wsgw_sink_envelope_hold (EXTRA: its upstream_seq is Python's). */
static void envelope_chunk(wsgw_sink *s, struct sink_sock *k, const struct wsgw_ring_msg *m,
                           uint32_t n, uint64_t first, uint64_t now)
{
    struct iovec iov[CHUNK];
    uint32_t idx[CHUNK];
    uint32_t at[CHUNK + 1];
    size_t esc[CHUNK];
    uint32_t frames = 0, stop_at = UINT32_MAX, stop_reason = 0;
    size_t need = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (first + i < k->next_seq)
            continue;
        uint32_t t = m[i].topic_id;
        if (t == s->gap_tid && m[i].session_id == k->session_id)
            stop_reason = WSGW_SINK_GAP;
        else if (!wants(k, m[i].session_id, t))
            continue;
        else if (envelope_hold)
            stop_reason = WSGW_SINK_EXTRA;
        else if (t >= k->npub || k->pub[t] == NULL)
            stop_reason = WSGW_SINK_TOPIC;
        else if (!wsgw_utf8_valid(m[i].data, m[i].len))
            stop_reason = WSGW_SINK_UTF8;
        if (stop_reason) {
            stop_at = i;
            break;
        }
        esc[frames] = escaped_len(m[i].data, m[i].len);
        size_t body = ENV_HEAD_LEN + U64_DIGITS_MAX + k->pub_len[t] + U64_DIGITS_MAX +
                      ENV_PAYLOAD_LEN + esc[frames] + ENV_TAIL_LEN;
        need += WS_HEAD_MAX + body;
        idx[frames++] = i;
    }
    if (frames > 0 && need > k->env_cap) {
        size_t cap = k->env_cap ? k->env_cap : 4096;
        while (cap < need)
            cap *= 2;
        uint8_t *p = need > UINT32_MAX ? NULL : realloc(k->env, cap);
        if (p == NULL) {
            k->next_seq = first + idx[0];
            disarm(s, k, WSGW_SINK_ERROR, ENOMEM);
            return;
        }
        k->env = p;
        k->env_cap = (uint32_t)(cap > UINT32_MAX ? UINT32_MAX : cap);
    }
    uint8_t *o = k->env;
    size_t total = 0;
    for (uint32_t f = 0; f < frames; f++) {
        const struct wsgw_ring_msg *r = &m[idx[f]];
        uint64_t seq = first + idx[f];
        uint64_t ts = r->ts_ns ? r->ts_ns : now;
        uint32_t t = r->topic_id;
        uint8_t num[2][U64_DIGITS_MAX];
        uint32_t seq_len = (uint32_t)(put_u64(num[0], seq) - num[0]);
        uint32_t ts_len = (uint32_t)(put_u64(num[1], ts) - num[1]);
        size_t body = ENV_HEAD_LEN + seq_len + k->pub_len[t] + ts_len + ENV_PAYLOAD_LEN +
                      esc[f] + ENV_TAIL_LEN;
        uint8_t *start = o;
        o += put_head(o, 0x1, body); /* text */
        memcpy(o, ENV_HEAD, ENV_HEAD_LEN);
        o += ENV_HEAD_LEN;
        memcpy(o, num[0], seq_len);
        o += seq_len;
        memcpy(o, k->pub[t], k->pub_len[t]);
        o += k->pub_len[t];
        memcpy(o, num[1], ts_len);
        o += ts_len;
        memcpy(o, ENV_PAYLOAD, ENV_PAYLOAD_LEN);
        o += ENV_PAYLOAD_LEN;
        o = escape(o, r->data, r->len);
        memcpy(o, ENV_TAIL, ENV_TAIL_LEN);
        o += ENV_TAIL_LEN;
        iov[f] = (struct iovec){.iov_base = start, .iov_len = (size_t)(o - start)};
        at[f] = f;
        total += (size_t)(o - start);
    }
    at[frames] = frames;
    if (frames > 0 &&
        !send_frames(s, k, iov, frames, idx, at, frames, total, first, m[idx[0]].ts_ns))
        return;
    end_chunk(s, k, first, n, stop_at, stop_reason);
}

/* Send the stream socket k its records of the chunk m[0..n) (numbered first on);
 * heads[i]/hlen[i] are made on first use (WebSocket heads, shared by the chunk's sockets).
 * Stops (disarmed) at a gap record of its session or a short send. */
static void send_chunk(wsgw_sink *s, struct sink_sock *k, const struct wsgw_ring_msg *m,
                       uint32_t n, uint64_t first, uint8_t (*heads)[WS_HEAD_MAX], uint8_t *hlen)
{
    struct iovec iov[IOV_PER * CHUNK];
    uint32_t idx[CHUNK];      /* the chunk index of each frame */
    uint32_t at[CHUNK + 1];   /* the first iovec of each frame */
    uint32_t frames = 0, niov = 0, stop_at = UINT32_MAX, stop_reason = 0;
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (first + i < k->next_seq)
            continue; /* before its arm: Python's (never, as the arm is checked) */
        if (m[i].topic_id == s->gap_tid && m[i].session_id == k->session_id) {
            stop_at = i; /* Python sends the notice (its own JSON), even to "every topic" */
            stop_reason = WSGW_SINK_GAP;
            break;
        }
        if (!wants(k, m[i].session_id, m[i].topic_id))
            continue;
        at[frames] = niov;
        if (hlen[i] == 0)
            hlen[i] = (uint8_t)frame_head(heads[i], m[i].data, m[i].len);
        iov[niov++] = (struct iovec){.iov_base = heads[i], .iov_len = hlen[i]};
        iov[niov++] = (struct iovec){.iov_base = (void *)m[i].data, .iov_len = m[i].len};
        total += hlen[i] + m[i].len;
        idx[frames++] = i;
    }
    at[frames] = niov;
    if (frames > 0 && !send_frames(s, k, iov, niov, idx, at, frames, total, first, m[idx[0]].ts_ns))
        return;
    end_chunk(s, k, first, n, stop_at, stop_reason);
}

/* Send a NATS slot's buffer (MSG_DONTWAIT): what does not go out becomes the rest, and the
 * slot is disarmed (AGAIN, PARTIAL, ERROR: the connection is broken, Python finds out). */
static void nats_flush(wsgw_sink *s, struct sink_sock *k)
{
    if (k->out_len == 0)
        return;
    ssize_t sent;
    do
        sent = send(k->fd, k->out, k->out_len, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    if (sent < 0) {
        int err = errno;
        disarm(s, k, err == EAGAIN || err == EWOULDBLOCK ? WSGW_SINK_AGAIN : WSGW_SINK_ERROR, err);
        return;
    }
    k->bytes += (uint64_t)sent;
    k->sends++;
    note_lag(s, k->out_ts_ns);
    if ((size_t)sent < k->out_len) {
        out_to_rest(k, (size_t)sent);
        disarm(s, k, WSGW_SINK_PARTIAL, 0);
        return;
    }
    k->out_len = 0;
    if (k->busy_sends) {
        /* Many sends a millisecond cost the writer's thread more than the sink's thread
         * batching them: hand back (the syscall and the receiver's loopback work run in the
         * writer's thread here). */
        uint64_t now = wsgw_monotonic_ns();
        if (now - k->win_start_ns >= 1000000u) {
            k->win_start_ns = now;
            k->win_sends = 0;
        }
        if (++k->win_sends > k->busy_sends)
            disarm(s, k, WSGW_SINK_BUSY, 0);
    }
}

/* Room for need more bytes in k's buffer (0), or -ENOMEM. */
static int out_reserve(struct sink_sock *k, size_t need)
{
    if (k->out_len + need <= k->out_cap)
        return 0;
    if (k->out_len + need > UINT32_MAX / 2)
        return -ENOMEM;
    uint32_t cap = k->out_cap ? k->out_cap : 4096;
    while (cap < k->out_len + need)
        cap *= 2;
    uint8_t *p = realloc(k->out, cap);
    if (p == NULL)
        return -ENOMEM;
    k->out = p;
    k->out_cap = cap;
    return 0;
}

/* A NATS slot's records of m[0..n) (numbered first on), every session's, as
 * `PUB <subject>  <len>\r\n<payload>\r\n` (the bytes nats-py writes for a publish without
 * reply), appended to its buffer; sent now outside a burst, at the burst's end inside one
 * (or once the buffer is OUT_FLUSH_BYTES or OUT_MAX_AGE_NS old). Stops (disarmed, the
 * buffer sent first) at any $gap record and at a topic it was not told the subject of. */
static void nats_chunk(wsgw_sink *s, struct sink_sock *k, const struct wsgw_ring_msg *m,
                       uint32_t n, uint64_t first)
{
    uint32_t stop_reason = 0, stop_at = 0;
    int err = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (first + i < k->next_seq)
            continue; /* before its arm: Python's (never, as the arm is checked) */
        uint32_t t = m[i].topic_id;
        if (t == s->gap_tid) {
            stop_reason = WSGW_SINK_GAP; /* Python publishes the notice (its own JSON) */
        } else if (t >= k->npub || k->pub[t] == NULL) {
            stop_reason = WSGW_SINK_TOPIC; /* Python publishes it and tells the subject */
        } else {
            char len[NATS_LEN_MAX];
            int l = snprintf(len, sizeof len, "%u\r\n", m[i].len);
            size_t need = k->pub_len[t] + (size_t)l + m[i].len + 2;
            if (out_reserve(k, need) != 0) {
                nats_flush(s, k);
                if (!k->armed)
                    return; /* next_seq is this record: Python's */
                if (out_reserve(k, need) != 0) {
                    stop_reason = WSGW_SINK_ERROR;
                    err = ENOMEM;
                }
            }
            if (stop_reason == 0) {
                if (k->out_len == 0) {
                    k->out_since_ns = burst_depth ? wsgw_monotonic_ns() : 0;
                    k->out_ts_ns = m[i].ts_ns;
                }
                uint8_t *o = k->out + k->out_len;
                memcpy(o, k->pub[t], k->pub_len[t]);
                o += k->pub_len[t];
                memcpy(o, len, (size_t)l);
                o += l;
                memcpy(o, m[i].data, m[i].len);
                o += m[i].len;
                o[0] = '\r';
                o[1] = '\n';
                k->out_len += (uint32_t)need;
                k->messages++;
                k->next_seq = first + i + 1;
                continue;
            }
        }
        stop_at = i;
        break;
    }
    if (stop_reason) {
        nats_flush(s, k); /* what came before the stop goes first (or becomes the rest) */
        k->next_seq = first + stop_at;
        if (k->armed)
            disarm(s, k, stop_reason, err);
        return;
    }
    if (k->out_len == 0)
        return;
    if (burst_depth == 0 || k->out_len >= OUT_FLUSH_BYTES ||
        wsgw_monotonic_ns() - k->out_since_ns >= OUT_MAX_AGE_NS)
        nats_flush(s, k);
    else
        burst_dirty = 1;
}

static void sink_write(wsgw_sink *s, const struct wsgw_ring_msg *m, uint32_t n, uint64_t first,
                       uint64_t now)
{
    uint8_t heads[CHUNK][WS_HEAD_MAX];
    uint8_t hlen[CHUNK];
    for (uint32_t at = 0; at < n && s->armed; at += CHUNK) {
        uint32_t c = n - at < CHUNK ? n - at : CHUNK;
        memset(hlen, 0, c);
        for (uint32_t j = 0; j < s->used; j++) {
            struct sink_sock *k = &s->socks[j];
            if (!k->armed)
                continue;
            if (k->nats)
                nats_chunk(s, k, m + at, c, first + at);
            else if (k->envelope)
                envelope_chunk(s, k, m + at, c, first + at, now);
            else
                send_chunk(s, k, m + at, c, first + at, heads, hlen);
        }
    }
}

void wsgw_sink_after_write(const wsgw_ring_writer *w, const struct wsgw_ring_msg *m, uint32_t n,
                           uint64_t first_seq, uint64_t now)
{
    if (atomic_load_explicit(&registry_count, memory_order_relaxed) == 0)
        return;
    pthread_mutex_lock(&registry_mu);
    for (wsgw_sink *s = registry; s != NULL; s = s->next) {
        if (s->w != w)
            continue;
        pthread_mutex_lock(&s->mu);
        if (s->armed)
            sink_write(s, m, n, first_seq, now);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&registry_mu);
}

WSGW_API void wsgw_sink_burst_begin(void)
{
    burst_depth++;
}

WSGW_API void wsgw_sink_burst_end(void)
{
    if (burst_depth == 0 || --burst_depth != 0 || !burst_dirty)
        return;
    burst_dirty = 0;
    if (atomic_load_explicit(&registry_count, memory_order_relaxed) == 0)
        return;
    pthread_mutex_lock(&registry_mu);
    for (wsgw_sink *s = registry; s != NULL; s = s->next) {
        pthread_mutex_lock(&s->mu);
        for (uint32_t j = 0; j < s->used; j++) {
            struct sink_sock *k = &s->socks[j];
            if (k->armed && k->out_len)
                nats_flush(s, k);
        }
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&registry_mu);
}

WSGW_API int wsgw_sink_open(wsgw_ring_writer *w, uint32_t gap_topic_id, wsgw_sink **out)
{
    wsgw_sink *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->w = w;
    s->gap_tid = gap_topic_id;
    atomic_init(&s->max_streams, WSGW_SINK_MAX_SOCKETS);
    pthread_mutex_init(&s->mu, NULL);
    for (uint32_t i = 0; i < WSGW_SINK_MAX_SOCKETS; i++)
        s->socks[i].fd = s->socks[i].wake_fd = -1;
    wsgw_ring_writer_retain(w);
    pthread_mutex_lock(&registry_mu);
    s->next = registry;
    registry = s;
    atomic_fetch_add(&registry_count, 1);
    pthread_mutex_unlock(&registry_mu);
    *out = s;
    return 0;
}

static void free_sock(struct sink_sock *k)
{
    if (k->fd >= 0)
        close(k->fd);
    if (k->wake_fd >= 0)
        close(k->wake_fd);
    free(k->topics);
    free(k->rest);
    free(k->out);
    free(k->env);
    for (uint32_t t = 0; t < k->npub; t++)
        free(k->pub[t]);
    free(k->pub);
    free(k->pub_len);
    memset(k, 0, sizeof(*k));
    k->fd = -1;
    k->wake_fd = -1;
}

WSGW_API void wsgw_sink_close(wsgw_sink *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&registry_mu);
    for (wsgw_sink **p = &registry; *p != NULL; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            atomic_fetch_sub(&registry_count, 1);
            break;
        }
    pthread_mutex_unlock(&registry_mu);
    for (uint32_t i = 0; i < s->used; i++)
        free_sock(&s->socks[i]);
    pthread_mutex_destroy(&s->mu);
    wsgw_ring_writer_release(s->w);
    free(s);
}

static struct sink_sock *slot_of(wsgw_sink *s, int slot)
{
    if (slot < 0 || (uint32_t)slot >= s->used || s->socks[slot].fd < 0)
        return NULL;
    return &s->socks[slot];
}

WSGW_API int wsgw_sink_add(wsgw_sink *s, int fd, uint32_t session_id, const uint32_t *topics,
                           uint32_t n)
{
    if (n > WSGW_SINK_MAX_TOPICS || (n > 0 && topics == NULL))
        return -EINVAL;
    uint32_t *copy = NULL;
    if (n > 0) {
        copy = malloc(n * sizeof(*copy));
        if (copy == NULL)
            return -ENOMEM;
        memcpy(copy, topics, n * sizeof(*copy));
        qsort(copy, n, sizeof(*copy), cmp_u32);
    }
    int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) {
        int err = errno;
        free(copy);
        return -err;
    }
    pthread_mutex_lock(&s->mu);
    uint32_t i = 0;
    while (i < s->used && s->socks[i].fd >= 0)
        i++;
    if (i == WSGW_SINK_MAX_SOCKETS) {
        pthread_mutex_unlock(&s->mu);
        close(dup_fd);
        free(copy);
        return -ENOSPC;
    }
    struct sink_sock *k = &s->socks[i];
    memset(k, 0, sizeof(*k));
    k->fd = dup_fd;
    k->wake_fd = -1;
    k->session_id = session_id;
    k->ntopics = n;
    k->topics = copy;
    k->reason = WSGW_SINK_NEVER;
    if (i == s->used)
        s->used++;
    pthread_mutex_unlock(&s->mu);
    return (int)i;
}

WSGW_API int wsgw_sink_wake_fd(wsgw_sink *s, int slot, int fd)
{
    int dup_fd = -1;
    if (fd >= 0 && (dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return -errno;
    pthread_mutex_lock(&s->mu);
    struct sink_sock *k = slot_of(s, slot);
    if (k == NULL) {
        pthread_mutex_unlock(&s->mu);
        if (dup_fd >= 0)
            close(dup_fd);
        return -EINVAL;
    }
    int old = k->wake_fd;
    k->wake_fd = dup_fd;
    pthread_mutex_unlock(&s->mu);
    if (old >= 0)
        close(old);
    return 0;
}

WSGW_API int wsgw_sink_remove(wsgw_sink *s, int slot)
{
    pthread_mutex_lock(&s->mu);
    struct sink_sock *k = slot_of(s, slot);
    if (k == NULL) {
        pthread_mutex_unlock(&s->mu);
        return -EINVAL;
    }
    disarm(s, k, WSGW_SINK_PYTHON, 0);
    free_sock(k);
    while (s->used > 0 && s->socks[s->used - 1].fd < 0)
        s->used--;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

WSGW_API int wsgw_sink_arm(wsgw_sink *s, int slot, uint64_t seq)
{
    pthread_mutex_lock(&s->mu);
    struct sink_sock *k = slot_of(s, slot);
    int rc = 0;
    if (k == NULL) {
        rc = -EINVAL;
    } else if (k->rest_len != 0) {
        rc = -EBUSY;
    } else if (!k->armed && !k->nats && atomic_load(&s->streams_armed) >= atomic_load(&s->max_streams)) {
        rc = -EDQUOT; /* the writer's inline fan-out is bounded: this one stays on Python */
    } else if (!k->armed) {
        /* Under the mutex the hook takes after it published: a slice published before this
         * read is seen here (refused), one published after finds the socket armed. */
        struct wsgw_ring_info info;
        wsgw_ring_writer_info(s->w, &info);
        if (info.write_seq + 1 != seq) {
            rc = -EAGAIN;
        } else {
            k->armed = 1;
            k->reason = WSGW_SINK_ARMED;
            k->err = 0;
            k->next_seq = seq;
            s->armed++;
            if (!k->nats)
                atomic_fetch_add_explicit(&s->streams_armed, 1, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

WSGW_API int wsgw_sink_max_streams(wsgw_sink *s, uint32_t max_streams)
{
    if (max_streams > WSGW_SINK_MAX_SOCKETS)
        return -EINVAL;
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->max_streams, max_streams); /* armed beyond a lowered cap: until disarmed */
    int armed = (int)atomic_load(&s->streams_armed);
    pthread_mutex_unlock(&s->mu);
    return armed;
}

WSGW_API uint32_t wsgw_sink_stream_room(wsgw_sink *s)
{
    uint32_t max = atomic_load_explicit(&s->max_streams, memory_order_relaxed);
    uint32_t armed = atomic_load_explicit(&s->streams_armed, memory_order_relaxed);
    return armed < max ? max - armed : 0;
}

static void fill_state(const struct sink_sock *k, uint64_t *out)
{
    out[WSGW_SINK_ST_ARMED] = (uint64_t)k->armed;
    out[WSGW_SINK_ST_NEXT_SEQ] = k->next_seq;
    out[WSGW_SINK_ST_REST_LEN] = k->rest_len;
    out[WSGW_SINK_ST_REASON] = k->reason;
    out[WSGW_SINK_ST_ERRNO] = (uint64_t)k->err;
    out[WSGW_SINK_ST_MESSAGES] = k->messages;
    out[WSGW_SINK_ST_BYTES] = k->bytes;
    out[WSGW_SINK_ST_DISARMS] = k->disarms;
    out[WSGW_SINK_ST_SENDS] = k->sends;
}

static int state_op(wsgw_sink *s, int slot, uint64_t *out, int do_disarm)
{
    pthread_mutex_lock(&s->mu);
    struct sink_sock *k = slot_of(s, slot);
    if (k == NULL) {
        pthread_mutex_unlock(&s->mu);
        return -EINVAL;
    }
    if (do_disarm && k->armed)
        disarm(s, k, WSGW_SINK_PYTHON, 0);
    fill_state(k, out);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

WSGW_API int wsgw_sink_disarm(wsgw_sink *s, int slot, uint64_t *out)
{
    return state_op(s, slot, out, 1);
}

WSGW_API int wsgw_sink_state(wsgw_sink *s, int slot, uint64_t *out)
{
    return state_op(s, slot, out, 0);
}

WSGW_API int64_t wsgw_sink_take_rest(wsgw_sink *s, int slot, uint8_t *buf, uint64_t cap)
{
    pthread_mutex_lock(&s->mu);
    struct sink_sock *k = slot_of(s, slot);
    int64_t rc;
    if (k == NULL) {
        rc = -EINVAL;
    } else if (k->rest_len > cap) {
        rc = -ENOBUFS;
    } else {
        rc = k->rest_len;
        if (k->rest_len)
            memcpy(buf, k->rest, k->rest_len);
        free(k->rest);
        k->rest = NULL;
        k->rest_len = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

WSGW_API uint32_t wsgw_sink_lags(wsgw_sink *s, uint32_t *out, uint32_t cap, uint64_t *total)
{
    pthread_mutex_lock(&s->mu);
    uint64_t n = s->lag_n;
    uint32_t k = n < WSGW_SINK_LAG_SAMPLES ? (uint32_t)n : WSGW_SINK_LAG_SAMPLES;
    if (k > cap)
        k = cap;
    for (uint32_t j = 0; j < k; j++)
        out[j] = s->lag[(n - k + j) % WSGW_SINK_LAG_SAMPLES];
    *total = n;
    pthread_mutex_unlock(&s->mu);
    return k;
}

WSGW_API int wsgw_sink_add_nats(wsgw_sink *s, int fd, uint32_t busy_sends)
{
    int slot = wsgw_sink_add(s, fd, 0, NULL, 0);
    if (slot < 0)
        return slot;
    pthread_mutex_lock(&s->mu);
    s->socks[slot].nats = 1;
    s->socks[slot].busy_sends = busy_sends;
    pthread_mutex_unlock(&s->mu);
    return slot;
}

/* Store str (malloc'ed, len bytes; taken, freed on failure) as slot's piece of topic_id, the
 * slot a NATS one (nats) or an envelope one. */
static int set_piece(wsgw_sink *s, int slot, int nats, uint32_t topic_id, char *str,
                     uint32_t len)
{
    pthread_mutex_lock(&s->mu);
    struct sink_sock *k = slot_of(s, slot);
    int rc = 0;
    if (k == NULL || (nats ? !k->nats : !k->envelope)) {
        rc = -EINVAL;
    } else if (topic_id >= k->npub) {
        uint32_t n = k->npub ? k->npub : 64;
        while (n <= topic_id)
            n *= 2;
        char **p = realloc(k->pub, n * sizeof(*p));
        if (p != NULL)
            k->pub = p;
        uint16_t *pl = p == NULL ? NULL : realloc(k->pub_len, n * sizeof(*pl));
        if (p == NULL || pl == NULL) {
            rc = -ENOMEM;
        } else {
            k->pub_len = pl;
            memset(p + k->npub, 0, (n - k->npub) * sizeof(*p));
            memset(pl + k->npub, 0, (n - k->npub) * sizeof(*pl));
            k->npub = n;
        }
    }
    if (rc == 0) {
        free(k->pub[topic_id]);
        k->pub[topic_id] = str;
        k->pub_len[topic_id] = (uint16_t)len;
        str = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    free(str);
    return rc;
}

WSGW_API int wsgw_sink_nats_subject(wsgw_sink *s, int slot, uint32_t topic_id,
                                    const char *subject, uint32_t len)
{
    if (len == 0 || len > WSGW_SINK_SUBJECT_MAX || topic_id >= WSGW_SINK_MAX_TOPIC_ID)
        return -EINVAL;
    for (uint32_t j = 0; j < len; j++) /* NATS subjects: no whitespace or control bytes */
        if ((unsigned char)subject[j] <= ' ')
            return -EINVAL;
    char *pub = malloc(len + 6);
    if (pub == NULL)
        return -ENOMEM;
    memcpy(pub, "PUB ", 4);
    memcpy(pub + 4, subject, len);
    pub[len + 4] = ' ';
    pub[len + 5] = ' '; /* no reply-to: nats-py's two spaces */
    return set_piece(s, slot, 1, topic_id, pub, len + 6);
}

WSGW_API int wsgw_sink_add_envelope(wsgw_sink *s, int fd, uint32_t session_id,
                                    const uint32_t *topics, uint32_t n)
{
    int slot = wsgw_sink_add(s, fd, session_id, topics, n);
    if (slot < 0)
        return slot;
    pthread_mutex_lock(&s->mu);
    s->socks[slot].envelope = 1;
    pthread_mutex_unlock(&s->mu);
    return slot;
}

WSGW_API int wsgw_sink_envelope_topic(wsgw_sink *s, int slot, uint32_t topic_id,
                                      const char *middle, uint32_t len)
{
    if (len == 0 || len > WSGW_SINK_MIDDLE_MAX || topic_id >= WSGW_SINK_MAX_TOPIC_ID)
        return -EINVAL;
    char *copy = malloc(len);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, middle, len);
    return set_piece(s, slot, 0, topic_id, copy, len);
}

WSGW_API void wsgw_sink_envelope_hold(int on)
{
    envelope_hold = on;
}
