/* The C feed path: flow bytes -> message ring records in the engine's poll (wsgw_feed.h). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "shim_internal.h"
#include "wsgw_engine.h"
#include "wsgw_feed.h"
#include "wsgw_ws.h"

#define TABLE_SLOTS (2u * WSGW_FEED_MAX_TOPICS) /* power of two, at most half full */
#define WRITE_BATCH 64u
#define TOMB 0xffffu

struct topic_slot {
    uint32_t topic_id;   /* 0: empty */
    uint16_t len;        /* TOMB with topic_id 0: deleted */
    uint16_t index;
    uint8_t name[WSGW_FEED_TOPIC_MAX];
};

struct wsgw_feed {
    struct wsgw_feed_conf conf;
    int armed;
    _Atomic uint32_t arm_seq;
    _Atomic uint32_t arm_req;
    _Atomic uint32_t armed_seen; /* a copy of armed for other threads */
    struct wsgw_feed_stats st;
    uint32_t topics, used_slots; /* live entries; live + deleted */
    uint64_t counts[WSGW_FEED_MAX_TOPICS];
    uint64_t samples[WSGW_FEED_SAMPLES];
    struct topic_slot table[TABLE_SLOTS];
    uint8_t *scratch; /* a frame that wraps around the flow's ring, made contiguous */
    struct wsgw_group *group; /* a feed group's leg: frames go through its arbiter */
    uint32_t leg;
    int group_gone; /* its group closed (replaced): Python carries this connection now */
};

static int group_frame(struct wsgw_group *g, uint32_t leg, const struct topic_slot *slot,
                       const uint8_t *payload, uint32_t len, uint64_t rx_rt);
static void group_burst_done(struct wsgw_group *g);
static int group_closed(struct wsgw_group *g);

