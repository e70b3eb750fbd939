/* wsgw feed: the C feed path. A flow's received bytes become message ring records inside
 * the engine's poll, with no Python per message or per burst.
 *
 * A feed belongs to one upstream session's connection. Python creates it with the ring
 * writer, the session id, the dialect's topic spec (path 0 is the topic, a plain JSON
 * string) and a payload limit; fills its topic table (topic bytes -> ring topic id, the
 * hub's id for "<session>:<topic>"); attaches it to the connection's engine flow
 * (wsgw_engine_flow_set_feed, on the engine's thread) and arms it.
 *
 * While armed, after every RX burst that appended bytes to the flow, C takes the complete
 * frames at the head of the flow's byte ring while each one is: FIN, text, RSV1-3 clear,
 * unmasked, payload <= max_payload, valid UTF-8, and a JSON text whose topic path holds a
 * plain string found in the table. Each becomes one ring record (session id, topic id,
 * payload, the burst's receive time as CLOCK_REALTIME) and its bytes leave the flow's ring
 * as read: TCP's window and ACKs count them, and the next flow sync reports them (`fed`)
 * so Python's connection moves RCV.NXT past them without seeing them.
 *
 * At the first frame that is anything else (a control frame, a fragment, an unknown topic,
 * an incomplete frame...) the feed disarms and leaves the bytes to Python, which reads them
 * as before. So does any segment of the flow that takes the slow path. Order is kept by the
 * arming rule: Python arms with the TCP sequence number just past the last byte it has
 * fully processed (every message it parsed published, no partial or fragmented message
 * held); C arms only when that is exactly where the bytes it has not handed to Python
 * begin. A stale request (bytes still on their way to Python) is refused, and Python asks
 * again once it processed them. A message therefore never overtakes an earlier one that
 * went through Python.
 *
 * Threads: the engine thread runs the feed and owns its table; arming and reading the
 * counters are safe from any thread. The ring writer takes its own lock (the hub writes
 * from other threads).
 */
#ifndef WSGW_FEED_H
#define WSGW_FEED_H

#include <stdint.h>

#include "wsgw_arbiter.h"
#include "wsgw_identity.h"
#include "wsgw_ring.h"
#include "wsgw_shim.h"
#include "wsgw_topic.h"

#define WSGW_FEED_MAX_TOPICS 1024u /* topics per feed (table slots: twice as many) */
#define WSGW_FEED_TOPIC_MAX 120u   /* longest topic, in bytes */
#define WSGW_FEED_SAMPLES 256u     /* latency samples kept (a ring, newest win) */

struct wsgw_feed_conf {
    wsgw_ring_writer *ring;
    uint32_t session_id;
    uint32_t max_payload;        /* larger frames go to Python */
    struct wsgw_topic_spec spec; /* path 0: the topic (a plain string) */
};

/* Counters, all u64 (bindings read them as one array). */
struct wsgw_feed_stats {
    uint64_t messages;        /* data frames taken: ring records (less ring_errors) */
    uint64_t bytes;           /* their payload bytes */
    uint64_t wire_bytes;      /* frame bytes taken from the flow (headers too) */
    uint64_t writes;          /* ring write calls (one per burst that brought messages) */
    uint64_t stops;           /* times the feed disarmed and left bytes to Python */
    uint64_t arms;            /* arm requests honoured */
    uint64_t arms_refused;    /* arm requests refused (bytes still on their way to Python) */
    uint64_t last_message_ns; /* receive time (CLOCK_REALTIME) of the newest record */
    uint64_t ring_errors;     /* ring writes that failed (the messages are lost, counted) */
    uint64_t samples;         /* latency samples taken so far (see wsgw_feed_samples) */
    uint64_t armed;           /* 1 while armed */
    uint64_t stop_unknown_topic; /* stops at a data frame whose topic is not in the table */
};

typedef struct wsgw_feed wsgw_feed;

