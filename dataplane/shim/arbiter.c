/* A/B arbitration: see wsgw_arbiter.h; the rules are gateway/groups/arbiter.py's, step for
 * step (the differential test, tests/unit/groups/test_arbiter_c.py, holds them equal). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wsgw_arbiter.h"

#define ARB_CHUNK 128u      /* arena allocation unit (held payloads are chains of chunks) */
#define ARB_NO_CHUNK UINT32_MAX
#define ARB_HELD_MIN 16u    /* a topic's first held array */
#define ARB_NO_TOPIC UINT32_MAX

struct arb_held {
    int64_t this_id;
    int64_t prev;
    int64_t arrived_ns;
    uint32_t leg;
    uint32_t len;
    uint32_t first_chunk;
    uint32_t reserved;
};

struct arb_topic {
    int64_t last; /* the `this` of the last message delivered */
    int64_t hole_since;
    int has_hole;
    int exists;
    int after_loss; /* a loss was declared (or a restart asked); no unlinked since */
    int linked;     /* a linked message (prev given) arrived: a book's topic, not trades' */
    uint32_t newest_seen; /* bit per leg: newest[leg] is set */
    int64_t newest[WSGW_ARB_MAX_LEGS];
    /* winners' arrivals, a ring in delivery order (so `this` ascending) */
    int64_t *won_this;
    int64_t *won_ns;
    uint32_t won_next; /* where the next one goes */
    uint32_t won_count;
    /* held messages: a binary min-heap on this_id (unique in it) */
    struct arb_held *held;
    uint32_t n_held;
    uint32_t cap_held;
};

struct arb_leg {
    uint64_t won;
    uint64_t late;
    uint32_t lag_count;
    uint32_t lag_at;
    int live;
    int has_arrived;
    int64_t arrived_ns; /* its newest arrival, any topic: a leg that arrives is moving */
    int64_t lag[WSGW_ARB_LAG_SAMPLES];
};

struct wsgw_arbiter {
    uint32_t legs;
    uint32_t max_held;
    uint32_t max_topics;
    uint32_t won_window;
    int64_t hold_ns;
    int64_t max_hold_ns; /* >= hold_ns */
    uint64_t duplicates;
    int64_t lost;
    uint64_t held_total;
    int has_newest;
    int64_t newest_ns; /* the newest arrival of any leg */
    struct arb_leg leg[WSGW_ARB_MAX_LEGS];
    struct arb_topic *topics; /* by topic id */
    uint32_t *order;          /* topic ids in the order they were first seen */
    uint32_t n_order;
    /* arena: n_chunks chunks of ARB_CHUNK bytes, a free list through chunk_next */
    uint8_t *arena;
    uint32_t *chunk_next;
    uint32_t n_chunks;
    uint32_t free_head;
    uint32_t free_count;
    /* this call's outputs, and copies of held payloads that went out in it */
    struct wsgw_arb_out *out;
    uint32_t n_out;
    uint32_t cap_out;
    uint8_t *scratch;
    size_t scratch_len;
    size_t scratch_cap;
    wsgw_arb_unread_fn unread; /* the caller's probe of a leg's unread input, or NULL */
    void *unread_ctx;
    int scratch_used; /* outputs hold scratch offsets until the call ends */
    int failed;       /* an allocation failed in this call (-ENOMEM) */
};

/* ---- outputs ------------------------------------------------------------------------- */

static struct wsgw_arb_out *out_slot(wsgw_arbiter *a)
{
    if (a->n_out == a->cap_out) {
        uint32_t cap = a->cap_out ? a->cap_out * 2 : 256;
        struct wsgw_arb_out *grown = realloc(a->out, (size_t)cap * sizeof(*grown));
        if (!grown) {
            a->failed = 1;
            return NULL;
        }
        a->out = grown;
        a->cap_out = cap;
    }
    return &a->out[a->n_out++];
}

static void call_begin(wsgw_arbiter *a)
{
    a->n_out = 0;
    a->scratch_len = 0;
    a->scratch_used = 0;
    a->failed = 0;
}