static inline uint32_t hash_bytes(const uint8_t *p, uint32_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a: topics are short */
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static struct topic_slot *lookup(struct wsgw_feed *f, const uint8_t *name, uint32_t len)
{
    uint32_t i = hash_bytes(name, len) & (TABLE_SLOTS - 1);
    for (uint32_t probes = 0; probes < TABLE_SLOTS; probes++) {
        struct topic_slot *s = &f->table[i];
        if (s->topic_id == 0 && s->len != TOMB)
            return NULL;
        if (s->topic_id != 0 && s->len == len && memcmp(s->name, name, len) == 0)
            return s;
        i = (i + 1) & (TABLE_SLOTS - 1);
    }
    return NULL;
}

WSGW_API uint32_t wsgw_feed_conf_size(void) { return (uint32_t)sizeof(struct wsgw_feed_conf); }

WSGW_API int wsgw_feed_create(const struct wsgw_feed_conf *conf, wsgw_feed **out)
{
    *out = NULL;
    if (conf->ring == NULL || conf->max_payload == 0 || conf->spec.n_paths == 0) {
        wsgw_set_error("feed: a ring, a payload limit and a topic spec are needed");
        return -EINVAL;
    }
    int rc = wsgw_topic_spec_check(&conf->spec);
    if (rc < 0)
        return rc;
    struct wsgw_feed *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->conf = *conf;
    f->scratch = malloc(conf->max_payload);
    if (!f->scratch) {
        free(f);
        wsgw_set_error("feed: out of memory for a %u-byte frame buffer", conf->max_payload);
        return -ENOMEM;
    }
    wsgw_ring_writer_retain(conf->ring); /* a close by the hub never unmaps it under us */
    *out = f;
    return 0;
}

WSGW_API void wsgw_feed_destroy(wsgw_feed *f)
{
    if (!f)
        return;
    wsgw_ring_writer_release(f->conf.ring);
    if (f->group)
        wsgw_group_release(f->group);
    free(f->scratch);
    free(f);
}

static void table_rebuild(struct wsgw_feed *f)
{
    struct topic_slot *old = malloc(sizeof(f->table));
    if (!old)
        return; /* keep the tombstones: lookups stay right, only slower */
    memcpy(old, f->table, sizeof(f->table));
    memset(f->table, 0, sizeof(f->table));
    f->used_slots = 0;
    for (uint32_t k = 0; k < TABLE_SLOTS; k++) {
        if (!old[k].topic_id)
            continue;
        uint32_t i = hash_bytes(old[k].name, old[k].len) & (TABLE_SLOTS - 1);
        while (f->table[i].topic_id)
            i = (i + 1) & (TABLE_SLOTS - 1);
        f->table[i] = old[k];
        f->used_slots++;
    }
    free(old);
}

WSGW_API int wsgw_feed_topic_set(wsgw_feed *f, const uint8_t *name, uint32_t len,
                                 uint32_t topic_id, uint32_t index)
{
    if (len == 0 || len > WSGW_FEED_TOPIC_MAX) {
        wsgw_set_error("feed topics are 1..%u bytes, not %u", WSGW_FEED_TOPIC_MAX, len);
        return -ENAMETOOLONG;
    }
    if (index >= WSGW_FEED_MAX_TOPICS) {
        wsgw_set_error("feed topic index %u is not below %u", index, WSGW_FEED_MAX_TOPICS);
        return -EINVAL;
    }
    struct topic_slot *s = lookup(f, name, len);
    if (topic_id == 0) {
        if (s) {
            s->topic_id = 0;
            s->len = TOMB;
            f->topics--;
        }
        return 0;
    }
    if (s) {
        s->topic_id = topic_id;
        s->index = (uint16_t)index;
        return 0;
    }
    if (f->topics >= WSGW_FEED_MAX_TOPICS) {
        wsgw_set_error("the feed's topic table is full (%u topics)", WSGW_FEED_MAX_TOPICS);
        return -ENOSPC;
    }
    if (f->used_slots + 1 > TABLE_SLOTS / 2)
        table_rebuild(f);
    uint32_t i = hash_bytes(name, len) & (TABLE_SLOTS - 1);
    while (f->table[i].topic_id)
        i = (i + 1) & (TABLE_SLOTS - 1);
    s = &f->table[i];
    if (s->len != TOMB)
        f->used_slots++;
    memcpy(s->name, name, len);
    s->len = (uint16_t)len;
    s->index = (uint16_t)index;
    s->topic_id = topic_id;
    f->topics++;
    return 0;
}

static inline void set_armed(struct wsgw_feed *f, int armed)
{
    f->armed = armed;
    f->st.armed = (uint64_t)armed;
    atomic_store_explicit(&f->armed_seen, (uint32_t)armed, memory_order_relaxed);
}

WSGW_API void wsgw_feed_arm(wsgw_feed *f, uint32_t seq)
{
    atomic_store_explicit(&f->arm_seq, seq, memory_order_relaxed);
    atomic_store_explicit(&f->arm_req, 1, memory_order_release);
}

WSGW_API void wsgw_feed_disarm(wsgw_feed *f)
{
    atomic_store_explicit(&f->arm_req, 0, memory_order_relaxed);
    set_armed(f, 0);
}

void wsgw_feed_stop(wsgw_feed *f)
{
    if (f->armed) {
        set_armed(f, 0);
        f->st.stops++;
    }
}

void wsgw_feed_attached(wsgw_feed *f) { wsgw_feed_disarm(f); }

int wsgw_feed_armed(const wsgw_feed *f) { return f->armed; }

WSGW_API void wsgw_feed_stats(const wsgw_feed *f, struct wsgw_feed_stats *out)
{
    memcpy(out, &f->st, sizeof(*out)); /* counters: torn reads across threads are benign */
}

WSGW_API uint32_t wsgw_feed_topic_counts(const wsgw_feed *f, uint64_t *counts, uint32_t n)
{
    if (n > WSGW_FEED_MAX_TOPICS)
        n = WSGW_FEED_MAX_TOPICS;
    memcpy(counts, f->counts, n * sizeof(uint64_t));
    return n;
}

WSGW_API uint32_t wsgw_feed_samples(const wsgw_feed *f, uint64_t from, uint64_t *out,
                                    uint32_t max, uint64_t *next)
{
    uint64_t taken = __atomic_load_n(&f->st.samples, __ATOMIC_ACQUIRE);
    if (taken > from + WSGW_FEED_SAMPLES)
        from = taken - WSGW_FEED_SAMPLES;
    uint32_t n = 0;
    for (uint64_t k = from; k < taken && n < max; k++)
        out[n++] = f->samples[k % WSGW_FEED_SAMPLES];
    *next = from + n;
    return n;
}

/* ---- engine side ------------------------------------------------------------------------ */

static inline uint32_t unread_seq(const struct wsgw_flow *flow)
{
    return flow->rcv_nxt - (flow->ring_head - flow->ring_tail);
}

void wsgw_feed_requests(wsgw_feed *f, const struct wsgw_flow *flow)
{
    if (!atomic_load_explicit(&f->arm_req, memory_order_relaxed))
        return;
    if (!atomic_exchange_explicit(&f->arm_req, 0, memory_order_acquire))
        return;
    uint32_t seq = atomic_load_explicit(&f->arm_seq, memory_order_relaxed);
    if (f->armed)
        return;
    if (f->group_gone) { /* no arbiter to write through: every frame is Python's */
        f->st.arms_refused++;
        return;
    }
    if (seq == unread_seq(flow)) {
        set_armed(f, 1);
        f->st.arms++;
    } else {
        f->st.arms_refused++;
    }
}

static inline void ring_copy(const struct wsgw_flow *flow, uint32_t at, uint8_t *dst, uint32_t n)
{
    uint32_t pos = at & (flow->ring_size - 1);
    uint32_t first = flow->ring_size - pos < n ? flow->ring_size - pos : n;
    memcpy(dst, flow->ring + pos, first);
    memcpy(dst + first, flow->ring, n - first);
}

static inline uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct pending {
    struct wsgw_ring_msg msgs[WRITE_BATCH];
    uint32_t n;
    uint64_t rx_rt; /* the burst's RX time, CLOCK_REALTIME */
};

static void flush(struct wsgw_feed *f, struct pending *p)
{
    if (!p->n)
        return;
    int64_t rc = wsgw_ring_write_batch(f->conf.ring, p->msgs, p->n);
    if (rc < 0) {
        f->st.ring_errors += p->n;
    } else {
        uint64_t done = realtime_ns();
        f->samples[f->st.samples % WSGW_FEED_SAMPLES] = done > p->rx_rt ? done - p->rx_rt : 0;
        __atomic_store_n(&f->st.samples, f->st.samples + 1, __ATOMIC_RELEASE);
        f->st.writes++;
    }
    p->n = 0;
}

/* Why the run ended at a frame: it waits for more bytes (0), or Python takes over (1). */
static inline int stop_here(int partial, int wait_partial)
{
    return !(partial && wait_partial);
}

static uint32_t run(struct wsgw_feed *f, struct wsgw_flow *flow, uint64_t rx_mono_ns,
                    uint64_t now_mono_ns, int wait_partial)
{
    if (!f->armed)
        return 0;
    struct pending p;
    p.n = 0;
    p.rx_rt = 0;
    int scratch_busy = 0;
    uint32_t taken = 0;
    const uint32_t mask = flow->ring_size - 1;
    const uint32_t max_payload = f->conf.max_payload;
    /* A group's leg: the flow's bytes not yet offered are its unread input (the engine's
     * thread may be preempted mid-burst while another leg's offers give holes up). */
    if (f->group)
        wsgw_group_set_leg_busy(f->group, f->leg, 1);
    for (;;) {
        uint32_t avail = flow->ring_head - flow->ring_tail;
        if (avail == 0)
            break;
        uint8_t h[10];
        int partial = 0;
        uint32_t hlen = 2;
        uint64_t plen = 0;
        ring_copy(flow, flow->ring_tail, h, avail < 10 ? avail : 10);
        /* FIN + text, RSV clear (no permessage-deflate), unmasked: 0x81, MASK bit 0. */
        if (h[0] != 0x81)
            goto stop;
        if (avail < 2) {
            partial = 1;
            goto stop;
        }
        if (h[1] & 0x80u)
            goto stop;
        plen = h[1];
        if (plen == 126)
            hlen = 4;
        else if (plen == 127)
            hlen = 10;
        if (avail < hlen) {
            partial = 1;
            goto stop;
        }
        if (plen == 126) {
            plen = (uint64_t)h[2] << 8 | h[3];
        } else if (plen == 127) {
            plen = 0;
            for (int i = 0; i < 8; i++)
                plen = plen << 8 | h[2 + i];
        }
        if (plen > max_payload)
            goto stop;
        if (plen > avail - hlen) {
            partial = 1;
            goto stop;
        }
        uint32_t len = (uint32_t)plen;
        uint32_t pos = (flow->ring_tail + hlen) & mask;
        const uint8_t *payload;
        if (pos + len <= flow->ring_size) {
            payload = flow->ring + pos;
        } else {
            if (scratch_busy) {
                flush(f, &p); /* a pending record still points into the scratch buffer */
                scratch_busy = 0;
            }
            ring_copy(flow, flow->ring_tail + hlen, f->scratch, len);
            payload = f->scratch;
        }
        if (!wsgw_utf8_valid(payload, len))
            goto stop;
        struct wsgw_topic_span spans[WSGW_TOPIC_MAX_PATHS];
        int status = wsgw_topic_extract(&f->conf.spec, payload, len, spans);
        if (status < 0 || spans[0].kind != WSGW_JSON_STRING || spans[0].length == 0)
            goto stop;
        const struct topic_slot *slot =
            spans[0].length <= WSGW_FEED_TOPIC_MAX
                ? lookup(f, payload + spans[0].offset, spans[0].length)
                : NULL;
        if (!slot) {
            f->st.stop_unknown_topic++;
            goto stop;
        }
        if (!p.rx_rt) {
            uint64_t age = now_mono_ns > rx_mono_ns ? now_mono_ns - rx_mono_ns : 0;
            p.rx_rt = realtime_ns() - age;
        }
        if (f->group) { /* a group's leg: through the arbiter, written (or dropped) there */
            if (group_frame(f->group, f->leg, slot, payload, len, p.rx_rt) <= 0) {
                /* C cannot tell this one: Python offers it to the group. A closed group
                 * (replaced by a new form) takes nothing more: Python's until a reconnect
                 * joins the feed of the new connection to the new group. */
                f->group_gone = group_closed(f->group);
                goto stop;
            }
        } else {
            if (payload == f->scratch)
                scratch_busy = 1;
            p.msgs[p.n++] = (struct wsgw_ring_msg){.data = payload, .len = len,
                                                   .session_id = f->conf.session_id,
                                                   .topic_id = slot->topic_id,
                                                   .ts_ns = p.rx_rt};
        }
        /* taken, by the group or into the batch (a group's leg leaves p.n at 0) */
        f->counts[slot->index]++;
        f->st.messages++;
        f->st.bytes += len;
        f->st.last_message_ns = p.rx_rt;
        flow->ring_tail += hlen + len;
        taken += hlen + len;
        if (p.n == WRITE_BATCH) {
            flush(f, &p);
            scratch_busy = 0;
        }
        continue;
    stop:
        if (stop_here(partial, wait_partial))
            wsgw_feed_stop(f);
        break;
    }
    flush(f, &p);
    if (f->group) {
        wsgw_group_set_leg_busy(f->group, f->leg, 0);
        group_burst_done(f->group);
    }
    f->st.wire_bytes += taken;
    return taken;
}

uint32_t wsgw_feed_run(wsgw_feed *f, struct wsgw_flow *flow, uint64_t rx_mono_ns,
                       uint64_t now_mono_ns)
{
    return run(f, flow, rx_mono_ns, now_mono_ns, 1);
}

/* The poll is about to return: an incomplete frame left in the ring goes to Python. */
uint32_t wsgw_feed_finish(wsgw_feed *f, struct wsgw_flow *flow, uint64_t rx_mono_ns,
                          uint64_t now_mono_ns)
{
    uint32_t taken = run(f, flow, rx_mono_ns, now_mono_ns, 0);
    if (flow->ring_head != flow->ring_tail)
        wsgw_feed_stop(f);
    return taken;
}

/* ---- feed groups (wsgw_feed.h) ---------------------------------------------------------- */

#define GROUP_COST_EVERY 16
#define GROUP_COST_SAMPLES 1024
#define GROUP_GAP_BYTES 512

struct group_key {
    uint32_t used;
    uint32_t id_len;            /* the identity topic */
    char id_topic[WSGW_ID_TOPIC_MAX];
    uint32_t topic_id;          /* the ring topic of the group's records (the first frame's) */
    uint32_t name_len;          /* its topic name, for gap reasons */
    char name[WSGW_FEED_TOPIC_MAX];
    int has_floor, has_last;
    int64_t floor, last;
    uint32_t tap_topic[WSGW_ARB_MAX_LEGS]; /* ring topic of each leg's tap, 0: none yet */
};

struct wsgw_group {
    struct wsgw_group_conf conf;
    pthread_mutex_t lock;
    _Atomic int refs;
    int closed;
    wsgw_arbiter *arb;
    uint32_t slots; /* power of two, >= 2 * max_keys */
    uint32_t *slot_key; /* slot -> key + 1 (0: empty) */
    struct group_key *keys;
    uint32_t n_keys;
    uint32_t down; /* legs told down, a bit each: live again at their next frame */
    /* Each leg's kernel socket (-1: none, a DPDK leg): its unread bytes (FIONREAD) hold a
     * hole for it (wsgw_arb_set_unread_probe), its Python reader being late. */
    int leg_fd[WSGW_ARB_MAX_LEGS];
    /* A leg's read loop is offering a batch (wsgw_group_set_leg_busy): the rest of it is
     * in hand, not yet offered, its stamp possibly older than the hold. */
    _Atomic int leg_busy[WSGW_ARB_MAX_LEGS];
    /* A leg's reader holds frames read from its socket and not offered yet (a kernel leg's
     * connection queue: FIONREAD no longer sees them; wsgw_group_set_leg_queued). */
    _Atomic int leg_queued[WSGW_ARB_MAX_LEGS];
    struct wsgw_group_stats st;
    /* Winners wait here until the burst (or the call) ends: one ring write for all, as the
     * plain feed does (a write may wake sleeping readers: a system call). Their payloads
     * are copied to stage, since the arbiter's own copies last only until its next call. */
    struct wsgw_ring_msg pending[WRITE_BATCH];
    uint32_t n_pending;
    uint32_t stage_used;
    uint8_t *stage;
    _Atomic uint64_t offer_count;
    uint64_t cost[GROUP_COST_SAMPLES]; /* ns of timed engine offers, a ring */
    /* The last `$gap` record written (its ring seq, 0: none yet, and its JSON), for a
     * consumer that subscribes afterwards (wsgw_group_last_gap). */
    int64_t last_gap_seq;
    uint32_t last_gap_len;
    char last_gap[GROUP_GAP_BYTES];
};

#define GROUP_STAGE_BYTES (256u << 10)

static void group_retain(wsgw_group *g) { atomic_fetch_add(&g->refs, 1); }

static void group_free(wsgw_group *g)
{
    wsgw_arb_destroy(g->arb);
    wsgw_ring_writer_release(g->conf.ring);
    pthread_mutex_destroy(&g->lock);
    free(g->slot_key);
    free(g->keys);
    free(g->stage);
    free(g);
}

WSGW_API void wsgw_group_release(wsgw_group *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1)
        group_free(g);
}