WSGW_API uint32_t wsgw_feed_conf_size(void);
WSGW_API int wsgw_feed_create(const struct wsgw_feed_conf *conf, wsgw_feed **out);
/* Detach it first (wsgw_engine_flow_set_feed(e, slot, NULL) or the flow's deletion). */
WSGW_API void wsgw_feed_destroy(wsgw_feed *f);
/* Engine thread: topic bytes -> ring topic id (> 0), with its index (< WSGW_FEED_MAX_TOPICS)
 * in the per-topic counts; topic_id 0 removes it. 0 or -errno (-ENOSPC, -ENAMETOOLONG). */
WSGW_API int wsgw_feed_topic_set(wsgw_feed *f, const uint8_t *name, uint32_t len,
                                 uint32_t topic_id, uint32_t index);
/* Any thread: arm at this TCP sequence number (see above); the engine decides at its next
 * burst or poll. */
WSGW_API void wsgw_feed_arm(wsgw_feed *f, uint32_t seq);
/* Engine thread: stop now (the next bytes go to Python). */
WSGW_API void wsgw_feed_disarm(wsgw_feed *f);
WSGW_API void wsgw_feed_stats(const wsgw_feed *f, struct wsgw_feed_stats *out);
/* Messages per topic index, counts[0..n). Returns n. */
WSGW_API uint32_t wsgw_feed_topic_counts(const wsgw_feed *f, uint64_t *counts, uint32_t n);
/* Latency samples (ns, receive stamp -> record written) taken after sample number `from`,
 * up to max of them (older ones than the last WSGW_FEED_SAMPLES are gone). Returns how
 * many; *next receives the number to pass next time. */
WSGW_API uint32_t wsgw_feed_samples(const wsgw_feed *f, uint64_t from, uint64_t *out,
                                    uint32_t max, uint64_t *next);

/* ---- feed groups: A/B arbitration on the engine's path (issue #19) ----------------------
 *
 * A group's legs carry the same stream. Each leg's feed joins the group (before it is
 * attached); its data frames then go, one by one as C takes them, through the group: the
 * C identity (wsgw_identity.h) of the frame, then the group's one arbiter (wsgw_arbiter.h),
 * then the ring: the first copy of each message is written once, under the group's hub
 * session id and the ring topic id the leg's topic table gives (the group's topic); a copy
 * is dropped (counted per leg), a message ahead of a hole is held, and a hole no leg fills
 * becomes a `$gap` record of the group with the missing count, as the Python path writes
 * (gateway/groups/feed.py). A frame the C identity cannot tell stops the feed: Python reads
 * it and offers it to the same group (wsgw_group_offer_identity), so one arbiter sees every
 * frame of every leg, in each leg's order.
 *
 * Holes expire on the group's clock (CLOCK_REALTIME, the frames' receive stamps): at every
 * offer C checks the group's deadline, and Python's timer calls wsgw_group_expire when the
 * legs are silent. A leg that Python reports down (wsgw_group_set_live) is live again at its
 * next frame. Every call takes the group's lock: legs on several engines, Python's offers,
 * the timer and the figures may call at once. */
typedef struct wsgw_group wsgw_group;

struct wsgw_group_conf {
    wsgw_ring_writer *ring;
    uint32_t hub_id;       /* the session id of the group's records */
    uint32_t gap_topic_id; /* the ring's `$gap` topic */
    uint32_t dialect;      /* enum wsgw_id_dialect */
    uint32_t legs;         /* 1..WSGW_ARB_MAX_LEGS */
    int64_t hold_ns;
    uint32_t max_held;     /* per identity topic */
    uint32_t max_keys;     /* identity topics arbitrated at most (then frames go to Python) */
    uint64_t arena_bytes;  /* held payloads at most */
    char epoch[24];        /* the hub's epoch, hex, in gap records ("" : none) */
    /* Per leg, a session id to publish every copy that leg brought under, as it arrived
     * (its own receive stamp; ring topic `<id>:<topic>`, topics of up to 56 bytes), beside
     * the group's records; 0: not (the default). A measuring aid: each leg's send -> arrival
     * is read from the ring as the group's is (wsgw_bench/failover.py). */
    uint32_t tap_ids[WSGW_ARB_MAX_LEGS];
};

