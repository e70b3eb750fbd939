/* wsgw engine: the C fast path of the dataplane (header prediction for established flows).
 *
 * One engine per lcore thread; every structure here is touched by that thread only, so
 * nothing is locked. Python owns every decision: it registers a flow once its TCP
 * connection is ESTABLISHED, writes the flow's receive state into `struct wsgw_flow`, and
 * reads it back after each poll. The C side takes only the common case, RFC 9293's
 * "header prediction" (Van Jacobson): an IPv4/TCP segment for a registered flow with ACK or
 * ACK|PSH, no other flag, seq == RCV.NXT, ack == SND.UNA, the same window as before, no
 * option but a timestamp that passes PAWS (RFC 7323 section 5), and a payload that fits
 * the window we advertised. Its payload is appended to the flow's byte ring and ACKed by
 * policy. For flows Python marks WSGW_FLOW_ACKS it also takes the other common case of a
 * request/response exchange: a segment (data or a pure ACK) that advances SND.UNA, with
 * any non-zero window; it moves snd_una and the window and counts it, and Python runs the
 * ACK processing once per batch. Any other frame is copied, unchanged and in arrival order,
 * to the slow-path arena for Python; once a flow has a frame there, the rest of that flow's
 * frames in the same poll follow it, so Python always sees a flow's segments in order.
 * On the send side C builds the data segments Python decided to send
 * (wsgw_engine_flow_send), from the same per-flow template as its ACKs.
 *
 * Frames come from a DPDK port or, without one, from frames injected by Python (tests,
 * the in-memory link, microbenchmarks); ACKs go to the port or to a capture arena.
 */
#ifndef WSGW_ENGINE_H
#define WSGW_ENGINE_H

#include <stdint.h>

#include "wsgw_shim.h"

enum wsgw_ack_policy {
    WSGW_ACK_DELAYED = 0,    /* every second full segment, or after the delayed-ACK timer */
    WSGW_ACK_EVERY_SECOND = 1, /* every second segment, whatever its size; timer for the odd one */
    WSGW_ACK_IMMEDIATE = 2,  /* one ACK per burst per flow that received data */
};

/* Why a poll returned (bit mask). */
enum wsgw_poll_reason {
    WSGW_POLL_SLOW = 1,      /* slow-path frames are waiting */
    WSGW_POLL_DATA = 2,      /* flows received data (see touched list) */
    WSGW_POLL_TIMER = 4,     /* the deadline Python gave has come */
    WSGW_POLL_COMMAND = 8,   /* another thread called wsgw_engine_wake */
    WSGW_POLL_BUDGET = 16,   /* the time budget ran out */
    WSGW_POLL_TX_FULL = 32,  /* the ACK capture arena (no port) needs draining */
    WSGW_POLL_EXTERNAL = 64, /* the extra fd (wsgw_engine_set_extra_fd) became readable */
};

struct wsgw_engine_conf {
    uint32_t local_ip;           /* host order */
    uint16_t burst;              /* frames per RX burst, <= 64 */
    uint16_t max_flows;          /* flow slots */
    uint32_t slow_arena_bytes;   /* slow-path frame arena; >= 2 bursts of full frames */
    uint16_t slow_max_frames;
    uint16_t verify_checksums;   /* 1: verify IPv4 and TCP checksums in C */
    uint32_t idle_polls_before_sleep; /* empty RX polls before backing off */
    uint32_t sleep_min_ns;       /* first back-off sleep */
    uint32_t sleep_max_ns;       /* back-off ceiling (0: never sleep: busy polling) */
    uint32_t delayed_ack_ns;     /* delayed-ACK timer */
    uint16_t fast_path;          /* 0: every frame goes to the slow path */
    uint16_t ts_hz;              /* timestamp clock rate (RFC 7323), e.g. 1000 */
    uint32_t spin_after_tx_ns;   /* after wsgw_engine_flow_send: busy-poll this long before
                                  * backing off (an answer comes within a round trip) */
};

/* One flow, shared with Python (ctypes mirrors this layout; keep them in step). Sequence
 * numbers are the 32-bit wire values. Python writes the "set by Python" fields at register
 * time and after every slow-path change; C writes the rest. */