WSGW_API uint32_t wsgw_group_conf_size(void) { return (uint32_t)sizeof(struct wsgw_group_conf); }

/* The arbiter's probe, under the group's lock (its calls run under it): whether the leg's
 * read loop is offering a batch (the rest of it in hand), holds frames it read and has not
 * offered (its connection's queue), or its kernel socket holds bytes the loop has not read
 * yet. At most one ioctl, asked only when a hole is due. */
static int group_unread(void *ctx, uint32_t leg)
{
    wsgw_group *g = ctx;
    int fd = g->leg_fd[leg], n = 0;
    if (!atomic_load_explicit(&g->leg_busy[leg], memory_order_acquire) &&
        !atomic_load_explicit(&g->leg_queued[leg], memory_order_acquire) &&
        (fd < 0 || ioctl(fd, FIONREAD, &n) != 0 || n <= 0))
        return 0;
    g->st.unread_waits++;
    return 1;
}

WSGW_API int wsgw_group_create(const struct wsgw_group_conf *conf, wsgw_group **out)
{
    *out = NULL;
    if (!conf->ring || conf->legs < 1 || conf->legs > WSGW_ARB_MAX_LEGS || conf->max_keys < 1 ||
        conf->max_keys > (1u << 20)) {
        wsgw_set_error("group: a ring, 1..%d legs and 1..2^20 keys are needed", WSGW_ARB_MAX_LEGS);
        return -EINVAL;
    }
    struct wsgw_group *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->conf = *conf;
    g->conf.epoch[sizeof(g->conf.epoch) - 1] = 0;
    g->slots = 16;
    while (g->slots < 2 * conf->max_keys)
        g->slots *= 2;
    g->slot_key = calloc(g->slots, sizeof(*g->slot_key));
    g->keys = calloc(conf->max_keys, sizeof(*g->keys));
    g->stage = malloc(GROUP_STAGE_BYTES);
    int rc = wsgw_arb_create(conf->legs, conf->hold_ns, conf->max_held, conf->max_keys, 8192,
                             conf->arena_bytes, &g->arb);
    if (rc < 0 || !g->slot_key || !g->keys || !g->stage) {
        wsgw_arb_destroy(g->arb);
        free(g->slot_key);
        free(g->keys);
        free(g->stage);
        free(g);
        wsgw_set_error("group: cannot create its arbiter (%d)", rc);
        return rc < 0 ? rc : -ENOMEM;
    }
    pthread_mutex_init(&g->lock, NULL);
    atomic_init(&g->refs, 1);
    for (uint32_t leg = 0; leg < conf->legs; leg++)
        g->st.leg_live[leg] = 1;
    for (uint32_t leg = 0; leg < WSGW_ARB_MAX_LEGS; leg++)
        g->leg_fd[leg] = -1;
    wsgw_arb_set_unread_probe(g->arb, group_unread, g);
    wsgw_ring_writer_retain(conf->ring);
    *out = g;
    return 0;
}