struct wsgw_group_stats {
    uint64_t delivered;     /* records written (first copies) */
    uint64_t gaps;          /* gap records (holes every leg missed) */
    int64_t lost;           /* ids lost in them */
    uint64_t below_floor;   /* copies of what a previous form of the group delivered */
    uint64_t not_told;      /* frames C could not identify (Python's) */
    uint64_t ring_errors;   /* records the ring refused (lost, counted) */
    uint64_t expired;       /* timer expiries that gave holes up (offers do it inside) */
    uint64_t offer_ns;      /* time in the timed engine offers (identity, arbiter, staging) */
    uint64_t offers;        /* frames the engine's C feeds offered */
    uint64_t cost_samples;  /* engine offers timed (one in 16; wsgw_group_cost_samples) */
    uint64_t python_offers; /* frames Python offered (read loops: kernel legs, ...) */
    uint64_t unread_waits;  /* due holes a leg's unread input held (per leg asked) */
    uint64_t leg_messages[WSGW_ARB_MAX_LEGS]; /* arrivals with an identity, per leg */
    int64_t leg_newest[WSGW_ARB_MAX_LEGS];    /* the id of each leg's newest arrival */
    uint64_t leg_live[WSGW_ARB_MAX_LEGS];
};

WSGW_API uint32_t wsgw_group_conf_size(void);
WSGW_API int wsgw_group_create(const struct wsgw_group_conf *conf, wsgw_group **out);
/* Drops the caller's reference; feeds that joined hold theirs until they are destroyed. */
WSGW_API void wsgw_group_release(wsgw_group *g);
/* Closed: every frame offered is refused (returns 0: Python's), nothing more is written. */
WSGW_API void wsgw_group_close(wsgw_group *g);
/* Copies up to `last` of this identity topic are not news (a previous form delivered them). */
WSGW_API int wsgw_group_floor(wsgw_group *g, const char *topic, uint32_t len, int64_t last);
/* A book of the group's stream on this topic (the legs' topic name) resubscribes: each of
 * its identity topics whose messages are linked restarts at its next unlinked message (the
 * venue's snapshot; wsgw_arb_restart), and a floor of it goes (the arbiter's own `last` is
 * past it). Returns the keys restarted (0: none arrived yet, or none linked). */
WSGW_API int wsgw_group_restart(wsgw_group *g, const char *topic, uint32_t len);
/* One frame of `leg` (its ring topic id and topic name, for the record and a gap's reason):
 * 1 taken (arbitrated and written, or dropped as a copy), 0 C cannot tell (Python's), -errno. */
WSGW_API int wsgw_group_offer(wsgw_group *g, uint32_t leg, uint32_t topic_id, const char *name,
                              uint32_t name_len, const uint8_t *payload, uint32_t len,
                              int64_t ts_ns);
/* As wsgw_group_offer, as the engine offers (timed in offer_ns): the winners are staged until
 * wsgw_group_flush (a C caller's burst; benchmarks). */
WSGW_API int wsgw_group_offer_staged(wsgw_group *g, uint32_t leg, uint32_t topic_id,
                                     const char *name, uint32_t name_len, const uint8_t *payload,
                                     uint32_t len, int64_t ts_ns);
WSGW_API void wsgw_group_flush(wsgw_group *g);
/* The same with an identity Python found: 1 taken, 0 refused (closed, keys full), -errno. */
WSGW_API int wsgw_group_offer_identity(wsgw_group *g, uint32_t leg, uint32_t topic_id,
                                       const char *name, uint32_t name_len,
                                       const struct wsgw_identity *id, const uint8_t *payload,
                                       uint32_t len, int64_t ts_ns);