struct wsgw_flow {
    /* identity, set by Python */
    uint32_t remote_ip;          /* host order */
    uint16_t remote_port;
    uint16_t local_port;
    /* receive state, set by Python, advanced by C */
    uint32_t rcv_nxt;
    uint32_t rcv_adv_right;      /* RCV.NXT + RCV.WND as last advertised (never moves left) */
    uint32_t ts_recent;          /* RFC 7323 TS.Recent */
    uint32_t last_ack_sent;      /* rcv_nxt carried by the last ACK (C or Python) */
    /* send state, set by Python */
    uint32_t snd_una;            /* expected ACK field (header prediction) */
    uint32_t snd_nxt;            /* SEQ of our ACKs (SND.MAX) */
    uint16_t snd_wnd_field;      /* expected raw window field */
    uint8_t rcv_wscale;
    uint8_t ts_enabled;
    uint32_t ts_offset;          /* our TSval = now * ts_hz + ts_offset */
    uint32_t rcv_space;          /* bytes Python can still take (its free buffer), at sync */
    uint32_t mss;                /* peer's segment size estimate (for ACK-every-2 full) */
    uint16_t ack_policy;
    uint16_t active;             /* 1: C may take this flow's segments */
    /* byte ring: C writes at head, Python reads at tail; free-running counters */
    uint32_t ring_head;
    uint32_t ring_tail;
    uint32_t ring_size;          /* power of two */
    uint32_t unacked_bytes;      /* received by C since the last ACK */
    uint64_t ack_deadline_ns;    /* delayed-ACK deadline, 0: none */
    /* state C keeps for itself */
    uint32_t delivered_since_sync; /* bytes put in the ring since Python last synced */
    uint16_t slow_pending;       /* a frame of this flow is in the slow arena this poll */
    uint16_t touched;            /* on the touched list this poll */
    /* counters */
    uint64_t fast_segments;
    uint64_t fast_bytes;
    uint64_t slow_segments;
    uint64_t acks_sent;
    uint64_t first_rx_ns;        /* RX time of the oldest byte Python has not synced yet */
    /* ACK template: Ethernet + IPv4 + TCP (+ NOP NOP TS), built by Python; C fills in seq,
     * ack, window, timestamps and the TCP checksum. */
    uint16_t ack_len;            /* 54 or 66 */
    uint16_t unacked_segments;   /* received by C since the last ACK */
    uint8_t ack_template[68];
    uint8_t *ring;               /* ring_size bytes, owned by the engine */
    /* ACKs C took (active & WSGW_FLOW_ACKS): C moves snd_una and snd_wnd_field, Python
     * reads these at the next sync to run its ACK processing (RTT, congestion control,
     * send buffer) once per batch. */
    uint32_t snd_wl1;            /* SEQ of the last segment whose window C took */
    uint32_t ack_tsecr;          /* TSecr of the last segment that advanced snd_una */
    uint32_t acks_advanced;      /* segments that moved the send side (advanced snd_una, or
                                  * data with a new window) since the last sync */
    uint32_t pure_acks;          /* counter: data-less ACKs C took */
    /* data segments C built for Python (wsgw_engine_flow_send) */
    uint64_t tx_segments;
    uint64_t tx_bytes;
    uint64_t segments_synced;    /* fast_segments at the last wsgw_engine_flow_sync */
} __attribute__((aligned(64)));

/* `active` bits, set by Python. */
enum wsgw_flow_active {
    WSGW_FLOW_DATA = 1,  /* C may take in-order data segments that do not move snd_una */
    WSGW_FLOW_ACKS = 2,  /* ... and segments (data or not) that advance snd_una, with any
                          * non-zero window: nothing in Python's send side needs a
                          * per-segment decision (no recovery, no FIN sent, no SACK) */
};