/* Scratch may move while a call grows it: outputs keep offsets until here. */
static int call_end(wsgw_arbiter *a)
{
    if (a->scratch_used) {
        for (uint32_t i = 0; i < a->n_out; i++) {
            struct wsgw_arb_out *o = &a->out[i];
            if (o->kind == WSGW_ARB_DELIVERED && o->src < 0)
                o->payload = a->scratch + (uintptr_t)o->payload;
        }
    }
    return a->failed ? -ENOMEM : (int)a->n_out;
}

/* ---- the arena ----------------------------------------------------------------------- */

static uint32_t chunks_for(uint32_t len)
{
    return (uint32_t)(((uint64_t)len + ARB_CHUNK - 1) / ARB_CHUNK);
}

static uint32_t arena_put(wsgw_arbiter *a, const uint8_t *data, uint32_t len)
{
    uint32_t first = ARB_NO_CHUNK, *link = &first;
    while (len) {
        uint32_t c = a->free_head;
        a->free_head = a->chunk_next[c];
        a->free_count--;
        uint32_t take = len < ARB_CHUNK ? len : ARB_CHUNK;
        memcpy(a->arena + (size_t)c * ARB_CHUNK, data, take);
        data += take;
        len -= take;
        *link = c;
        link = &a->chunk_next[c];
    }
    *link = ARB_NO_CHUNK;
    return first;
}

static void arena_free(wsgw_arbiter *a, uint32_t c)
{
    while (c != ARB_NO_CHUNK) {
        uint32_t next = a->chunk_next[c];
        a->chunk_next[c] = a->free_head;
        a->free_head = c;
        a->free_count++;
        c = next;
    }
}

/* Copy a held payload into the call's scratch: its offset there, (size_t)-1 on ENOMEM. */
static size_t arena_copy_out(wsgw_arbiter *a, uint32_t c, uint32_t len)
{
    if (a->scratch_len + len > a->scratch_cap) {
        size_t cap = a->scratch_cap ? a->scratch_cap : 4096;
        while (cap < a->scratch_len + len)
            cap *= 2;
        uint8_t *grown = realloc(a->scratch, cap);
        if (!grown) {
            a->failed = 1;
            return (size_t)-1;
        }
        a->scratch = grown;
        a->scratch_cap = cap;
    }
    size_t at = a->scratch_len;
    uint8_t *dst = a->scratch + at;
    uint32_t left = len;
    while (left) {
        uint32_t take = left < ARB_CHUNK ? left : ARB_CHUNK;
        memcpy(dst, a->arena + (size_t)c * ARB_CHUNK, take);
        dst += take;
        left -= take;
        c = a->chunk_next[c];
    }
    a->scratch_len += len;
    a->scratch_used = 1;
    return at;
}

/* ---- the held heap ------------------------------------------------------------------- */

static void heap_push(struct arb_topic *t, const struct arb_held *h)
{
    uint32_t i = t->n_held++;
    while (i) {
        uint32_t up = (i - 1) / 2;
        if (t->held[up].this_id <= h->this_id)
            break;
        t->held[i] = t->held[up];
        i = up;
    }
    t->held[i] = *h;
}

static struct arb_held heap_pop(struct arb_topic *t)
{
    struct arb_held top = t->held[0];
    struct arb_held moved = t->held[--t->n_held];
    uint32_t n = t->n_held, i = 0;
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && t->held[child + 1].this_id < t->held[child].this_id)
            child++;
        if (moved.this_id <= t->held[child].this_id)
            break;
        t->held[i] = t->held[child];
        i = child;
    }
    if (n)
        t->held[i] = moved;
    return top;
}

static int heap_contains(const struct arb_topic *t, int64_t this_id)
{
    for (uint32_t i = 0; i < t->n_held; i++)
        if (t->held[i].this_id == this_id)
            return 1;
    return 0;
}

/* ---- steps (the Python reference's, same names) -------------------------------------- */

static void sample_lag(struct arb_leg *l, int64_t lag)
{
    if (l->lag_count < WSGW_ARB_LAG_SAMPLES) {
        l->lag[l->lag_count++] = lag;
    } else {
        l->lag[l->lag_at] = lag;
        l->lag_at = (l->lag_at + 1) % WSGW_ARB_LAG_SAMPLES;
    }
}

