/* The engine: RX bursts through the TCP fast path (see wsgw_engine.h for the contract). */
#define _GNU_SOURCE /* ppoll */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#include "shim_internal.h"
#include "wsgw_engine.h"
#include "wsgw_sink.h"
#include "wsgw_feed.h"

#ifdef WSGW_HAVE_DPDK
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#endif

#define ETH_HDR 14
#define IP_HDR 20
#define TCP_HDR 20
#define TCP_ACK 0x10
#define TCP_PSH 0x08
#define TS_OPT_WORD 0x0101080au /* NOP NOP kind=8 len=10, as Linux lays it out */
#define FRAME_MAX 2048
#define INJECT_FRAMES 4096
#define CAPTURE_FRAMES 1024
#define TOMBSTONE 0xffffffffu
#define ENGINE_BURST_MAX 64
#define DATA_BATCH (256u * 1024u) /* fast-path bytes gathered before a poll returns */
#define DATA_DELAY_NS 20000u      /* ... or the age of the oldest of them */
#define EXTRA_FD_CHECK_POLLS 64u  /* busy polling: empty polls between looks at the extra fd */
#define SPARE_RINGS 8u            /* rings of deleted flows kept for the next flows */

struct wsgw_engine {
    struct wsgw_engine_conf conf;
    wsgw_port *port;
    uint32_t local_ip_be;
    struct wsgw_flow *flows;
    uint8_t *flow_used;
    /* open addressing, linear probing: slot+1, 0 empty, TOMBSTONE deleted */
    uint32_t *table;
    uint64_t *table_keys;
    uint32_t table_mask;
    uint32_t table_filled;      /* live + tombstones */
    uint32_t pending_acks;      /* flows with ack_deadline != 0 */
    /* slow path arena */
    uint8_t *slow;
    uint32_t slow_used;
    uint32_t *slow_off;
    uint16_t *slow_len;
    uint32_t slow_count;
    /* flows touched in this poll */
    uint32_t *touched;
    uint32_t touched_count;
    /* injected frames (no port) */
    uint8_t *inj;
    uint32_t inj_used;
    uint32_t *inj_off;
    uint16_t *inj_len;
    uint32_t inj_count, inj_read;
    /* captured TX frames (no port) */
    uint8_t *cap;
    uint32_t cap_used;
    uint32_t *cap_off;
    uint16_t *cap_len;
    uint32_t cap_count;
#ifdef WSGW_HAVE_DPDK
    struct rte_mbuf *txq[ENGINE_BURST_MAX];
    uint16_t txq_n;
#endif
    /* Rings of deleted flows, reused by flow_add: a new connection then needs no mmap and
     * no page faults on its first bytes (a 1 MiB malloc is an mmap). */
    uint8_t *spare_ring[SPARE_RINGS];
    uint32_t spare_size[SPARE_RINGS];
    uint32_t spare_count;
    int tx_hold;                /* Python's own frames wait (port full): flow_send refuses */
    int wake;
    int wake_fd;                /* eventfd: a wake() interrupts the back-off sleep at once */
    int extra_fd;               /* -1, or another fd whose readiness ends a poll (an event
                                 * loop's epoll fd: its sockets and timers keep working) */
    int rx_fd;                  /* -1, or an fd readable while the port's RX queue holds
                                 * frames (the af_packet PMD's socket): the back-off sleep
                                 * ends when a frame arrives, not when the nap does */
    uint64_t manual_now;        /* a test's virtual clock (ns); 0: CLOCK_MONOTONIC */
    uint64_t first_data_ns;     /* RX time of the first fast-path byte in this poll */
    uint32_t idle_polls;
    uint64_t backoff_ns;
    uint64_t spin_until_ns;     /* no back-off sleep before this (a reply is expected) */
    struct wsgw_engine_stats st;
    /* C feed path (feed.c): per slot, the attached feed (or NULL) and the bytes it took
     * since Python's last sync of the flow */
    struct wsgw_feed **feeds;
    uint32_t *fed_since_sync;
    uint32_t feed_count;
};

static inline uint64_t engine_now(const struct wsgw_engine *e);

WSGW_API uint64_t wsgw_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline int32_t seq_diff(uint32_t a, uint32_t b) { return (int32_t)(a - b); }

static inline uint64_t flow_key(uint32_t remote_ip, uint16_t remote_port, uint16_t local_port)
{
    return (uint64_t)remote_ip << 32 | (uint64_t)remote_port << 16 | local_port;
}

static inline uint32_t hash_key(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key;
}

/* ---- flow table ------------------------------------------------------------------------ */

static int table_find(const struct wsgw_engine *e, uint64_t key)
{
    uint32_t i = hash_key(key) & e->table_mask;
    for (;;) {
        uint32_t v = e->table[i];
        if (v == 0)
            return -1;
        if (v != TOMBSTONE && e->table_keys[i] == key)
            return (int)(v - 1);
        i = (i + 1) & e->table_mask;
    }
}

static void table_rebuild(struct wsgw_engine *e)
{
    memset(e->table, 0, (e->table_mask + 1) * sizeof(uint32_t));
    e->table_filled = 0;
    for (uint32_t s = 0; s < e->conf.max_flows; s++) {
        if (!e->flow_used[s])
            continue;
        const struct wsgw_flow *f = &e->flows[s];
        uint64_t key = flow_key(f->remote_ip, f->remote_port, f->local_port);
        uint32_t i = hash_key(key) & e->table_mask;
        while (e->table[i] != 0)
            i = (i + 1) & e->table_mask;
        e->table[i] = s + 1;
        e->table_keys[i] = key;
        e->table_filled++;
    }
}

WSGW_API int wsgw_engine_flow_lookup(const wsgw_engine *e, uint32_t remote_ip,
                                     uint16_t remote_port, uint16_t local_port)
{
    return table_find(e, flow_key(remote_ip, remote_port, local_port));
}

WSGW_API int wsgw_engine_flow_add(wsgw_engine *e, uint32_t remote_ip, uint16_t remote_port,
                                  uint16_t local_port, uint32_t ring_size)
{
    if (ring_size == 0 || (ring_size & (ring_size - 1)) != 0) {
        wsgw_set_error("flow ring size %u is not a power of two", ring_size);
        return -EINVAL;
    }
    uint64_t key = flow_key(remote_ip, remote_port, local_port);
    if (table_find(e, key) >= 0) {
        wsgw_set_error("flow %08x:%u <- %u is already registered", remote_ip, remote_port,
                       local_port);
        return -EEXIST;
    }
    int slot = -1;
    for (uint32_t s = 0; s < e->conf.max_flows; s++) {
        if (!e->flow_used[s]) {
            slot = (int)s;
            break;
        }
    }
    if (slot < 0) {
        wsgw_set_error("all %u flow slots are in use", e->conf.max_flows);
        return -ENOSPC;
    }
    uint8_t *ring = NULL;
    for (uint32_t i = 0; i < e->spare_count; i++) {
        if (e->spare_size[i] == ring_size) {
            ring = e->spare_ring[i];
            e->spare_count--;
            e->spare_ring[i] = e->spare_ring[e->spare_count];
            e->spare_size[i] = e->spare_size[e->spare_count];
            break;
        }
    }
    if (!ring)
        ring = malloc(ring_size);
    if (!ring) {
        wsgw_set_error("out of memory for a %u-byte flow ring", ring_size);
        return -ENOMEM;
    }
    struct wsgw_flow *f = &e->flows[slot];
    memset(f, 0, sizeof(*f));
    f->remote_ip = remote_ip;
    f->remote_port = remote_port;
    f->local_port = local_port;
    f->ring = ring;
    f->ring_size = ring_size;
    f->mss = 1460;
    e->flow_used[slot] = 1;
    if (e->table_filled + 1 > (e->table_mask + 1) / 2) {
        table_rebuild(e); /* drop tombstones; the table is sized for max_flows at half load */
    } else {
        uint32_t i = hash_key(key) & e->table_mask;
        while (e->table[i] != 0 && e->table[i] != TOMBSTONE)
            i = (i + 1) & e->table_mask;
        if (e->table[i] == 0)
            e->table_filled++;
        e->table[i] = (uint32_t)slot + 1;
        e->table_keys[i] = key;
    }
    return slot;
}