struct wsgw_engine_stats {
    uint64_t polls, rx_frames, rx_bursts, empty_polls, sleeps, sleep_ns;
    uint64_t fast_segments, fast_bytes, slow_frames, acks_sent, dropped_slow_full;
    uint64_t bad_ip_checksum, bad_tcp_checksum, not_ipv4, not_for_us;
    uint64_t tx_dropped;
    /* RX burst -> the burst's fast-path bytes appended to their flows' rings (clock read
     * before the burst, then after it), per burst that brought fast-path data */
    uint64_t rx_to_ring_bursts, rx_to_ring_ns_sum, rx_to_ring_ns_max;
    uint64_t fast_acks;          /* segments C took that moved the send side (acks_advanced) */
    uint64_t tx_data_segments, tx_data_bytes; /* wsgw_engine_flow_send */
    uint64_t rx_wakes;           /* back-off sleeps ended by a frame on the RX fd */
    uint64_t bench_dropped;      /* slow-path frames wsgw_bench_flow_echo dropped */
};

struct wsgw_poll_result {
    uint32_t reason;
    uint32_t slow_frames;        /* in the slow arena (offsets/lengths) */
    uint32_t touched;            /* flows with new data or state, in touched[] */
    uint32_t tx_captured;        /* frames in the capture arena (no port) */
    uint64_t now_ns;             /* CLOCK_MONOTONIC at return */
    uint64_t rx_frames;          /* frames received in this poll */
    uint64_t first_rx_ns;        /* clock just before the first RX burst of this poll
                                  * that brought frames (0: none came) */
};

typedef struct wsgw_engine wsgw_engine;

WSGW_API int wsgw_engine_create(const struct wsgw_engine_conf *conf, wsgw_port *port,
                                wsgw_engine **out);
WSGW_API void wsgw_engine_destroy(wsgw_engine *e);
WSGW_API int wsgw_engine_set_fast_path(wsgw_engine *e, int enabled);
WSGW_API int wsgw_engine_set_sleep(wsgw_engine *e, uint32_t idle_polls, uint32_t min_ns,
                                   uint32_t max_ns);
/* Flows: add returns the slot index (>= 0) with the flow zeroed except identity and ring. */
WSGW_API int wsgw_engine_flow_add(wsgw_engine *e, uint32_t remote_ip, uint16_t remote_port,
                                  uint16_t local_port, uint32_t ring_size);
WSGW_API int wsgw_engine_flow_del(wsgw_engine *e, int slot);
WSGW_API struct wsgw_flow *wsgw_engine_flow(wsgw_engine *e, int slot);
WSGW_API int wsgw_engine_flow_lookup(const wsgw_engine *e, uint32_t remote_ip,
                                     uint16_t remote_port, uint16_t local_port);
/* Copy up to max bytes from the flow's ring to dst and advance its tail. */
WSGW_API uint32_t wsgw_engine_flow_read(wsgw_engine *e, int slot, uint8_t *dst, uint32_t max);
/* One flow's hand-over to Python after a poll, in one call: the ring's bytes (up to max,
 * into dst; more may remain, see flow_read) and what C moved since the last sync. Counting
 * starts again (as wsgw_engine_flow_synced), and when a frame of the flow went to the slow
 * path the pending delayed ACK becomes Python's (as wsgw_engine_flow_take_ack). keep_space:
 * the bytes go straight to a reader, not into Python's receive buffer, so rcv_space stays
 * (else it drops by them, as wsgw_engine_flow_synced). */
struct wsgw_flow_sync {
    uint32_t bytes;              /* copied to dst */
    uint32_t rcv_nxt;            /* after every byte in the ring (copied or not) */
    uint32_t rcv_adv_right;
    uint32_t ts_recent;
    uint32_t last_ack_sent;
    uint32_t segments;           /* segments C took since the last sync (pure ACKs too) */
    uint32_t acks;               /* segments that moved the send side (acks_advanced) */
    uint32_t snd_una;
    uint32_t snd_wl1;
    uint32_t ack_tsecr;
    uint32_t unacked_bytes;      /* with slow_pending: what the ACK Python now owes covers */
    uint16_t snd_wnd_field;
    uint16_t slow_pending;
    uint64_t ack_deadline_ns;    /* with slow_pending: the delayed ACK's deadline (0: none) */
    uint64_t first_rx_ns;        /* RX time of the oldest byte synced now (0: none) */
    uint64_t now_ns;             /* clock at the sync */
    uint32_t fed;                /* bytes the flow's feed took since the last sync: RCV.NXT
                                  * moved past them before the bytes copied to dst */
    uint32_t reserved;
};
WSGW_API int wsgw_engine_flow_sync(wsgw_engine *e, int slot, uint8_t *dst, uint32_t max,
                                   struct wsgw_flow_sync *out, int keep_space);