WSGW_API void wsgw_group_close(wsgw_group *g)
{
    pthread_mutex_lock(&g->lock);
    g->closed = 1;
    pthread_mutex_unlock(&g->lock);
}

/* The key of an identity topic (created when create), or UINT32_MAX. Under the lock. */
static uint32_t group_key(wsgw_group *g, const char *topic, uint32_t len, int create)
{
    if (len == 0 || len > WSGW_ID_TOPIC_MAX)
        return UINT32_MAX;
    uint32_t i = hash_bytes((const uint8_t *)topic, len) & (g->slots - 1);
    for (;;) {
        uint32_t k = g->slot_key[i];
        if (!k)
            break;
        struct group_key *key = &g->keys[k - 1];
        if (key->id_len == len && memcmp(key->id_topic, topic, len) == 0)
            return k - 1;
        i = (i + 1) & (g->slots - 1);
    }
    if (!create || g->n_keys >= g->conf.max_keys)
        return UINT32_MAX;
    uint32_t k = g->n_keys++;
    struct group_key *key = &g->keys[k];
    key->used = 1;
    key->id_len = len;
    memcpy(key->id_topic, topic, len);
    g->slot_key[i] = k + 1;
    return k;
}

WSGW_API int wsgw_group_floor(wsgw_group *g, const char *topic, uint32_t len, int64_t last)
{
    pthread_mutex_lock(&g->lock);
    uint32_t k = group_key(g, topic, len, 1);
    if (k != UINT32_MAX) {
        g->keys[k].has_floor = 1;
        g->keys[k].floor = last;
        g->keys[k].has_last = 1;
        g->keys[k].last = last;
    }
    pthread_mutex_unlock(&g->lock);
    return k == UINT32_MAX ? -ENOSPC : 0;
}