/* The winner's arrival of `this_id` if still in the window. A copy is most often of the
 * newest winner (legs a little apart): that one first, then a binary search (ascending). */
static int won_lookup(const wsgw_arbiter *a, const struct arb_topic *t, int64_t this_id,
                      int64_t *won)
{
    uint32_t n = t->won_count, cap = a->won_window;
    if (!n)
        return 0;
    uint32_t newest = t->won_next ? t->won_next - 1 : cap - 1;
    if (t->won_this[newest] == this_id) {
        *won = t->won_ns[newest];
        return 1;
    }
    uint32_t base = t->won_next >= n ? t->won_next - n : t->won_next + cap - n; /* the oldest */
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint32_t at = base + mid;
        if (at >= cap)
            at -= cap;
        int64_t v = t->won_this[at];
        if (v == this_id) {
            *won = t->won_ns[at];
            return 1;
        }
        if (v < this_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

static void late(wsgw_arbiter *a, uint32_t leg, const struct arb_topic *t, int64_t this_id,
                 int64_t now_ns)
{
    a->duplicates++;
    a->leg[leg].late++;
    int64_t won;
    if (won_lookup(a, t, this_id, &won))
        sample_lag(&a->leg[leg], now_ns - won);
}

/* payload: the caller's (src >= 0) or a scratch offset (src -1). */
static void deliver(wsgw_arbiter *a, uint32_t topic, int64_t this_id, const uint8_t *payload,
                    uint32_t len, int32_t src, uint32_t leg, int64_t arrived_ns)
{
    struct arb_topic *t = &a->topics[topic];
    t->last = this_id;
    if (a->won_window) {
        t->won_this[t->won_next] = this_id;
        t->won_ns[t->won_next] = arrived_ns;
        if (++t->won_next == a->won_window)
            t->won_next = 0;
        if (t->won_count < a->won_window)
            t->won_count++;
    }
    a->leg[leg].won++;
    struct wsgw_arb_out *o = out_slot(a);
    if (!o)
        return;
    o->kind = WSGW_ARB_DELIVERED;
    o->topic = topic;
    o->this_id = this_id;
    o->after = 0;
    o->missing = 0;
    o->arrived_ns = arrived_ns;
    o->payload = payload;
    o->len = len;
    o->src = src;
    o->leg = leg;
    o->reserved = 0;
}

static void deliver_held(wsgw_arbiter *a, uint32_t topic, const struct arb_held *h)
{
    size_t at = arena_copy_out(a, h->first_chunk, h->len);
    arena_free(a, h->first_chunk);
    a->held_total--;
    if (at == (size_t)-1)
        at = 0; /* the call fails (ENOMEM); the state stays consistent */
    deliver(a, topic, h->this_id, (const uint8_t *)(uintptr_t)at, h->len, -1, h->leg,
            h->arrived_ns);
}

/* Deliver the held messages that now follow the last one; drop held copies. */
static void release(wsgw_arbiter *a, uint32_t topic)
{
    struct arb_topic *t = &a->topics[topic];
    while (t->n_held && (t->held[0].this_id <= t->last || t->held[0].prev == t->last)) {
        struct arb_held h = heap_pop(t);
        if (h.this_id <= t->last) { /* a copy held while the hole was open */
            arena_free(a, h.first_chunk);
            a->held_total--;
            late(a, h.leg, t, h.this_id, h.arrived_ns);
            continue;
        }
        deliver_held(a, topic, &h);
    }
    t->has_hole = t->n_held > 0;
    t->hole_since = t->n_held ? t->held[0].arrived_ns : 0;
}

static void lost(wsgw_arbiter *a, uint32_t topic, int64_t after, int64_t before, int64_t missing)
{
    if (missing != WSGW_ARB_NO_MISSING)
        a->lost += missing;
    a->topics[topic].after_loss = 1;
    struct wsgw_arb_out *o = out_slot(a);
    if (!o)
        return;
    memset(o, 0, sizeof(*o));
    o->kind = WSGW_ARB_LOST;
    o->topic = topic;
    o->this_id = before;
    o->after = after;
    o->missing = missing;
    o->src = -1;
}

/* The oldest hole is a loss: report it, deliver the next held message and what follows. */
static void declare_hole(wsgw_arbiter *a, uint32_t topic)
{
    struct arb_topic *t = &a->topics[topic];
    struct arb_held h = heap_pop(t);
    lost(a, topic, t->last, h.this_id, h.prev - t->last);
    deliver_held(a, topic, &h);
    release(a, topic);
}

/* No live leg can still bring the message after `last`: each went past it. */
static int every_live_leg_passed(const wsgw_arbiter *a, const struct arb_topic *t)
{
    for (uint32_t leg = 0; leg < a->legs; leg++) {
        if (!a->leg[leg].live)
            continue;
        if (!(t->newest_seen & (1u << leg)) || t->newest[leg] <= t->last)
            return 0;
    }
    return 1;
}

/* When the topic's oldest hole is a loss unless filled: hold_ns after it opened and after the
 * newest arrival of each live leg that may still fill it (a moving leg is waited for), at
 * most max_hold_ns after it opened. Only with a hole. */
static int64_t hole_due(const wsgw_arbiter *a, const struct arb_topic *t)
{
    int64_t due = t->hole_since + a->hold_ns;
    for (uint32_t leg = 0; leg < a->legs; leg++) {
        const struct arb_leg *l = &a->leg[leg];
        if (!l->has_arrived || !l->live)
            continue;
        if ((t->newest_seen & (1u << leg)) && t->newest[leg] > t->last)
            continue; /* went past the hole: will not fill it */
        if (l->arrived_ns + a->hold_ns > due)
            due = l->arrived_ns + a->hold_ns;
    }
    int64_t bound = t->hole_since + a->max_hold_ns;
    return due < bound ? due : bound;
}

/* Arena full: the oldest hole of any topic is lost. 0 when nothing is held anywhere. */
static int evict_oldest_hole(wsgw_arbiter *a)
{
    uint32_t best = ARB_NO_TOPIC;
    for (uint32_t i = 0; i < a->n_order; i++) {
        const struct arb_topic *t = &a->topics[a->order[i]];
        if (t->has_hole && (best == ARB_NO_TOPIC || t->hole_since < a->topics[best].hole_since))
            best = a->order[i];
    }
    if (best == ARB_NO_TOPIC)
        return 0;
    declare_hole(a, best);
    return 1;
}

static int topic_create(wsgw_arbiter *a, uint32_t topic, int64_t this_id, int64_t prev)
{
    struct arb_topic *t = &a->topics[topic];
    if (a->won_window) {
        t->won_this = malloc((size_t)a->won_window * sizeof(int64_t));
        t->won_ns = malloc((size_t)a->won_window * sizeof(int64_t));
        if (!t->won_this || !t->won_ns) {
            free(t->won_this);
            free(t->won_ns);
            t->won_this = t->won_ns = NULL;
            return -ENOMEM;
        }
    }
    t->exists = 1;
    t->last = prev == WSGW_ARB_NO_PREV ? this_id - 1 : prev;
    a->order[a->n_order++] = topic;
    return 0;
}

static int held_room(wsgw_arbiter *a, struct arb_topic *t)
{
    if (t->n_held < t->cap_held)
        return 0;
    uint32_t cap = t->cap_held ? t->cap_held * 2 : ARB_HELD_MIN;
    if (cap > a->max_held + 1)
        cap = a->max_held + 1;
    struct arb_held *grown = realloc(t->held, (size_t)cap * sizeof(*grown));
    if (!grown)
        return -ENOMEM;
    t->held = grown;
    t->cap_held = cap;
    return 0;
}

/* Whether the due hole waits for a live leg that has not gone past it and still has unread
 * input (the caller's probe): each such leg counts as arriving at now_ns, so the hole is due
 * a hold later. Never from max_hold_ns after the hole opened. As the reference's
 * _unread_waits: every such leg is asked, in leg order. */
static int unread_waits(wsgw_arbiter *a, const struct arb_topic *t, int64_t now_ns)
{
    if (!a->unread || now_ns >= t->hole_since + a->max_hold_ns)
        return 0;
    int waits = 0;
    for (uint32_t leg = 0; leg < a->legs; leg++) {
        struct arb_leg *l = &a->leg[leg];
        if (!l->live || ((t->newest_seen & (1u << leg)) && t->newest[leg] > t->last))
            continue;
        if (a->unread(a->unread_ctx, leg)) {
            l->arrived_ns = now_ns;
            l->has_arrived = 1;
            waits = 1;
        }
    }
    return waits;
}

static void expire_due(wsgw_arbiter *a, int64_t now_ns)
{
    for (uint32_t i = 0; i < a->n_order; i++) {
        uint32_t topic = a->order[i];
        const struct arb_topic *t = &a->topics[topic];
        while (t->has_hole && now_ns >= hole_due(a, t)) {
            if (unread_waits(a, t, now_ns))
                break;
            declare_hole(a, topic);
        }
    }
}

/* An arrival on `leg` is counted before the holes due at its stamp go (a leg whose frames
 * waited unread while the gateway stalled is not silent); after a time in which no leg
 * arrived for longer than the hold (the gateway or the whole feed stalled), every leg gets
 * the hold afresh. As gateway.groups.arbiter.Arbiter.offer. */
static void note_arrival(wsgw_arbiter *a, uint32_t leg, int64_t now_ns)
{
    if (a->has_newest && now_ns - a->newest_ns > a->hold_ns)
        for (uint32_t l = 0; l < a->legs; l++)
            if (a->leg[l].has_arrived)
                a->leg[l].arrived_ns = now_ns;
    if (!a->has_newest || now_ns > a->newest_ns) {
        a->newest_ns = now_ns;
        a->has_newest = 1;
    }
    a->leg[leg].arrived_ns = now_ns;
    a->leg[leg].has_arrived = 1;
    if (a->held_total)
        expire_due(a, now_ns);
}

static int offer_one(wsgw_arbiter *a, uint32_t leg, uint32_t topic, int64_t this_id,
                     int64_t prev, const uint8_t *payload, uint32_t len, int64_t now_ns,
                     int32_t src)
{
    struct arb_topic *t = &a->topics[topic];
    note_arrival(a, leg, now_ns);
    if (!t->exists) { /* the stream starts here */
        int rc = topic_create(a, topic, this_id, prev);
        if (rc)
            return rc;
    }
    uint32_t bit = 1u << leg;
    if (!(t->newest_seen & bit) || this_id > t->newest[leg]) {
        t->newest[leg] = this_id;
        t->newest_seen |= bit;
    }
    if (prev != WSGW_ARB_NO_PREV)
        t->linked = 1;
    if (this_id <= t->last && prev == WSGW_ARB_NO_PREV && t->after_loss) {
        t->last = this_id - 1; /* a snapshot after a loss: start afresh (arbiter.py) */
        t->won_count = t->won_next = 0;
    }
again:
    if (this_id <= t->last) {
        late(a, leg, t, this_id, now_ns);
        return 0;
    }
    if (prev == WSGW_ARB_NO_PREV || prev == t->last) {
        if (prev == WSGW_ARB_NO_PREV)
            t->after_loss = 0;
        deliver(a, topic, this_id, payload, len, src, leg, now_ns);
        release(a, topic);
        return 0;
    }
    if (heap_contains(t, this_id)) { /* a copy of a held one */
        late(a, leg, t, this_id, now_ns);
    } else {
        uint32_t need = chunks_for(len);
        if (need > a->free_count) {
            if (evict_oldest_hole(a))
                goto again; /* a hole went out (maybe this topic's): look again */
            /* too large for the whole arena: its hole is lost at once */
            lost(a, topic, t->last, this_id, prev - t->last);
            deliver(a, topic, this_id, payload, len, src, leg, now_ns);
            release(a, topic);
            return 0;
        }
        if (held_room(a, t))
            return -ENOMEM;
        struct arb_held h = {
            .this_id = this_id,
            .prev = prev,
            .arrived_ns = now_ns,
            .leg = leg,
            .len = len,
            .first_chunk = arena_put(a, payload, len),
        };
        heap_push(t, &h);
        a->held_total++;
        if (!t->has_hole) {
            t->has_hole = 1;
            t->hole_since = now_ns;
        }
    }
    if (t->n_held > a->max_held || every_live_leg_passed(a, t))
        declare_hole(a, topic);
    return 0;
}

/* ---- the API ------------------------------------------------------------------------- */

int wsgw_arb_create(uint32_t legs, int64_t hold_ns, uint32_t max_held, uint32_t max_topics,
                    uint32_t won_window, uint64_t arena_bytes, wsgw_arbiter **out)
{
    *out = NULL;
    if (legs < 1 || legs > WSGW_ARB_MAX_LEGS || hold_ns < 0 || max_held < 1 ||
        max_held == UINT32_MAX || max_topics < 1 || arena_bytes / ARB_CHUNK >= ARB_NO_CHUNK)
        return -EINVAL;
    wsgw_arbiter *a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->legs = legs;
    a->hold_ns = hold_ns;
    a->max_hold_ns = hold_ns > WSGW_ARB_DEFAULT_MAX_HOLD_NS ? hold_ns
                                                            : WSGW_ARB_DEFAULT_MAX_HOLD_NS;
    a->max_held = max_held;
    a->max_topics = max_topics;
    a->won_window = won_window;
    for (uint32_t i = 0; i < legs; i++)
        a->leg[i].live = 1;
    a->n_chunks = (uint32_t)(arena_bytes / ARB_CHUNK);
    a->topics = calloc(max_topics, sizeof(*a->topics));
    a->order = calloc(max_topics, sizeof(*a->order));
    a->chunk_next = calloc(a->n_chunks ? a->n_chunks : 1, sizeof(*a->chunk_next));
    a->arena = malloc(a->n_chunks ? (size_t)a->n_chunks * ARB_CHUNK : 1);
    if (!a->topics || !a->order || !a->chunk_next || !a->arena) {
        wsgw_arb_destroy(a);
        return -ENOMEM;
    }
    for (uint32_t c = 0; c < a->n_chunks; c++)
        a->chunk_next[c] = c + 1 < a->n_chunks ? c + 1 : ARB_NO_CHUNK;
    a->free_head = a->n_chunks ? 0 : ARB_NO_CHUNK;
    a->free_count = a->n_chunks;
    *out = a;
    return 0;
}

void wsgw_arb_destroy(wsgw_arbiter *a)
{
    if (!a)
        return;
    if (a->topics) {
        for (uint32_t i = 0; i < a->max_topics; i++) {
            free(a->topics[i].won_this);
            free(a->topics[i].won_ns);
            free(a->topics[i].held);
        }
    }
    free(a->topics);
    free(a->order);
    free(a->chunk_next);
    free(a->arena);
    free(a->out);
    free(a->scratch);
    free(a);
}

static int arrival_ok(const wsgw_arbiter *a, uint32_t leg, uint32_t topic, int64_t this_id)
{
    return leg < a->legs && topic < a->max_topics && this_id != INT64_MIN;
}

int wsgw_arb_offer(wsgw_arbiter *a, uint32_t leg, uint32_t topic, int64_t this_id, int64_t prev,
                   const uint8_t *payload, uint32_t len, int64_t now_ns)
{
    if (!arrival_ok(a, leg, topic, this_id))
        return -EINVAL;
    call_begin(a);
    int rc = offer_one(a, leg, topic, this_id, prev, payload, len, now_ns, 0);
    if (rc)
        return rc;
    return call_end(a);
}

int wsgw_arb_offer_columns(wsgw_arbiter *a, uint32_t n, const uint32_t *legs,
                           const uint32_t *topics, const int64_t *this_ids, const int64_t *prevs,
                           const int64_t *now_ns, const uint8_t *payloads,
                           const uint32_t *offsets)
{
    for (uint32_t i = 0; i < n; i++)
        if (!arrival_ok(a, legs[i], topics[i], this_ids[i]) || offsets[i + 1] < offsets[i])
            return -EINVAL;
    call_begin(a);
    for (uint32_t i = 0; i < n; i++) {
        int rc = offer_one(a, legs[i], topics[i], this_ids[i], prevs[i], payloads + offsets[i],
                           offsets[i + 1] - offsets[i], now_ns[i], (int32_t)i);
        if (rc)
            return rc;
    }
    return call_end(a);
}

int wsgw_arb_set_live(wsgw_arbiter *a, uint32_t leg, int live, int64_t now_ns)
{
    (void)now_ns;
    if (leg >= a->legs)
        return -EINVAL;
    call_begin(a);
    a->leg[leg].live = live != 0;
    if (!live) {
        for (uint32_t i = 0; i < a->n_order; i++) {
            uint32_t topic = a->order[i];
            const struct arb_topic *t = &a->topics[topic];
            if (t->n_held && every_live_leg_passed(a, t))
                declare_hole(a, topic);
        }
    }
    return call_end(a);
}

int wsgw_arb_restart(wsgw_arbiter *a, uint32_t topic)
{
    if (topic >= a->max_topics)
        return -EINVAL;
    struct arb_topic *t = &a->topics[topic];
    if (!t->exists || !t->linked)
        return 0;
    t->after_loss = 1;
    return 1;
}

int wsgw_arb_expire(wsgw_arbiter *a, int64_t now_ns)
{
    call_begin(a);
    expire_due(a, now_ns);
    return call_end(a);
}

int wsgw_arb_deadline(const wsgw_arbiter *a, int64_t *at)
{
    int found = 0;
    int64_t best = 0;
    if (!a->held_total)
        return 0; /* the common case, on every engine offer */
    for (uint32_t i = 0; i < a->n_order; i++) {
        const struct arb_topic *t = &a->topics[a->order[i]];
        if (!t->has_hole)
            continue;
        int64_t due = hole_due(a, t);
        if (!found || due < best) {
            best = due;
            found = 1;
        }
    }
    if (found)
        *at = best;
    return found;
}

void wsgw_arb_set_unread_probe(wsgw_arbiter *a, wsgw_arb_unread_fn fn, void *ctx)
{
    a->unread = fn;
    a->unread_ctx = ctx;
}

int wsgw_arb_set_max_hold(wsgw_arbiter *a, int64_t max_hold_ns)
{
    if (max_hold_ns < 0)
        return -EINVAL;
    a->max_hold_ns = max_hold_ns > a->hold_ns ? max_hold_ns : a->hold_ns;
    return 0;
}

const struct wsgw_arb_out *wsgw_arb_outputs(const wsgw_arbiter *a)
{
    return a->out;
}

int wsgw_arb_leg_stats(const wsgw_arbiter *a, uint32_t leg, struct wsgw_arb_leg_stats *out)
{
    if (leg >= a->legs)
        return -EINVAL;
    const struct arb_leg *l = &a->leg[leg];
    memset(out, 0, sizeof(*out));
    out->won = l->won;
    out->late = l->late;
    out->lag_count = l->lag_count;
    out->lag_at = l->lag_at;
    out->live = (uint32_t)l->live;
    return 0;
}

int wsgw_arb_lag_samples(const wsgw_arbiter *a, uint32_t leg, int64_t *out, uint32_t cap)
{
    if (leg >= a->legs)
        return -EINVAL;
    uint32_t n = a->leg[leg].lag_count < cap ? a->leg[leg].lag_count : cap;
    memcpy(out, a->leg[leg].lag, (size_t)n * sizeof(int64_t));
    return (int)n;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

int wsgw_arb_lag_percentile(const wsgw_arbiter *a, uint32_t leg, double q, int64_t *ns)
{
    if (leg >= a->legs)
        return -EINVAL;
    uint32_t n = a->leg[leg].lag_count;
    if (!n)
        return 0;
    int64_t sorted[WSGW_ARB_LAG_SAMPLES];
    memcpy(sorted, a->leg[leg].lag, (size_t)n * sizeof(int64_t));
    qsort(sorted, n, sizeof(int64_t), cmp_i64);
    double at = q / 100 * n; /* the reference's int(q / 100 * len) */
    uint32_t i = at <= 0 ? 0 : (at >= n - 1 ? n - 1 : (uint32_t)at);
    *ns = sorted[i];
    return 1;
}

void wsgw_arb_totals(const wsgw_arbiter *a, struct wsgw_arb_totals *out)
{
    memset(out, 0, sizeof(*out));
    out->duplicates = a->duplicates;
    out->lost = a->lost;
    out->held = a->held_total;
    out->arena_free = (uint64_t)a->free_count * ARB_CHUNK;
    out->topics = a->n_order;
}