/* Python synced the flow: start counting again (rcv_space drops by what C delivered since
 * the last sync: those bytes are in Python's buffer now). */
WSGW_API void wsgw_engine_flow_synced(wsgw_engine *e, int slot);
/* Hand the pending delayed ACK to Python (returns its deadline, 0: none; the flow's
 * unacked_bytes stay readable) or back to C. Ownership of a flow's ACK moves with the
 * processing: C between polls, Python while it handles the flow's slow-path segments. */
WSGW_API uint64_t wsgw_engine_flow_take_ack(wsgw_engine *e, int slot);
/* Transmit one data segment for a flow Python handed over: payload at SND.NXT with the
 * current ACK, window (from rcv_space, Python's free receive buffer, which the flow keeps)
 * and timestamps, from the flow's template (ACK|PSH). Python decided
 * it may be sent (windows, Nagle) and keeps the bytes for retransmission; C moves snd_nxt,
 * and the ACK it carries settles any delayed ACK C owed. On a port, a segment that finds
 * the transmit queue empty is sent at once; later ones wait for the next poll or
 * wsgw_engine_tx_flush (one burst). Without a port it is captured. The poll then spins
 * for conf.spin_after_tx_ns before backing off (as wsgw_engine_expect_rx). Returns the flow's
 * rcv_adv_right after the segment (>= 0), or a negative errno: not active (-ENOENT), too
 * big for one frame (-EMSGSIZE), no buffer or queue full (-ENOBUFS), held (-EAGAIN). */
WSGW_API int64_t wsgw_engine_flow_send(wsgw_engine *e, int slot, const uint8_t *payload,
                                       uint32_t len, uint32_t rcv_space);
/* Put the frames queued for the port on the wire now. */
WSGW_API void wsgw_engine_tx_flush(wsgw_engine *e);
/* 1: Python has frames waiting for room on the port, and flow_send refuses (-EAGAIN) until
 * it says 0 again: a segment built in C would overtake them. */
WSGW_API void wsgw_engine_set_tx_hold(wsgw_engine *e, int hold);
/* Attach a feed (wsgw_feed.h) to the flow, or detach it (NULL). Attached, it starts
 * disarmed. Deleting the flow detaches it; the caller owns the feed. */
struct wsgw_feed;
WSGW_API int wsgw_engine_flow_set_feed(wsgw_engine *e, int slot, struct wsgw_feed *feed);
WSGW_API void wsgw_engine_flow_give_ack(wsgw_engine *e, int slot, uint64_t deadline_ns,
                                        uint32_t unacked_bytes, uint32_t unacked_segments);

/* Poll: RX bursts through the fast path until there is work for Python, the deadline
 * (absolute CLOCK_MONOTONIC ns, 0: none) comes, or budget_ns runs out. Releases no lock:
 * call it without the GIL (ctypes does). */
WSGW_API int wsgw_engine_poll(wsgw_engine *e, uint64_t deadline_ns, uint64_t budget_ns,
                              struct wsgw_poll_result *out);
WSGW_API void wsgw_engine_wake(wsgw_engine *e);
/* One more fd (or -1: none) whose readiness ends the adaptive back-off sleep, like wake():
 * an event loop's epoll fd when the engine runs inside that loop (dataplane/loop.py). The
 * poll returns WSGW_POLL_EXTERNAL and leaves the fd alone. Busy polling (sleep_max_ns 0)
 * looks at it every 64 empty polls. */