WSGW_API int wsgw_group_restart(wsgw_group *g, const char *topic, uint32_t len)
{
    int restarted = 0;
    pthread_mutex_lock(&g->lock);
    for (uint32_t k = 0; k < g->n_keys && !g->closed; k++) {
        struct group_key *key = &g->keys[k];
        if (key->name_len != len || memcmp(key->name, topic, len) != 0)
            continue;
        if (wsgw_arb_restart(g->arb, k) == 1) {
            key->has_floor = 0;
            restarted++;
        }
    }
    pthread_mutex_unlock(&g->lock);
    return restarted;
}

/* The winners staged so far into the ring, in one write. Under the lock. */
static void group_flush(wsgw_group *g)
{
    if (!g->n_pending)
        return;
    if (wsgw_ring_write_batch(g->conf.ring, g->pending, g->n_pending) < 0)
        g->st.ring_errors += g->n_pending;
    g->n_pending = 0;
    g->stage_used = 0;
}

static void group_stage(wsgw_group *g, uint32_t session_id, uint32_t topic_id,
                        const struct wsgw_arb_out *o)
{
    if (g->n_pending == WRITE_BATCH || g->stage_used + o->len > GROUP_STAGE_BYTES)
        group_flush(g);
    if (o->len > GROUP_STAGE_BYTES) { /* too large to stage: on its own */
        if (wsgw_ring_write(g->conf.ring, session_id, topic_id, (uint64_t)o->arrived_ns,
                            o->payload, o->len) < 0)
            g->st.ring_errors++;
        return;
    }
    uint8_t *copy = g->stage + g->stage_used;
    memcpy(copy, o->payload, o->len);
    g->stage_used += o->len;
    g->pending[g->n_pending++] = (struct wsgw_ring_msg){.data = copy, .len = o->len,
                                                        .session_id = session_id,
                                                        .topic_id = topic_id,
                                                        .ts_ns = (uint64_t)o->arrived_ns};
}