WSGW_API int wsgw_engine_flow_del(wsgw_engine *e, int slot)
{
    if (slot < 0 || (uint32_t)slot >= e->conf.max_flows || !e->flow_used[slot]) {
        wsgw_set_error("no flow in slot %d", slot);
        return -ENOENT;
    }
    struct wsgw_flow *f = &e->flows[slot];
    uint64_t key = flow_key(f->remote_ip, f->remote_port, f->local_port);
    uint32_t i = hash_key(key) & e->table_mask;
    while (e->table[i] != 0) {
        if (e->table[i] == (uint32_t)slot + 1) {
            e->table[i] = TOMBSTONE;
            break;
        }
        i = (i + 1) & e->table_mask;
    }
    if (f->ack_deadline_ns)
        e->pending_acks--;
    if (e->feeds[slot]) {
        e->feeds[slot] = NULL;
        e->feed_count--;
    }
    e->fed_since_sync[slot] = 0;
    if (e->spare_count < SPARE_RINGS) {
        e->spare_ring[e->spare_count] = f->ring;
        e->spare_size[e->spare_count] = f->ring_size;
        e->spare_count++;
    } else {
        free(f->ring);
    }
    memset(f, 0, sizeof(*f));
    e->flow_used[slot] = 0;
    return 0;
}

WSGW_API struct wsgw_flow *wsgw_engine_flow(wsgw_engine *e, int slot)
{
    if (slot < 0 || (uint32_t)slot >= e->conf.max_flows || !e->flow_used[slot])
        return NULL;
    return &e->flows[slot];
}

WSGW_API uint32_t wsgw_engine_flow_read(wsgw_engine *e, int slot, uint8_t *dst, uint32_t max)
{
    struct wsgw_flow *f = wsgw_engine_flow(e, slot);
    if (!f)
        return 0;
    uint32_t avail = f->ring_head - f->ring_tail;
    uint32_t n = avail < max ? avail : max;
    uint32_t pos = f->ring_tail & (f->ring_size - 1);
    uint32_t first = f->ring_size - pos < n ? f->ring_size - pos : n;
    memcpy(dst, f->ring + pos, first);
    memcpy(dst + first, f->ring, n - first);
    f->ring_tail += n;
    return n;
}

static void flow_synced(struct wsgw_flow *f, int keep_space)
{
    /* The bytes move into Python's buffer, which has that much less room: until Python
     * writes rcv_space again (an export, a C send, sync_receive_space), C's window counts
     * them. Unless they go straight to a reader (keep_space): the buffer stays as free. */
    if (!keep_space)
        f->rcv_space = f->rcv_space > f->delivered_since_sync ? f->rcv_space - f->delivered_since_sync : 0;
    f->delivered_since_sync = 0;
    f->slow_pending = 0;
    f->acks_advanced = 0;
}

WSGW_API int wsgw_engine_flow_sync(wsgw_engine *e, int slot, uint8_t *dst, uint32_t max,
                                   struct wsgw_flow_sync *out, int keep_space)
{
    struct wsgw_flow *f = wsgw_engine_flow(e, slot);
    if (!f)
        return -ENOENT;
    uint32_t first_rx_unread = f->delivered_since_sync ? 1 : 0;
    out->bytes = f->ring_head != f->ring_tail ? wsgw_engine_flow_read(e, slot, dst, max) : 0;
    out->rcv_nxt = f->rcv_nxt;
    out->rcv_adv_right = f->rcv_adv_right;
    out->ts_recent = f->ts_recent;
    out->last_ack_sent = f->last_ack_sent;
    uint64_t taken = f->fast_segments + f->pure_acks;
    out->segments = (uint32_t)(taken - f->segments_synced);
    f->segments_synced = taken;
    out->acks = f->acks_advanced;
    out->snd_una = f->snd_una;
    out->snd_wl1 = f->snd_wl1;
    out->ack_tsecr = f->ack_tsecr;
    out->snd_wnd_field = f->snd_wnd_field;
    out->slow_pending = f->slow_pending;
    out->unacked_bytes = f->slow_pending ? f->unacked_bytes : 0;
    out->ack_deadline_ns = f->slow_pending ? wsgw_engine_flow_take_ack(e, slot) : 0;
    out->first_rx_ns = first_rx_unread ? f->first_rx_ns : 0;
    out->now_ns = engine_now(e);
    out->fed = e->fed_since_sync[slot];
    out->reserved = 0;
    e->fed_since_sync[slot] = 0;
    if (out->bytes && e->feeds[slot])
        wsgw_feed_stop(e->feeds[slot]); /* Python has bytes of this flow now */
    flow_synced(f, keep_space);
    return 0;
}

WSGW_API int wsgw_engine_flow_set_feed(wsgw_engine *e, int slot, struct wsgw_feed *feed)
{
    if (!wsgw_engine_flow(e, slot)) {
        wsgw_set_error("no flow in slot %d", slot);
        return -ENOENT;
    }
    if (e->feeds[slot] && !feed)
        e->feed_count--;
    else if (!e->feeds[slot] && feed)
        e->feed_count++;
    e->feeds[slot] = feed;
    if (feed)
        wsgw_feed_attached(feed);
    return 0;
}

WSGW_API void wsgw_engine_flow_synced(wsgw_engine *e, int slot)
{
    struct wsgw_flow *f = wsgw_engine_flow(e, slot);
    if (f)
        flow_synced(f, 0);
}

WSGW_API uint64_t wsgw_engine_flow_take_ack(wsgw_engine *e, int slot)
{
    struct wsgw_flow *f = wsgw_engine_flow(e, slot);
    if (!f || !f->ack_deadline_ns)
        return 0;
    uint64_t deadline = f->ack_deadline_ns;
    f->ack_deadline_ns = 0;
    e->pending_acks--;
    return deadline;
}

WSGW_API void wsgw_engine_flow_give_ack(wsgw_engine *e, int slot, uint64_t deadline_ns,
                                        uint32_t unacked_bytes, uint32_t unacked_segments)
{
    struct wsgw_flow *f = wsgw_engine_flow(e, slot);
    if (!f)
        return;
    f->unacked_bytes = unacked_bytes;
    f->unacked_segments = unacked_segments;
    if (f->ack_deadline_ns && !deadline_ns)
        e->pending_acks--;
    else if (!f->ack_deadline_ns && deadline_ns)
        e->pending_acks++;
    f->ack_deadline_ns = deadline_ns;
}

WSGW_API void wsgw_engine_set_time(wsgw_engine *e, uint64_t now_ns) { e->manual_now = now_ns; }

