/* The C feed path: flow bytes -> message ring records in the engine's poll (wsgw_feed.h). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
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
};

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
        if (payload == f->scratch)
            scratch_busy = 1;
        p.msgs[p.n++] = (struct wsgw_ring_msg){.data = payload, .len = len,
                                               .session_id = f->conf.session_id,
                                               .topic_id = slot->topic_id,
                                               .ts_ns = p.rx_rt};
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