WSGW_API void wsgw_engine_set_extra_fd(wsgw_engine *e, int fd);
/* An fd (or -1: none) that is readable while the port's RX queue holds frames: the adaptive
 * back-off sleeps on it, so a frame that arrives during a nap is taken at once instead of
 * when the nap ends (up to sleep_max_ns later). The af_packet PMD's socket is one: its
 * TPACKET ring marks the fd readable. The poll leaves it alone (rx_burst takes the frame). */
WSGW_API void wsgw_engine_set_rx_fd(wsgw_engine *e, int fd);
/* Python just transmitted (a SYN, a request): an answer is expected within a round trip,
 * so restart the back-off from its shortest sleep and busy-poll for spin_ns first. Without
 * this, an engine that was idle would sleep up to sleep_max_ns before seeing the answer. */
WSGW_API void wsgw_engine_expect_rx(wsgw_engine *e, uint64_t spin_ns);
/* Tests: run on a virtual clock (ns, monotonic like CLOCK_MONOTONIC); 0 returns to the real
 * clock. With a virtual clock the engine never sleeps. */
WSGW_API void wsgw_engine_set_time(wsgw_engine *e, uint64_t now_ns);
/* The engine's clock: the virtual one when set, else CLOCK_MONOTONIC (ns). */
WSGW_API uint64_t wsgw_engine_now(const wsgw_engine *e);
/* Results of the last poll. */
WSGW_API const uint8_t *wsgw_engine_slow_arena(const wsgw_engine *e);
WSGW_API const uint32_t *wsgw_engine_slow_offsets(const wsgw_engine *e);
WSGW_API const uint16_t *wsgw_engine_slow_lengths(const wsgw_engine *e);
WSGW_API const uint32_t *wsgw_engine_touched(const wsgw_engine *e);
/* Without a port: frames in, captured ACK frames out. */
WSGW_API int wsgw_engine_inject(wsgw_engine *e, const uint8_t *buf, const uint32_t *offsets,
                                const uint16_t *lengths, uint32_t n);
WSGW_API uint32_t wsgw_engine_take_tx(wsgw_engine *e, uint8_t *buf, uint32_t buf_len,
                                      uint32_t *offsets, uint16_t *lengths, uint32_t max);
WSGW_API void wsgw_engine_stats(const wsgw_engine *e, struct wsgw_engine_stats *out);
WSGW_API uint64_t wsgw_monotonic_ns(void);

/* Benchmark entry points: in the library only when built for benchmarks (setup.py's
 * WSGW_BENCH: the in-place build of a checkout, `make shim`; never the wheel's). */
#ifdef WSGW_BENCH
/* Microbenchmarks: loops run in C so the ctypes call is not what is measured. */
WSGW_API uint64_t wsgw_bench_flow_lookup(wsgw_engine *e, uint32_t iterations);
/* Benchmark, C alone in the loop: send `frame` on the flow (a data segment from its
 * template), busy-poll the port until reply_len bytes are in its ring, take them (the last
 * round's into last_reply), `rounds` times; rtt_ns[i] is each round trip. Other flows'
 * slow-path frames that come meanwhile are dropped (counted: bench_dropped), and so are the
 * flow's own that repeat data it has (the peer's retransmission after this thread was off
 * the CPU longer than the peer's timer: the next request acknowledges it). The flow must be
 * active with ACKs in C (a quiet, established connection). Its state then moves in C only:
 * Python must withdraw the flow and abort the connection afterwards. Returns rounds, or
 * -ETIMEDOUT, -EPROTO (a segment left the fast path, or more than the reply came), or
 * flow_send's error. */
WSGW_API int64_t wsgw_bench_flow_echo(wsgw_engine *e, int slot, const uint8_t *frame,
                                      uint32_t frame_len, uint32_t reply_len, uint32_t rounds,
                                      uint64_t timeout_ns, uint64_t *rtt_ns, uint8_t *last_reply);
WSGW_API uint64_t wsgw_bench_fast_path(wsgw_engine *e, int slot, const uint8_t *buf,
                                       const uint32_t *offsets, const uint16_t *lengths,
                                       uint32_t n, uint32_t rounds);
WSGW_API uint64_t wsgw_bench_checksum(const uint8_t *buf, uint32_t len, uint32_t iterations);

#endif /* WSGW_BENCH */
#endif