WSGW_API uint64_t wsgw_engine_now(const wsgw_engine *e) { return engine_now(e); }

static inline uint64_t engine_now(const struct wsgw_engine *e)
{
    return e->manual_now ? e->manual_now : wsgw_monotonic_ns();
}

/* ---- create / destroy ------------------------------------------------------------------- */

WSGW_API int wsgw_engine_create(const struct wsgw_engine_conf *conf, wsgw_port *port,
                                wsgw_engine **out)
{
    *out = NULL;
    if (conf->burst == 0 || conf->burst > ENGINE_BURST_MAX || conf->max_flows == 0 ||
        conf->slow_max_frames < 2 * conf->burst ||
        conf->slow_arena_bytes < 2u * conf->burst * FRAME_MAX) {
        wsgw_set_error("engine configuration out of range: burst 1..%d, max_flows >= 1, "
                       "slow arena >= 2 bursts of %d-byte frames",
                       ENGINE_BURST_MAX, FRAME_MAX);
        return -EINVAL;
    }
#ifndef WSGW_HAVE_DPDK
    if (port) {
        wsgw_set_error("wsgw shim was built without DPDK: an engine needs no port here");
        return -ENOTSUP;
    }
#endif
    struct wsgw_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->conf = *conf;
    e->port = port;
    e->local_ip_be = __builtin_bswap32(conf->local_ip);
    uint32_t tsize = 16;
    while (tsize < 2u * conf->max_flows)
        tsize <<= 1;
    e->table_mask = tsize - 1;
    e->flows = aligned_alloc(64, sizeof(struct wsgw_flow) * conf->max_flows);
    e->flow_used = calloc(conf->max_flows, 1);
    e->table = calloc(tsize, sizeof(uint32_t));
    e->table_keys = calloc(tsize, sizeof(uint64_t));
    e->slow = malloc(conf->slow_arena_bytes);
    e->slow_off = calloc(conf->slow_max_frames, sizeof(uint32_t));
    e->slow_len = calloc(conf->slow_max_frames, sizeof(uint16_t));
    e->touched = calloc(conf->max_flows, sizeof(uint32_t));
    e->feeds = calloc(conf->max_flows, sizeof(*e->feeds));
    e->fed_since_sync = calloc(conf->max_flows, sizeof(uint32_t));
    e->inj = malloc((size_t)INJECT_FRAMES * FRAME_MAX);
    e->inj_off = calloc(INJECT_FRAMES, sizeof(uint32_t));
    e->inj_len = calloc(INJECT_FRAMES, sizeof(uint16_t));
    e->cap = malloc((size_t)CAPTURE_FRAMES * 128);
    e->cap_off = calloc(CAPTURE_FRAMES, sizeof(uint32_t));
    e->cap_len = calloc(CAPTURE_FRAMES, sizeof(uint16_t));
    if (!e->flows || !e->flow_used || !e->table || !e->table_keys || !e->slow || !e->slow_off ||
        !e->slow_len || !e->touched || !e->inj || !e->inj_off || !e->inj_len || !e->cap ||
        !e->cap_off || !e->cap_len || !e->feeds || !e->fed_since_sync) {
        wsgw_engine_destroy(e);
        wsgw_set_error("out of memory for the engine");
        return -ENOMEM;
    }
    memset(e->flows, 0, sizeof(struct wsgw_flow) * conf->max_flows);
    e->backoff_ns = conf->sleep_min_ns;
    e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->extra_fd = -1;
    e->rx_fd = -1;
    *out = e;
    return 0;
}

WSGW_API void wsgw_engine_destroy(wsgw_engine *e)
{
    if (!e)
        return;
    if (e->flows && e->flow_used) {
        for (uint32_t s = 0; s < e->conf.max_flows; s++)
            if (e->flow_used[s])
                free(e->flows[s].ring);
    }
#ifdef WSGW_HAVE_DPDK
    if (e->txq_n)
        rte_pktmbuf_free_bulk(e->txq, e->txq_n);
#endif
    for (uint32_t i = 0; i < e->spare_count; i++)
        free(e->spare_ring[i]);
    free(e->flows); free(e->flow_used); free(e->table); free(e->table_keys);
    free(e->slow); free(e->slow_off); free(e->slow_len); free(e->touched);
    free(e->inj); free(e->inj_off); free(e->inj_len);
    free(e->cap); free(e->cap_off); free(e->cap_len);
    free(e->feeds); free(e->fed_since_sync);
    if (e->wake_fd > 0)
        close(e->wake_fd);
    free(e);
}

WSGW_API int wsgw_engine_set_fast_path(wsgw_engine *e, int enabled)
{
    e->conf.fast_path = enabled ? 1 : 0;
    return 0;
}

WSGW_API int wsgw_engine_set_sleep(wsgw_engine *e, uint32_t idle_polls, uint32_t min_ns,
                                   uint32_t max_ns)
{
    e->conf.idle_polls_before_sleep = idle_polls;
    e->conf.sleep_min_ns = min_ns;
    e->conf.sleep_max_ns = max_ns;
    e->backoff_ns = min_ns;
    return 0;
}