/* JSON string body of text (quotes and backslashes escaped, control bytes dropped). */
static size_t json_text(char *dst, size_t cap, const char *text, size_t n)
{
    size_t at = 0;
    for (size_t i = 0; i < n && at + 2 < cap; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20)
            continue;
        if (c == '"' || c == '\\')
            dst[at++] = '\\';
        dst[at++] = (char)c;
    }
    return at;
}

/* A hole every leg missed: a `$gap` record of the group, as gateway.hub.events.gap_json
 * spells it (its ring seq is the record's own: the JSON's is null). */
static void group_gap(wsgw_group *g, const struct wsgw_arb_out *o)
{
    const struct group_key *key = &g->keys[o->topic];
    char name[2 * WSGW_FEED_TOPIC_MAX + 2];
    size_t name_len = json_text(name, sizeof(name), key->name, key->name_len);
    char body[GROUP_GAP_BYTES];
    uint64_t now = realtime_ns();
    int n;
    if (o->missing == WSGW_ARB_NO_MISSING)
        n = snprintf(body, sizeof(body),
                     "{\"type\":\"gap\",\"seq\":null,\"session\":%u,\"lost\":null,\"reason\":"
                     "\"lost on every leg: %.*s after %lld, before %lld\",\"ts_ns\":%llu",
                     g->conf.hub_id, (int)name_len, name, (long long)o->after,
                     (long long)o->this_id, (unsigned long long)now);
    else
        n = snprintf(body, sizeof(body),
                     "{\"type\":\"gap\",\"seq\":null,\"session\":%u,\"lost\":%lld,\"reason\":"
                     "\"lost on every leg: %.*s after %lld, before %lld\",\"ts_ns\":%llu",
                     g->conf.hub_id, (long long)o->missing, (int)name_len, name,
                     (long long)o->after, (long long)o->this_id, (unsigned long long)now);
    if (n < 0 || (size_t)n >= sizeof(body) - 40)
        return;
    if (g->conf.epoch[0])
        n += snprintf(body + n, sizeof(body) - (size_t)n, ",\"epoch\":\"%s\"}", g->conf.epoch);
    else
        n += snprintf(body + n, sizeof(body) - (size_t)n, "}");
    int64_t seq = wsgw_ring_write(g->conf.ring, g->conf.hub_id, g->conf.gap_topic_id, now, body,
                                  (uint32_t)n);
    if (seq < 0) {
        g->st.ring_errors++;
    } else { /* remembered under the lock that wsgw_group_last_gap takes */
        g->last_gap_seq = seq;
        g->last_gap_len = (uint32_t)n;
        memcpy(g->last_gap, body, (size_t)n);
    }
    g->st.gaps++;
    if (o->missing != WSGW_ARB_NO_MISSING)
        g->st.lost += o->missing;
}

/* The arbiter's last outputs into the ring, in order. Under the lock. */
static void group_emit(wsgw_group *g, int n_out)
{
    if (n_out <= 0)
        return;
    const struct wsgw_arb_out *out = wsgw_arb_outputs(g->arb);
    for (int i = 0; i < n_out; i++) {
        const struct wsgw_arb_out *o = &out[i];
        struct group_key *key = &g->keys[o->topic];
        if (o->kind == WSGW_ARB_LOST) {
            group_flush(g); /* the gap after what came before it */
            group_gap(g, o);
            continue;
        }
        key->has_last = 1;
        key->last = o->this_id;
        group_stage(g, g->conf.hub_id, key->topic_id, o);
        g->st.delivered++;
    }
}

#define GROUP_TAP_TOPIC_MAX 56 /* a ring topic name's bytes at most */

/* The leg's copy, as it arrived, under its tap session id (wsgw_group_conf.tap_ids). */
static void group_tap(wsgw_group *g, struct group_key *key, uint32_t leg, const uint8_t *payload,
                      uint32_t len, int64_t ts_ns)
{
    uint32_t tap_id = g->conf.tap_ids[leg];
    if (!key->tap_topic[leg]) {
        char name[GROUP_TAP_TOPIC_MAX + 1];
        int n = snprintf(name, sizeof(name), "%u:%.*s", tap_id, (int)key->name_len, key->name);
        if (n <= 0 || n > GROUP_TAP_TOPIC_MAX)
            return; /* as gateway.hub.names.ring_topic would shorten it: not tapped */
        int id = wsgw_ring_topic_register(g->conf.ring, name, (uint32_t)n);
        if (id <= 0)
            return;
        key->tap_topic[leg] = (uint32_t)id;
    }
    struct wsgw_arb_out copy = {.payload = payload, .len = len, .arrived_ns = ts_ns};
    group_stage(g, tap_id, key->tap_topic[leg], &copy);
}

