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