WSGW_API int wsgw_group_set_live(wsgw_group *g, uint32_t leg, int live, int64_t now_ns);
/* The leg's kernel socket (-1: none): while it holds unread bytes, a hole that is due waits
 * for the leg (its reader runs late), within the max hold (wsgw_arb_set_unread_probe). The
 * caller clears it before the socket closes. 0 or -EINVAL. */
WSGW_API int wsgw_group_set_leg_fd(wsgw_group *g, uint32_t leg, int fd);
/* The leg's read loop offers a batch frame by frame (busy 1) or is done (0): meanwhile the
 * rest of the batch counts as unread input, as the socket's bytes do. No lock. */
WSGW_API void wsgw_group_set_leg_busy(wsgw_group *g, uint32_t leg, int busy);
/* The leg's reader holds frames it read from its socket and has not offered yet (1: its
 * connection queued them; 0: all offered): they count as unread input too, which FIONREAD
 * no longer sees. No lock. */
WSGW_API void wsgw_group_set_leg_queued(wsgw_group *g, uint32_t leg, int queued);
WSGW_API int wsgw_group_expire(wsgw_group *g, int64_t now_ns);
WSGW_API int wsgw_group_deadline(wsgw_group *g, int64_t *at);
WSGW_API void wsgw_group_stats(wsgw_group *g, struct wsgw_group_stats *out);
/* The latest timed engine offers' costs (ns), up to cap (at most 1024). Returns how many. */
WSGW_API uint32_t wsgw_group_cost_samples(wsgw_group *g, uint64_t *out, uint32_t cap);
WSGW_API int wsgw_group_leg_stats(wsgw_group *g, uint32_t leg, struct wsgw_arb_leg_stats *out);
WSGW_API int wsgw_group_lag_percentile(wsgw_group *g, uint32_t leg, double q, int64_t *ns);
WSGW_API void wsgw_group_totals(wsgw_group *g, struct wsgw_arb_totals *out);
/* Per identity topic the last id delivered (the floors of the group's next form): up to max
 * keys, names NUL-separated into names (cap bytes). Returns how many. */
WSGW_API uint32_t wsgw_group_last(wsgw_group *g, int64_t *last, char *names, uint32_t cap,
                                  uint32_t max);
/* The group's last `$gap` record: its ring seq (0: none yet) and its JSON into body (up to
 * cap bytes, *len of them), so that a consumer subscribing later learns of it as the hub's
 * own gaps tell (the record and this answer change together, under the group's lock). */
WSGW_API int64_t wsgw_group_last_gap(wsgw_group *g, char *body, uint32_t cap, uint32_t *len);
/* Engine thread, before the feed is attached: its frames go through the group as `leg`. */
WSGW_API int wsgw_feed_join_group(wsgw_feed *f, wsgw_group *g, uint32_t leg);

/* ---- engine side (engine.c) ------------------------------------------------------------ */
struct wsgw_flow;
/* Honour a pending arm request against the flow's position (its unread bytes start at
 * seq rcv_nxt - unread). */
void wsgw_feed_requests(wsgw_feed *f, const struct wsgw_flow *flow);
/* Take what the feed can from the flow's byte ring; rx_mono_ns: the burst's RX time on
 * now_mono_ns's clock. Returns the bytes taken. */
uint32_t wsgw_feed_run(wsgw_feed *f, struct wsgw_flow *flow, uint64_t rx_mono_ns,
                       uint64_t now_mono_ns);
/* The same before the poll returns: an incomplete frame left in the ring goes to Python. */
uint32_t wsgw_feed_finish(wsgw_feed *f, struct wsgw_flow *flow, uint64_t rx_mono_ns,
                          uint64_t now_mono_ns);
int wsgw_feed_armed(const wsgw_feed *f);
void wsgw_feed_stop(wsgw_feed *f);
void wsgw_feed_attached(wsgw_feed *f);

#endif