WSGW_API void wsgw_engine_wake(wsgw_engine *e)
{
    __atomic_store_n(&e->wake, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    if (e->wake_fd >= 0 && write(e->wake_fd, &one, sizeof(one)) < 0) {
        /* EAGAIN: the counter is already non-zero, the sleeper will see it */
    }
}

WSGW_API void wsgw_engine_set_extra_fd(wsgw_engine *e, int fd) { e->extra_fd = fd; }
WSGW_API void wsgw_engine_set_rx_fd(wsgw_engine *e, int fd) { e->rx_fd = fd; }

WSGW_API void wsgw_engine_expect_rx(wsgw_engine *e, uint64_t spin_ns)
{
    e->idle_polls = 0;
    e->backoff_ns = e->conf.sleep_min_ns;
    uint64_t until = engine_now(e) + spin_ns;
    if (until > e->spin_until_ns)
        e->spin_until_ns = until;
}

/* Wait up to nap_ns (0: just look) for a wake(), the extra fd or a frame on the RX fd; the
 * eventfd is drained, the others are left as they are (their owners read them). Returns 1
 * when the extra fd is readable. */
static int wait_fds(struct wsgw_engine *e, uint64_t nap_ns)
{
    struct timespec ts = {(time_t)(nap_ns / 1000000000ull), (long)(nap_ns % 1000000000ull)};
    struct pollfd pfd[3];
    nfds_t n = 0;
    if (e->wake_fd >= 0)
        pfd[n++] = (struct pollfd){.fd = e->wake_fd, .events = POLLIN, .revents = 0};
    if (e->extra_fd >= 0)
        pfd[n++] = (struct pollfd){.fd = e->extra_fd, .events = POLLIN, .revents = 0};
    if (e->rx_fd >= 0)
        pfd[n++] = (struct pollfd){.fd = e->rx_fd, .events = POLLIN, .revents = 0};
    if (n == 0) {
        if (nap_ns)
            nanosleep(&ts, NULL);
        return 0;
    }
    if (ppoll(pfd, n, &ts, NULL) <= 0)
        return 0;
    int extra = 0;
    for (nfds_t i = 0; i < n; i++) {
        if (!pfd[i].revents)
            continue;
        if (pfd[i].fd == e->wake_fd) {
            uint64_t drained;
            if (read(e->wake_fd, &drained, sizeof(drained)) < 0) {
                /* another reader drained it: fine */
            }
        } else if (pfd[i].fd == e->rx_fd) {
            if (nap_ns)
                e->st.rx_wakes++; /* the next rx_burst takes the frame */
        } else {
            extra = 1;
        }
    }
    return extra;
}

WSGW_API const uint8_t *wsgw_engine_slow_arena(const wsgw_engine *e) { return e->slow; }
WSGW_API const uint32_t *wsgw_engine_slow_offsets(const wsgw_engine *e) { return e->slow_off; }
WSGW_API const uint16_t *wsgw_engine_slow_lengths(const wsgw_engine *e) { return e->slow_len; }
WSGW_API const uint32_t *wsgw_engine_touched(const wsgw_engine *e) { return e->touched; }

WSGW_API void wsgw_engine_stats(const wsgw_engine *e, struct wsgw_engine_stats *out)
{
    *out = e->st;
}

/* ---- injection and capture (no port) ---------------------------------------------------- */

WSGW_API int wsgw_engine_inject(wsgw_engine *e, const uint8_t *buf, const uint32_t *offsets,
                                const uint16_t *lengths, uint32_t n)
{
    if (e->inj_read == e->inj_count) { /* all consumed: start over */
        e->inj_read = e->inj_count = e->inj_used = 0;
    }
    uint32_t taken = 0;
    for (; taken < n; taken++) {
        uint16_t len = lengths[taken];
        if (e->inj_count == INJECT_FRAMES || e->inj_used + len > (uint32_t)INJECT_FRAMES * FRAME_MAX)
            break;
        memcpy(e->inj + e->inj_used, buf + offsets[taken], len);
        e->inj_off[e->inj_count] = e->inj_used;
        e->inj_len[e->inj_count] = len;
        e->inj_used += len;
        e->inj_count++;
    }
    return (int)taken;
}

WSGW_API uint32_t wsgw_engine_take_tx(wsgw_engine *e, uint8_t *buf, uint32_t buf_len,
                                      uint32_t *offsets, uint16_t *lengths, uint32_t max)
{
    uint32_t n = 0, used = 0;
    for (; n < e->cap_count && n < max; n++) {
        uint16_t len = e->cap_len[n];
        if (used + len > buf_len)
            break;
        memcpy(buf + used, e->cap + e->cap_off[n], len);
        offsets[n] = used;
        lengths[n] = len;
        used += len;
    }
    /* keep what did not fit, in order */
    uint32_t rest = e->cap_count - n;
    if (rest) {
        uint32_t base = e->cap_off[n];
        memmove(e->cap, e->cap + base, e->cap_used - base);
        for (uint32_t i = 0; i < rest; i++) {
            e->cap_off[i] = e->cap_off[n + i] - base;
            e->cap_len[i] = e->cap_len[n + i];
        }
        e->cap_used -= base;
    } else {
        e->cap_used = 0;
    }
    e->cap_count = rest;
    return n;
}

/* ---- ACKs --------------------------------------------------------------------------------- */

static inline uint32_t ts_now(const struct wsgw_engine *e, const struct wsgw_flow *f, uint64_t now)
{
    return (uint32_t)(now / (1000000000ull / e->conf.ts_hz)) + f->ts_offset;
}

/* The window field, mirroring the Python connection's _advertise_window: never shrink the
 * right edge (RFC 7323 section 2.4), receiver SWS avoidance (RFC 9293 3.8.6.2.2), never
 * truncate to 16 bits. */
static uint16_t advertise_window(struct wsgw_flow *f)
{
    uint32_t shift = f->rcv_wscale;
    int32_t cur = seq_diff(f->rcv_adv_right, f->rcv_nxt);
    uint32_t current = cur > 0 ? (uint32_t)cur : 0;
    uint32_t space = f->rcv_space > f->delivered_since_sync ? f->rcv_space - f->delivered_since_sync : 0;
    uint32_t ring_free = f->ring_size - (f->ring_head - f->ring_tail);
    if (space > ring_free)
        space = ring_free;
    uint32_t largest = 65535u << shift;
    if (space > largest)
        space = largest;
    uint32_t sws = f->mss;
    if (current < space && space < current + sws)
        space = current;
    if (space < current)
        space = current;
    uint32_t field = space >> shift;
    if ((field << shift) < current)
        field++;
    if (field > 65535)
        field = 65535;
    uint32_t right = f->rcv_nxt + (field << shift);
    if (seq_diff(right, f->rcv_adv_right) > 0)
        f->rcv_adv_right = right;
    return (uint16_t)field;
}

static uint8_t *tx_slot(struct wsgw_engine *e, uint16_t len, void **handle)
{
    *handle = NULL;
#ifdef WSGW_HAVE_DPDK
    if (e->port) {
        if (e->txq_n == ENGINE_BURST_MAX)
            return NULL;
        struct rte_mbuf *m = rte_pktmbuf_alloc(e->port->pool);
        if (unlikely(!m))
            return NULL;
        uint8_t *dst = (uint8_t *)rte_pktmbuf_append(m, len);
        if (unlikely(!dst)) { /* longer than the mbuf's data room */
            rte_pktmbuf_free(m);
            return NULL;
        }
        e->txq[e->txq_n++] = m;
        *handle = m;
        return dst;
    }
#endif
    if (e->cap_count == CAPTURE_FRAMES || e->cap_used + len > (uint32_t)CAPTURE_FRAMES * 128)
        return NULL;
    uint8_t *dst = e->cap + e->cap_used;
    e->cap_off[e->cap_count] = e->cap_used;
    e->cap_len[e->cap_count] = len;
    e->cap_used += len;
    e->cap_count++;
    return dst;
}

static void tx_flush(struct wsgw_engine *e)
{
#ifdef WSGW_HAVE_DPDK
    if (e->port && e->txq_n) {
        uint16_t sent = rte_eth_tx_burst(e->port->port_id, 0, e->txq, e->txq_n);
        if (unlikely(sent < e->txq_n)) {
            e->st.tx_dropped += (uint64_t)(e->txq_n - sent);
            rte_pktmbuf_free_bulk(&e->txq[sent], e->txq_n - sent);
        }
        e->txq_n = 0;
    }
#else
    (void)e;
#endif
}

WSGW_API void wsgw_engine_tx_flush(wsgw_engine *e) { tx_flush(e); }

WSGW_API void wsgw_engine_set_tx_hold(wsgw_engine *e, int hold) { e->tx_hold = hold ? 1 : 0; }

/* TCP checksum (RFC 9293 section 3.1) over the pseudo-header and tcp_len bytes at tcp. */
static void tcp_checksum(uint8_t *ip, uint8_t *tcp, uint32_t tcp_len)
{
    wr16(tcp + 16, 0);
    uint8_t pseudo[12];
    memcpy(pseudo, ip + 12, 8);
    pseudo[8] = 0;
    pseudo[9] = 6;
    wr16(pseudo + 10, (uint16_t)tcp_len);
    uint32_t sum = wsgw_csum_partial(pseudo, sizeof(pseudo), 0);
    sum = wsgw_csum_partial(tcp, tcp_len, sum);
    uint16_t csum = wsgw_csum_fold(sum);
    memcpy(tcp + 16, &csum, 2); /* native-order sum: stored as is */
}

/* seq, ack, window and timestamps of a segment from the flow's template; the segment
 * carries the current ACK, so whatever ACK was owed is settled. */
static void fill_ack_fields(struct wsgw_engine *e, struct wsgw_flow *f, uint8_t *tcp,
                            uint32_t tcp_hdr_len, uint64_t now)
{
    wr32(tcp + 4, f->snd_nxt);
    wr32(tcp + 8, f->rcv_nxt);
    wr16(tcp + 14, advertise_window(f));
    if (f->ts_enabled && tcp_hdr_len >= TCP_HDR + 12) {
        wr32(tcp + 24, ts_now(e, f, now));
        wr32(tcp + 28, f->ts_recent);
    }
    f->last_ack_sent = f->rcv_nxt;
    f->unacked_bytes = 0;
    f->unacked_segments = 0;
    if (f->ack_deadline_ns) {
        f->ack_deadline_ns = 0;
        e->pending_acks--;
    }
}

static void send_ack(struct wsgw_engine *e, struct wsgw_flow *f, uint64_t now)
{
    void *handle;
    uint8_t *p = tx_slot(e, f->ack_len, &handle);
    if (unlikely(!p))
        return; /* no buffer: the delayed-ACK timer or the next segment retries */
    memcpy(p, f->ack_template, f->ack_len);
    uint8_t *ip = p + ETH_HDR;
    uint8_t *tcp = ip + IP_HDR;
    uint32_t tcp_len = (uint32_t)f->ack_len - ETH_HDR - IP_HDR;
    fill_ack_fields(e, f, tcp, tcp_len, now);
    tcp_checksum(ip, tcp, tcp_len);
    f->acks_sent++;
    e->st.acks_sent++;
}

WSGW_API int64_t wsgw_engine_flow_send(wsgw_engine *e, int slot, const uint8_t *payload,
                                       uint32_t len, uint32_t rcv_space)
{
    struct wsgw_flow *f = wsgw_engine_flow(e, slot);
    if (!f || !f->active || !f->ack_len || !e->conf.fast_path)
        return -ENOENT;
    if (e->tx_hold)
        return -EAGAIN; /* it would overtake Python's frames still waiting for the port */
    f->rcv_space = rcv_space; /* Python's free buffer now (nothing arrives between polls) */
    uint32_t frame_len = (uint32_t)f->ack_len + len;
    if (len == 0 || frame_len > FRAME_MAX)
        return -EMSGSIZE;
    void *handle;
    uint8_t *p = tx_slot(e, (uint16_t)frame_len, &handle);
    if (unlikely(!p))
        return -ENOBUFS;
    uint64_t now = engine_now(e);
    memcpy(p, f->ack_template, f->ack_len);
    memcpy(p + f->ack_len, payload, len);
    uint8_t *ip = p + ETH_HDR;
    uint8_t *tcp = ip + IP_HDR;
    uint32_t tcp_hdr_len = (uint32_t)f->ack_len - ETH_HDR - IP_HDR;
    /* IPv4 total length changed: redo the header checksum (RFC 791). */
    wr16(ip + 2, (uint16_t)(frame_len - ETH_HDR));
    wr16(ip + 10, 0);
    uint16_t ip_sum = wsgw_csum_fold(wsgw_csum_partial(ip, IP_HDR, 0));
    memcpy(ip + 10, &ip_sum, 2);
    tcp[13] = TCP_ACK | TCP_PSH;
    fill_ack_fields(e, f, tcp, tcp_hdr_len, now);
    tcp_checksum(ip, tcp, tcp_hdr_len + len);
    f->snd_nxt += len;
    f->tx_segments++;
    f->tx_bytes += len;
    e->st.tx_data_segments++;
    e->st.tx_data_bytes += len;
#ifdef WSGW_HAVE_DPDK
    /* The first segment since the last flush leaves at once: the caller's answer to what
     * it received is on the wire while the rest of its turn runs. Segments written after
     * it in the same turn wait for the next poll (or tx_flush) and leave in one burst. */
    if (e->port && e->txq_n == 1)
        tx_flush(e);
#endif
    wsgw_engine_expect_rx(e, e->conf.spin_after_tx_ns);
    return (int64_t)f->rcv_adv_right;
}

/* Send every ACK that is due (deadline passed); returns the earliest future deadline. */
static uint64_t run_ack_timers(struct wsgw_engine *e, uint64_t now)
{
    uint64_t next = 0;
    if (!e->pending_acks)
        return 0;
    for (uint32_t s = 0; s < e->conf.max_flows; s++) {
        struct wsgw_flow *f = &e->flows[s];
        if (!e->flow_used[s] || !f->ack_deadline_ns)
            continue;
        if (!f->active) {
            /* Python took the flow back: the ACK decision is its own now. */
            f->ack_deadline_ns = 0;
            e->pending_acks--;
            continue;
        }
        if (f->ack_deadline_ns <= now)
            send_ack(e, f, now);
        else if (!next || f->ack_deadline_ns < next)
            next = f->ack_deadline_ns;
    }
    return next;
}

static inline void ack_due(struct wsgw_engine *e, struct wsgw_flow *f, uint64_t when)
{
    if (!f->ack_deadline_ns) {
        f->ack_deadline_ns = when;
        e->pending_acks++;
    } else if (when < f->ack_deadline_ns) {
        f->ack_deadline_ns = when;
    }
}

/* ---- the fast path ------------------------------------------------------------------------ */

static inline void touch(struct wsgw_engine *e, struct wsgw_flow *f, uint32_t slot)
{
    if (!f->touched) {
        f->touched = 1;
        e->touched[e->touched_count++] = slot;
    }
}

/* 1: the fast path took the frame; 0: it belongs to the slow path. */
static int fast_path(struct wsgw_engine *e, const uint8_t *frame, uint32_t len, uint64_t now)
{
    if (unlikely(len < ETH_HDR + IP_HDR + TCP_HDR))
        return 0;
    if (rd16(frame + 12) != 0x0800) {
        e->st.not_ipv4++;
        return 0;
    }
    const uint8_t *ip = frame + ETH_HDR;
    uint32_t dst_be;
    memcpy(&dst_be, ip + 16, 4);
    if (ip[0] != 0x45 || ip[9] != 6 || (rd16(ip + 6) & 0x3fff) != 0 || dst_be != e->local_ip_be)
        return 0;
    uint32_t total = rd16(ip + 2);
    if (unlikely(total < IP_HDR + TCP_HDR || ETH_HDR + total > len))
        return 0;
    const uint8_t *tcp = ip + IP_HDR;
    uint32_t hl = (uint32_t)(tcp[12] >> 4) * 4;
    uint8_t flags = tcp[13];
    if (hl < TCP_HDR || IP_HDR + hl > total || (flags & ~(TCP_ACK | TCP_PSH)) || !(flags & TCP_ACK))
        return 0;
    int slot = table_find(e, flow_key(rd32(ip + 12), rd16(tcp), rd16(tcp + 2)));
    if (slot < 0)
        return 0;
    struct wsgw_flow *f = &e->flows[slot];
    if (!f->active || f->slow_pending)
        return 0;
    uint32_t plen = total - IP_HDR - hl;
    uint32_t seq = rd32(tcp + 4);
    uint32_t ack = rd32(tcp + 8);
    uint16_t wnd = rd16(tcp + 14);
    if (seq != f->rcv_nxt)
        return 0;
    /* 1: the segment moves the send side (snd_una, or the window of a data segment). */
    int send_moved = 0;
    if (ack == f->snd_una && wnd == f->snd_wnd_field) {
        if (plen == 0)
            return 0; /* a duplicate ACK or a keep-alive: Python counts and decides */
    } else {
        /* RFC 9293 section 3.10.7.4: SND.UNA =< SEG.ACK =< SND.NXT, a window that is not
         * zero (the persist timer is Python's), and Python allowed it. An ACK that only
         * changes the window moves nothing Python must act on at once, but it comes with
         * data (a pure window update stays Python's). */
        if (!(f->active & WSGW_FLOW_ACKS) || seq_diff(ack, f->snd_una) < 0 ||
            seq_diff(ack, f->snd_nxt) > 0 || wnd == 0 || (plen == 0 && ack == f->snd_una))
            return 0;
        send_moved = 1;
    }
    uint32_t tsval = 0;
    if (f->ts_enabled) {
        /* RFC 7323 section 3.2: once negotiated, every segment carries the option. */
        if (hl != TCP_HDR + 12 || rd32(tcp + 20) != TS_OPT_WORD)
            return 0;
        tsval = rd32(tcp + 24);
        if (seq_diff(tsval, f->ts_recent) < 0)
            return 0; /* PAWS (RFC 7323 section 5.3): Python decides */
    } else if (hl != TCP_HDR) {
        return 0;
    }
    if (seq_diff(f->rcv_adv_right, seq + plen) < 0)
        return 0; /* beyond the window we offered */
    if (f->ring_size - (f->ring_head - f->ring_tail) < plen)
        return 0;
    if (e->conf.verify_checksums) {
        if (wsgw_csum_fold(wsgw_csum_partial(ip, IP_HDR, 0)) != 0) {
            e->st.bad_ip_checksum++;
            return 0; /* the slow path counts and drops it */
        }
        uint8_t pseudo[12];
        memcpy(pseudo, ip + 12, 8);
        pseudo[8] = 0;
        pseudo[9] = 6;
        wr16(pseudo + 10, (uint16_t)(total - IP_HDR));
        uint32_t sum = wsgw_csum_partial(pseudo, sizeof(pseudo), 0);
        if (wsgw_csum_fold(wsgw_csum_partial(tcp, total - IP_HDR, sum)) != 0) {
            e->st.bad_tcp_checksum++;
            return 0;
        }
    }
    /* Commit: the bytes are in order and ours. */
    /* RFC 7323 section 4.3: TS.Recent from a segment at or before Last.ACK.sent. */
    if (f->ts_enabled && seq_diff(seq, f->last_ack_sent) <= 0)
        f->ts_recent = tsval;
    if (send_moved) {
        /* RFC 9293 section 3.10.7.4: this segment is newer than the one that set the
         * window (SEG.SEQ = RCV.NXT >= SND.WL1, SEG.ACK >= SND.UNA >= SND.WL2). */
        if (ack != f->snd_una && f->ts_enabled)
            f->ack_tsecr = rd32(tcp + 28); /* RFC 7323 section 4.1: the ACK's own echo */
        f->snd_una = ack;
        f->snd_wnd_field = wnd;
        f->snd_wl1 = seq;
        f->acks_advanced++;
        e->st.fast_acks++;
        touch(e, f, (uint32_t)slot);
        if (plen == 0) {
            f->pure_acks++;
            return 1;
        }
    }
    const uint8_t *payload = tcp + hl;
    uint32_t pos = f->ring_head & (f->ring_size - 1);
    uint32_t first = f->ring_size - pos < plen ? f->ring_size - pos : plen;
    memcpy(f->ring + pos, payload, first);
    memcpy(f->ring, payload + first, plen - first);
    f->ring_head += plen;
    if (!f->delivered_since_sync)
        f->first_rx_ns = now;
    if (!e->first_data_ns)
        e->first_data_ns = now;
    f->rcv_nxt = seq + plen;
    f->delivered_since_sync += plen;
    f->unacked_bytes += plen;
    f->unacked_segments++;
    f->fast_segments++;
    f->fast_bytes += plen;
    e->st.fast_segments++;
    e->st.fast_bytes += plen;
    touch(e, f, (uint32_t)slot);
    switch (f->ack_policy) {
    case WSGW_ACK_IMMEDIATE:
        ack_due(e, f, 1);
        break;
    case WSGW_ACK_EVERY_SECOND:
        ack_due(e, f, f->unacked_segments >= 2 ? 1 : now + e->conf.delayed_ack_ns);
        break;
    default: /* RFC 5681 section 4.2: at least every second full-sized segment */
        ack_due(e, f, f->unacked_bytes >= 2 * f->mss ? 1 : now + e->conf.delayed_ack_ns);
        break;
    }
    return 1;
}

/* The flow slot of an IPv4 TCP frame (its ports within the frame), -1 for anything else;
 * *ip_out (if given) its IP header. The slow path's own frames are not checked further. */
static int frame_flow(const struct wsgw_engine *e, const uint8_t *frame, uint32_t len,
                      const uint8_t **ip_out)
{
    if (len < ETH_HDR + IP_HDR + TCP_HDR || rd16(frame + 12) != 0x0800 ||
        frame[ETH_HDR + 9] != 6 || (frame[ETH_HDR] & 0x0f) < 5)
        return -1;
    const uint8_t *ip = frame + ETH_HDR;
    const uint8_t *tcp = ip + (ip[0] & 0x0f) * 4;
    if (tcp + 4 > frame + len)
        return -1;
    if (ip_out)
        *ip_out = ip;
    return table_find(e, flow_key(rd32(ip + 12), rd16(tcp), rd16(tcp + 2)));
}

static void to_slow_path(struct wsgw_engine *e, const uint8_t *frame, uint32_t len)
{
    if (unlikely(e->slow_count == e->conf.slow_max_frames ||
                 e->slow_used + len > e->conf.slow_arena_bytes)) {
        e->st.dropped_slow_full++;
        return;
    }
    memcpy(e->slow + e->slow_used, frame, len);
    e->slow_off[e->slow_count] = e->slow_used;
    e->slow_len[e->slow_count] = (uint16_t)len;
    e->slow_used += len;
    e->slow_count++;
    e->st.slow_frames++;
    /* Hold the rest of this flow's segments back for Python, to keep them in order. */
    int slot = frame_flow(e, frame, len, NULL);
    if (slot >= 0) {
        if (e->feeds[slot])
            wsgw_feed_stop(e->feeds[slot]); /* Python handles this flow now */
        e->flows[slot].slow_pending = 1;
        e->flows[slot].slow_segments++;
        touch(e, &e->flows[slot], (uint32_t)slot);
    }
}

static inline void process(struct wsgw_engine *e, const uint8_t *frame, uint32_t len, uint64_t now)
{
    if (!e->conf.fast_path || !fast_path(e, frame, len, now))
        to_slow_path(e, frame, len);
}

/* One RX burst; returns the number of frames received. */
static uint32_t rx_burst(struct wsgw_engine *e, uint64_t now)
{
    uint32_t n = 0;
#ifdef WSGW_HAVE_DPDK
    if (e->port) {
        struct rte_mbuf *pkts[ENGINE_BURST_MAX];
        n = rte_eth_rx_burst(e->port->port_id, 0, pkts, e->conf.burst);
        for (uint32_t i = 0; i < n; i++) {
            struct rte_mbuf *m = pkts[i];
            if (i + 1 < n)
                rte_prefetch0(rte_pktmbuf_mtod(pkts[i + 1], void *));
            uint32_t len = rte_pktmbuf_pkt_len(m);
            if (likely(m->nb_segs == 1)) {
                process(e, rte_pktmbuf_mtod(m, const uint8_t *), len, now);
            } else if (len <= FRAME_MAX) {
                uint8_t tmp[FRAME_MAX];
                const uint8_t *data = rte_pktmbuf_read(m, 0, len, tmp);
                to_slow_path(e, data, len);
            } else {
                e->st.dropped_slow_full++;
            }
        }
        if (n)
            rte_pktmbuf_free_bulk(pkts, n);
        return n;
    }
#endif
    while (n < e->conf.burst && e->inj_read < e->inj_count) {
        uint32_t i = e->inj_read++;
        process(e, e->inj + e->inj_off[i], e->inj_len[i], now);
        n++;
    }
    return n;
}

/* The flows the last poll touched are no longer reported (Python has synced them). */
static void clear_touched(struct wsgw_engine *e)
{
    for (uint32_t i = 0; i < e->touched_count; i++)
        e->flows[e->touched[i]].touched = 0;
    e->touched_count = 0;
}

/* Arm requests of every feed (Python's, from any thread), against its flow's position. */
static void feed_requests(struct wsgw_engine *e)
{
    for (uint32_t s = 0; s < e->conf.max_flows; s++) {
        struct wsgw_feed *feed = e->feeds[s];
        if (feed && !e->flows[s].slow_pending)
            wsgw_feed_requests(feed, &e->flows[s]);
    }
}

/* The feeds of the flows this poll touched take what they can from their rings (finish:
 * the poll returns, an incomplete frame goes to Python). Bytes a feed took are read: they
 * no longer count against the window Python's buffer offers. */
static void run_feeds(struct wsgw_engine *e, uint64_t rx_ns, int finish)
{
    uint64_t now = engine_now(e);
    wsgw_sink_burst_begin(); /* the NATS PUBs of this burst's records: one send (sink.c) */
    for (uint32_t i = 0; i < e->touched_count; i++) {
        uint32_t slot = e->touched[i];
        struct wsgw_feed *feed = e->feeds[slot];
        if (!feed)
            continue;
        struct wsgw_flow *f = &e->flows[slot];
        if (f->slow_pending) {
            wsgw_feed_stop(feed); /* Python takes this flow's segments in this batch */
            continue;
        }
        wsgw_feed_requests(feed, f);
        if (f->ring_head == f->ring_tail)
            continue;
        uint32_t taken = finish ? wsgw_feed_finish(feed, f, rx_ns, now)
                                : wsgw_feed_run(feed, f, rx_ns, now);
        if (taken) {
            e->fed_since_sync[slot] += taken;
            f->delivered_since_sync =
                f->delivered_since_sync > taken ? f->delivered_since_sync - taken : 0;
        }
    }
    wsgw_sink_burst_end();
}

/* 1: a touched flow has something for Python (bytes, slow-path segments, ACKs C took); a
 * flow whose feed took every byte has not, nor one whose armed feed waits for the rest of
 * an incomplete frame (the poll goes on; if it returns first, the frame goes to Python). */
static int touched_for_python(const struct wsgw_engine *e)
{
    if (!e->feed_count)
        return e->touched_count != 0;
    for (uint32_t i = 0; i < e->touched_count; i++) {
        uint32_t slot = e->touched[i];
        const struct wsgw_flow *f = &e->flows[slot];
        const struct wsgw_feed *feed = e->feeds[slot];
        if (!feed || f->slow_pending || f->acks_advanced)
            return 1;
        if (f->ring_head != f->ring_tail && !wsgw_feed_armed(feed))
            return 1;
    }
    return 0;
}

WSGW_API int wsgw_engine_poll(wsgw_engine *e, uint64_t deadline_ns, uint64_t budget_ns,
                              struct wsgw_poll_result *out)
{
    /* The previous poll's results have been consumed by Python. */
    clear_touched(e);
    e->slow_count = 0;
    e->slow_used = 0;
    e->first_data_ns = 0;
    e->st.polls++;
    tx_flush(e); /* segments Python had C build since the last poll leave first */
    if (e->feed_count)
        feed_requests(e);
    uint64_t start = engine_now(e), now = start;
    uint32_t reason = 0;
    uint64_t rx_total = 0;
    uint64_t bytes_at_start = e->st.fast_bytes;
    int extra_ready = 0;
    uint64_t first_rx = 0;
    for (;;) {
        uint64_t fast_before = e->st.fast_bytes;
        uint32_t n = rx_burst(e, now);
        rx_total += n;
        if (n && e->feed_count) {
            /* The ring records' receive stamp: read after the burst came, so a thread
             * descheduled between the last clock read and the burst (a busy poller sharing
             * its CPU) never stamps a message before it was sent. */
            run_feeds(e, engine_now(e), 0);
        }
        if (e->st.fast_bytes != fast_before) {
            uint64_t took = engine_now(e) - now;
            e->st.rx_to_ring_bursts++;
            e->st.rx_to_ring_ns_sum += took;
            if (took > e->st.rx_to_ring_ns_max)
                e->st.rx_to_ring_ns_max = took;
        }
        if (n) {
            if (!first_rx)
                first_rx = now;
            e->st.rx_frames += n;
            e->st.rx_bursts++;
            e->idle_polls = 0;
            e->backoff_ns = e->conf.sleep_min_ns;
        } else {
            e->st.empty_polls++;
            e->idle_polls++;
        }
        /* ACKs due now (policy "at once", every second segment) and timers that fired. */
        uint64_t next_ack = run_ack_timers(e, now);
        tx_flush(e);
        if (e->slow_count)
            reason |= WSGW_POLL_SLOW;
        /* Data: hand it over once the RX queue is drained or enough has gathered, so
         * Python's per-batch cost is spread over many segments at full rate. */
        now = engine_now(e);
        if (touched_for_python(e) &&
            (n < e->conf.burst || e->st.fast_bytes - bytes_at_start >= DATA_BATCH ||
             now - e->first_data_ns >= DATA_DELAY_NS))
            reason |= WSGW_POLL_DATA;
        if (!e->port && e->cap_count > CAPTURE_FRAMES / 2)
            reason |= WSGW_POLL_TX_FULL;
        if (__atomic_exchange_n(&e->wake, 0, __ATOMIC_ACQ_REL))
            reason |= WSGW_POLL_COMMAND;
        now = engine_now(e);
        if (deadline_ns && now >= deadline_ns)
            reason |= WSGW_POLL_TIMER;
        if (now - start >= budget_ns)
            reason |= WSGW_POLL_BUDGET;
        if (extra_ready)
            reason |= WSGW_POLL_EXTERNAL;
        if (reason) {
            if (e->feed_count)
                run_feeds(e, now, 1);
            /* Timers that came due while this iteration ran still fire before returning. */
            run_ack_timers(e, now);
            tx_flush(e);
            break;
        }
        if (n == 0 && e->conf.sleep_max_ns && !e->manual_now &&
            e->idle_polls > e->conf.idle_polls_before_sleep && now >= e->spin_until_ns) {
            /* Adaptive polling: sleep, doubling up to the ceiling, never past a deadline. */
            uint64_t nap = e->backoff_ns;
            uint64_t limit = budget_ns - (now - start);
            if (deadline_ns && deadline_ns - now < limit)
                limit = deadline_ns - now;
            if (next_ack && next_ack > now && next_ack - now < limit)
                limit = next_ack - now;
            if (nap > limit)
                nap = limit;
            if (nap) {
                /* Sleep on the eventfd (another thread's wake() ends the nap at once) and
                 * on the extra fd (the event loop has work). */
                extra_ready = wait_fds(e, nap);
                e->st.sleeps++;
                e->st.sleep_ns += nap;
                now = engine_now(e);
            }
            uint64_t doubled = e->backoff_ns * 2;
            e->backoff_ns = doubled > e->conf.sleep_max_ns ? e->conf.sleep_max_ns : doubled;
        } else if (n == 0 && e->extra_fd >= 0 && !e->manual_now &&
                   (e->idle_polls & (EXTRA_FD_CHECK_POLLS - 1)) == 0) {
            /* Busy polling never sleeps: look at the extra fd every few empty polls. */
            extra_ready = wait_fds(e, 0);
        }
    }
    out->reason = reason;
    out->slow_frames = e->slow_count;
    out->touched = e->touched_count;
    out->tx_captured = e->cap_count;
    out->now_ns = now;
    out->rx_frames = rx_total;
    out->first_rx_ns = first_rx;
    return 0;
}

/* Benchmark entry points: in the library only when built for benchmarks (setup.py's
 * WSGW_BENCH: the in-place build of a checkout, `make shim`; never the wheel's). */
#ifdef WSGW_BENCH
/* ---- microbenchmarks ---------------------------------------------------------------------- */

WSGW_API uint64_t wsgw_bench_flow_lookup(wsgw_engine *e, uint32_t iterations)
{
    uint64_t keys[64];
    uint32_t nkeys = 0;
    for (uint32_t s = 0; s < e->conf.max_flows && nkeys < 64; s++)
        if (e->flow_used[s])
            keys[nkeys++] = flow_key(e->flows[s].remote_ip, e->flows[s].remote_port,
                                     e->flows[s].local_port);
    if (!nkeys)
        return 0;
    volatile int sink = 0;
    uint64_t start = wsgw_monotonic_ns();
    for (uint32_t i = 0; i < iterations; i++)
        sink += table_find(e, keys[i % nkeys]);
    (void)sink;
    return wsgw_monotonic_ns() - start;
}

WSGW_API uint64_t wsgw_bench_fast_path(wsgw_engine *e, int slot, const uint8_t *buf,
                                       const uint32_t *offsets, const uint16_t *lengths,
                                       uint32_t n, uint32_t rounds)
{
    struct wsgw_flow *f = wsgw_engine_flow(e, slot);
    if (!f || !n)
        return 0;
    struct wsgw_flow saved = *f;
    uint64_t total = 0;
    for (uint32_t r = 0; r < rounds; r++) {
        uint8_t *ring = f->ring;
        *f = saved;
        f->ring = ring;
        e->cap_count = 0;
        e->cap_used = 0;
        uint64_t start = wsgw_monotonic_ns();
        for (uint32_t i = 0; i < n; i++) {
            if (!fast_path(e, buf + offsets[i], lengths[i], start))
                return 0; /* a frame left the fast path: the benchmark's frames are wrong */
            f->ring_tail = f->ring_head; /* the reader keeps up */
            if (f->ack_deadline_ns == 1)
                send_ack(e, f, start);
            if (e->cap_count == CAPTURE_FRAMES)
                e->cap_count = e->cap_used = 0;
        }
        total += wsgw_monotonic_ns() - start;
        clear_touched(e);
    }
    uint8_t *ring = f->ring;
    if (f->ack_deadline_ns)
        e->pending_acks--;
    *f = saved;
    f->ring = ring;
    e->cap_count = e->cap_used = 0;
    return total;
}

/* Whether every slow-path frame of flow `slot` repeats data it already has: the peer's
 * retransmission of its last answer (its TLP or RTO, when this thread was off the CPU longer
 * than that timer: the next request carries the ACK). Anything else is Python's to handle,
 * which the benchmark cannot; frames of other flows are not looked at. */
static int bench_only_stale(const struct wsgw_engine *e, const struct wsgw_flow *f, int slot)
{
    for (uint32_t i = 0; i < e->slow_count; i++) {
        const uint8_t *frame = e->slow + e->slow_off[i];
        uint32_t len = e->slow_len[i];
        const uint8_t *ip = NULL;
        if (frame_flow(e, frame, len, &ip) != slot)
            continue;
        uint32_t ihl = (uint32_t)(ip[0] & 0x0f) * 4;
        const uint8_t *tcp = ip + ihl;
        if (tcp + TCP_HDR > frame + len)
            return 0;
        uint32_t total = rd16(ip + 2), hl = (uint32_t)(tcp[12] >> 4) * 4;
        if (ETH_HDR + total > len || ihl + hl > total || (tcp[13] & ~(TCP_ACK | TCP_PSH)))
            return 0;
        uint32_t plen = total - ihl - hl;
        if (plen == 0 || seq_diff(rd32(tcp + 4) + plen, f->rcv_nxt) > 0)
            return 0;
    }
    return 1;
}

WSGW_API int64_t wsgw_bench_flow_echo(wsgw_engine *e, int slot, const uint8_t *frame,
                                      uint32_t frame_len, uint32_t reply_len, uint32_t rounds,
                                      uint64_t timeout_ns, uint64_t *rtt_ns, uint8_t *last_reply)
{
    struct wsgw_flow *f = wsgw_engine_flow(e, slot);
    if (!f || !f->active || !(f->active & WSGW_FLOW_ACKS) || !e->port || !reply_len)
        return -ENOENT;
    uint32_t rcv_space = f->rcv_space;
    for (uint32_t r = 0; r < rounds; r++) {
        uint64_t start = wsgw_monotonic_ns();
        int64_t rc = wsgw_engine_flow_send(e, slot, frame, frame_len, rcv_space);
        if (rc < 0)
            return rc;
        tx_flush(e);
        for (;;) {
            uint64_t now = wsgw_monotonic_ns();
            rx_burst(e, now);
            if (f->slow_pending) {
                if (!bench_only_stale(e, f, slot))
                    return -EPROTO; /* a segment of this flow left the fast path */
                f->slow_pending = 0; /* the copies are dropped with the others below */
            }
            if (e->slow_count) {
                /* Another flow's (a connection aborted earlier, an ARP): dropped, no
                 * Python runs here and the next poll would not report them anyway. */
                e->st.bench_dropped += e->slow_count;
                e->slow_count = 0;
                e->slow_used = 0;
            }
            if (f->ring_head - f->ring_tail >= reply_len)
                break;
            if (now - start > timeout_ns)
                return -ETIMEDOUT;
        }
        rtt_ns[r] = wsgw_monotonic_ns() - start;
        wsgw_engine_flow_read(e, slot, last_reply, reply_len);
        flow_synced(f, 1);
        if (f->ring_head != f->ring_tail)
            return -EPROTO; /* more than one reply came */
        clear_touched(e);
    }
    return rounds;
}

WSGW_API uint64_t wsgw_bench_checksum(const uint8_t *buf, uint32_t len, uint32_t iterations)
{
    volatile uint16_t sink = 0;
    uint64_t start = wsgw_monotonic_ns();
    for (uint32_t i = 0; i < iterations; i++)
        sink ^= wsgw_csum_fold(wsgw_csum_partial(buf, len, i));
    (void)sink;
    return wsgw_monotonic_ns() - start;
}

#endif /* WSGW_BENCH */