/* Under the lock: one identified frame through the arbiter. 1 taken, 0 refused, -errno. */
static int group_take(wsgw_group *g, uint32_t leg, uint32_t topic_id, const char *name,
                      uint32_t name_len, const struct wsgw_identity *id,
                      const uint8_t *payload, uint32_t len, int64_t ts_ns)
{
    if (g->closed || leg >= g->conf.legs || id->this_id == INT64_MIN)
        return 0;
    uint32_t k = group_key(g, id->topic, id->topic_len, 1);
    if (k == UINT32_MAX)
        return 0;
    struct group_key *key = &g->keys[k];
    if (!key->topic_id) {
        key->topic_id = topic_id;
        key->name_len = name_len < WSGW_FEED_TOPIC_MAX ? name_len : WSGW_FEED_TOPIC_MAX;
        memcpy(key->name, name, key->name_len);
    }
    if (key->has_floor && id->this_id <= key->floor) {
        g->st.below_floor++;
        return 1;
    }
    if (g->down & (1u << leg)) {
        g->down &= ~(1u << leg);
        g->st.leg_live[leg] = 1;
        group_emit(g, wsgw_arb_set_live(g->arb, leg, 1, ts_ns));
    }
    g->st.leg_messages[leg]++;
    g->st.leg_newest[leg] = id->this_id;
    if (g->conf.tap_ids[leg])
        group_tap(g, key, leg, payload, len, ts_ns);
    /* Holes past their deadline go inside the offer, after this leg's arrival counts
     * (wsgw_arbiter.h), as the Python path's arbiter does. */
    int rc = wsgw_arb_offer(g->arb, leg, k, id->this_id, id->prev, payload, len, ts_ns);
    if (rc < 0)
        return rc;
    group_emit(g, rc);
    return 1;
}


/* One frame: C identity, arbiter, staged winners (flush: written now). */
static int group_offer(wsgw_group *g, uint32_t leg, uint32_t topic_id, const char *name,
                       uint32_t name_len, const uint8_t *payload, uint32_t len, int64_t ts_ns,
                       int flush)
{
    /* One engine offer in GROUP_COST_EVERY is timed (the clock costs about as much as the
     * arbiter): its cost goes to the samples, whose median the figures show. */
    int timed = !flush && (atomic_fetch_add_explicit(&g->offer_count, 1, memory_order_relaxed) %
                           GROUP_COST_EVERY) == 0;
    uint64_t start = timed ? wsgw_monotonic_ns() : 0;
    struct wsgw_identity id;
    int told = wsgw_identity_scan(g->conf.dialect, payload, len, &id);
    pthread_mutex_lock(&g->lock);
    int rc = 0;
    if (told)
        rc = group_take(g, leg, topic_id, name, name_len, &id, payload, len, ts_ns);
    if (rc <= 0)
        g->st.not_told++;
    if (flush || rc <= 0)
        group_flush(g);
    if (flush) {
        g->st.python_offers++;
    } else {
        g->st.offers++;
        if (timed) {
            uint64_t spent = wsgw_monotonic_ns() - start;
            g->st.offer_ns += spent;
            g->cost[g->st.cost_samples % GROUP_COST_SAMPLES] = spent;
            g->st.cost_samples++;
        }
    }
    pthread_mutex_unlock(&g->lock);
    return rc;
}

WSGW_API int wsgw_group_offer(wsgw_group *g, uint32_t leg, uint32_t topic_id, const char *name,
                              uint32_t name_len, const uint8_t *payload, uint32_t len,
                              int64_t ts_ns)
{
    return group_offer(g, leg, topic_id, name, name_len, payload, len, ts_ns, 1);
}

WSGW_API int wsgw_group_offer_staged(wsgw_group *g, uint32_t leg, uint32_t topic_id,
                                     const char *name, uint32_t name_len, const uint8_t *payload,
                                     uint32_t len, int64_t ts_ns)
{
    return group_offer(g, leg, topic_id, name, name_len, payload, len, ts_ns, 0);
}

WSGW_API void wsgw_group_flush(wsgw_group *g)
{
    pthread_mutex_lock(&g->lock);
    group_flush(g);
    pthread_mutex_unlock(&g->lock);
}

static int group_closed(struct wsgw_group *g)
{
    pthread_mutex_lock(&g->lock);
    int closed = g->closed;
    pthread_mutex_unlock(&g->lock);
    return closed;
}

/* The feed's burst ended: what it staged goes to the ring. */
static void group_burst_done(wsgw_group *g) { wsgw_group_flush(g); }

WSGW_API int wsgw_group_offer_identity(wsgw_group *g, uint32_t leg, uint32_t topic_id,
                                       const char *name, uint32_t name_len,
                                       const struct wsgw_identity *id, const uint8_t *payload,
                                       uint32_t len, int64_t ts_ns)
{
    pthread_mutex_lock(&g->lock);
    int rc = group_take(g, leg, topic_id, name, name_len, id, payload, len, ts_ns);
    group_flush(g);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

WSGW_API int wsgw_group_set_leg_fd(wsgw_group *g, uint32_t leg, int fd)
{
    if (leg >= WSGW_ARB_MAX_LEGS)
        return -EINVAL;
    pthread_mutex_lock(&g->lock);
    int rc = leg < g->conf.legs ? 0 : -EINVAL;
    if (!rc)
        g->leg_fd[leg] = fd < 0 ? -1 : fd;
    pthread_mutex_unlock(&g->lock);
    return rc;
}

WSGW_API void wsgw_group_set_leg_busy(wsgw_group *g, uint32_t leg, int busy)
{
    if (leg < WSGW_ARB_MAX_LEGS)
        atomic_store_explicit(&g->leg_busy[leg], busy != 0, memory_order_release);
}

WSGW_API void wsgw_group_set_leg_queued(wsgw_group *g, uint32_t leg, int queued)
{
    if (leg < WSGW_ARB_MAX_LEGS)
        atomic_store_explicit(&g->leg_queued[leg], queued != 0, memory_order_release);
}

WSGW_API int wsgw_group_set_live(wsgw_group *g, uint32_t leg, int live, int64_t now_ns)
{
    pthread_mutex_lock(&g->lock);
    int rc = -EINVAL;
    if (leg < g->conf.legs && !g->closed) {
        if (live)
            g->down &= ~(1u << leg);
        else
            g->down |= 1u << leg;
        g->st.leg_live[leg] = live != 0;
        rc = wsgw_arb_set_live(g->arb, leg, live, now_ns);
        group_emit(g, rc);
        group_flush(g);
    }
    pthread_mutex_unlock(&g->lock);
    return rc < 0 ? rc : 0;
}

WSGW_API int wsgw_group_expire(wsgw_group *g, int64_t now_ns)
{
    pthread_mutex_lock(&g->lock);
    int rc = 0;
    if (!g->closed) {
        rc = wsgw_arb_expire(g->arb, now_ns);
        if (rc > 0)
            g->st.expired++;
        group_emit(g, rc);
        group_flush(g);
    }
    pthread_mutex_unlock(&g->lock);
    return rc < 0 ? rc : 0;
}

WSGW_API int wsgw_group_deadline(wsgw_group *g, int64_t *at)
{
    pthread_mutex_lock(&g->lock);
    int rc = wsgw_arb_deadline(g->arb, at);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

WSGW_API uint32_t wsgw_group_cost_samples(wsgw_group *g, uint64_t *out, uint32_t cap)
{
    pthread_mutex_lock(&g->lock);
    uint64_t n = g->st.cost_samples < GROUP_COST_SAMPLES ? g->st.cost_samples : GROUP_COST_SAMPLES;
    if (n > cap)
        n = cap;
    memcpy(out, g->cost, n * sizeof(uint64_t));
    pthread_mutex_unlock(&g->lock);
    return (uint32_t)n;
}

WSGW_API void wsgw_group_stats(wsgw_group *g, struct wsgw_group_stats *out)
{
    pthread_mutex_lock(&g->lock);
    *out = g->st;
    pthread_mutex_unlock(&g->lock);
}

WSGW_API int wsgw_group_leg_stats(wsgw_group *g, uint32_t leg, struct wsgw_arb_leg_stats *out)
{
    pthread_mutex_lock(&g->lock);
    int rc = wsgw_arb_leg_stats(g->arb, leg, out);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

WSGW_API int wsgw_group_lag_percentile(wsgw_group *g, uint32_t leg, double q, int64_t *ns)
{
    pthread_mutex_lock(&g->lock);
    int rc = wsgw_arb_lag_percentile(g->arb, leg, q, ns);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

WSGW_API void wsgw_group_totals(wsgw_group *g, struct wsgw_arb_totals *out)
{
    pthread_mutex_lock(&g->lock);
    wsgw_arb_totals(g->arb, out);
    pthread_mutex_unlock(&g->lock);
}

WSGW_API uint32_t wsgw_group_last(wsgw_group *g, int64_t *last, char *names, uint32_t cap,
                                  uint32_t max)
{
    pthread_mutex_lock(&g->lock);
    uint32_t n = 0, at = 0;
    for (uint32_t k = 0; k < g->n_keys && n < max; k++) {
        const struct group_key *key = &g->keys[k];
        if (!key->has_last || at + key->id_len + 1 > cap)
            continue;
        memcpy(names + at, key->id_topic, key->id_len);
        at += key->id_len;
        names[at++] = 0;
        last[n++] = key->last;
    }
    pthread_mutex_unlock(&g->lock);
    return n;
}

WSGW_API int64_t wsgw_group_last_gap(wsgw_group *g, char *body, uint32_t cap, uint32_t *len)
{
    pthread_mutex_lock(&g->lock);
    int64_t seq = g->last_gap_seq;
    uint32_t n = g->last_gap_len < cap ? g->last_gap_len : cap;
    if (seq > 0)
        memcpy(body, g->last_gap, n);
    *len = seq > 0 ? n : 0;
    pthread_mutex_unlock(&g->lock);
    return seq;
}

WSGW_API int wsgw_feed_join_group(wsgw_feed *f, wsgw_group *g, uint32_t leg)
{
    if (leg >= g->conf.legs)
        return -EINVAL;
    group_retain(g);
    if (f->group)
        wsgw_group_release(f->group);
    f->group = g;
    f->leg = leg;
    return 0;
}

static int group_frame(struct wsgw_group *g, uint32_t leg, const struct topic_slot *slot,
                       const uint8_t *payload, uint32_t len, uint64_t rx_rt)
{
    return group_offer(g, leg, slot->topic_id, (const char *)slot->name, slot->len, payload, len,
                       (int64_t)rx_rt, 0);
}
