/* A/B arbitration of a feed group in C (issue #19): the same rules as the Python reference,
 * gateway/groups/arbiter.py, for the engine's per-message path. Two or more legs carry the
 * same stream; per topic (a small integer: the ring topic id), the first copy of each
 * message wins, later copies are dropped with the leg's lag sampled, a message ahead of a
 * hole is held until a leg fills the hole, every live leg went past it, or it is due:
 * hold_ns after it opened and after the newest arrival of every live leg that has not gone
 * past it (a moving leg is waited for, a leg silent for hold_ns is not), max_hold_ns after it
 * opened at most; then the hole is reported lost. A due hole first asks the caller's probe
 * (wsgw_arb_set_unread_probe) about each live leg that has not gone past it: one that still
 * has unread input counts as arriving now (the hole waits a hold more, within max_hold_ns).
 * An offer counts its leg's arrival, then gives up the holes due at its stamp, then is
 * arbitrated; when no leg arrived for longer than hold_ns (a stall of the gateway or the whole
 * feed), every leg gets the hold afresh.
 * Sans-IO: the caller passes each arrival and its clock.
 *
 * Outputs: each call (offer, offer_columns, set_live, expire) replaces the arbiter's output
 * list (wsgw_arb_outputs); it and the payload pointers in it stay valid until the next call
 * on the arbiter. A delivered payload is the caller's own pointer when the message went out
 * from its arrival (src >= 0 in a batch: the arrival's index), or a copy the arbiter owns when
 * it was held (src -1). Held payloads live in an arena of arena_bytes: when one does not fit,
 * the oldest hole of any topic is declared lost (its held messages go out) until it does, as
 * the max_held rule does per topic; a payload larger than the whole arena is not held at all
 * (its hole is lost at once). The common path (in-order delivery, duplicate drop) allocates
 * nothing. Not thread-safe: one caller at a time. */
#ifndef WSGW_ARBITER_H
#define WSGW_ARBITER_H

#include <stdint.h>

#include "wsgw_shim.h"

#define WSGW_ARB_MAX_LEGS 8
#define WSGW_ARB_LAG_SAMPLES 1024 /* lag samples kept per leg (a ring: the latest ones) */
/* `prev` of a message the exchange does not link (only order is known); not a valid id. */
#define WSGW_ARB_NO_PREV INT64_MIN
/* How long a hole may wait at most for a leg that keeps moving, unless set (>= hold_ns). */
#define WSGW_ARB_DEFAULT_MAX_HOLD_NS 10000000000LL /* gateway/groups/arbiter.py says why */
/* `missing` of a loss whose count is unknown (never, today: held messages are linked). */
#define WSGW_ARB_NO_MISSING INT64_MIN

enum wsgw_arb_kind { WSGW_ARB_DELIVERED = 1, WSGW_ARB_LOST = 2 };

typedef struct wsgw_arbiter wsgw_arbiter;

/* One output. Delivered: topic, this_id, leg, arrived_ns, payload/len/src. Lost: topic,
 * after (the last delivered), this_id (`before`: the first delivered after the hole),
 * missing (ids lost: the next message's prev minus after). */
struct wsgw_arb_out {
    uint32_t kind; /* enum wsgw_arb_kind */
    uint32_t topic;
    int64_t this_id;
    int64_t after;
    int64_t missing;
    int64_t arrived_ns;
    const uint8_t *payload;
    uint32_t len;
    int32_t src; /* the arrival's index in the call, -1: a copy owned by the arbiter */
    uint32_t leg;
    uint32_t reserved;
};

struct wsgw_arb_leg_stats {
    uint64_t won;  /* messages this leg brought first */
    uint64_t late; /* copies it brought after the winner */
    uint32_t lag_count; /* lag samples kept (<= WSGW_ARB_LAG_SAMPLES) */
    uint32_t lag_at;    /* where the next sample goes once the ring is full */
    uint32_t live;
    uint32_t reserved;
};

struct wsgw_arb_totals {
    uint64_t duplicates; /* copies dropped, every leg */
    int64_t lost;        /* ids no leg brought (sum of the losses' missing) */
    uint64_t held;       /* messages held now, every topic */
    uint64_t arena_free; /* arena bytes free now (in whole chunks) */
    uint32_t topics;     /* topics seen */
    uint32_t reserved;
};

/* legs 1..WSGW_ARB_MAX_LEGS, hold_ns >= 0, max_held >= 1 (per topic), topics 0..max_topics-1,
 * won_window: winners' arrival times kept per topic for the lag samples, arena_bytes: held
 * payloads at most. 0 or -errno (EINVAL, ENOMEM). */
WSGW_API int wsgw_arb_create(uint32_t legs, int64_t hold_ns, uint32_t max_held,
                             uint32_t max_topics, uint32_t won_window, uint64_t arena_bytes,
                             wsgw_arbiter **out);
WSGW_API void wsgw_arb_destroy(wsgw_arbiter *a);

/* One arrival on `leg`: outputs (count, or -errno: EINVAL for a bad leg/topic/id, ENOMEM). */
WSGW_API int wsgw_arb_offer(wsgw_arbiter *a, uint32_t leg, uint32_t topic, int64_t this_id,
                            int64_t prev, const uint8_t *payload, uint32_t len, int64_t now_ns);
/* n arrivals as columns, in order; arrival i's payload is payloads[offsets[i]..offsets[i+1]).
 * Every arrival is checked before any is taken (-EINVAL: none taken). Outputs of them all. */
WSGW_API int wsgw_arb_offer_columns(wsgw_arbiter *a, uint32_t n, const uint32_t *legs,
                                    const uint32_t *topics, const int64_t *this_ids,
                                    const int64_t *prevs, const int64_t *now_ns,
                                    const uint8_t *payloads, const uint32_t *offsets);
/* A leg went down (or came back): a down leg is not waited for. */
WSGW_API int wsgw_arb_set_live(wsgw_arbiter *a, uint32_t leg, int live, int64_t now_ns);
/* The topic's next unlinked message (a resubscribe's snapshot) restarts it even when its id
 * was delivered, as after a loss (arbiter.py's restart): 1 done, 0 not (the topic never
 * arrived, or its messages are not linked: trades never restart), -EINVAL. No outputs. */
WSGW_API int wsgw_arb_restart(wsgw_arbiter *a, uint32_t topic);
/* Holes that are due are losses: what they held goes out. */
WSGW_API int wsgw_arb_expire(wsgw_arbiter *a, int64_t now_ns);
/* The bound on a hole's wait (raised to hold_ns): 0 or -EINVAL. */
WSGW_API int wsgw_arb_set_max_hold(wsgw_arbiter *a, int64_t max_hold_ns);
/* Whether `leg` still has input its caller has not offered (bytes in its socket, a reader
 * running late): nonzero yes. Called only when a hole is due, for each live leg that has not
 * gone past it, in leg order, inside offer/expire (under the caller's own locks). */
typedef int (*wsgw_arb_unread_fn)(void *ctx, uint32_t leg);
/* The probe (NULL: none). A leg it says has unread input counts as arriving at the time of
 * the call, so a due hole waits a hold more for it, never past max_hold_ns (the reference's
 * `unread`). */
WSGW_API void wsgw_arb_set_unread_probe(wsgw_arbiter *a, wsgw_arb_unread_fn fn, void *ctx);
/* 1 and *at = when expire may have work (a moving leg pushes it later), 0 while nothing is
 * held. */
WSGW_API int wsgw_arb_deadline(const wsgw_arbiter *a, int64_t *at);
/* The last call's outputs (as many as it returned). */
WSGW_API const struct wsgw_arb_out *wsgw_arb_outputs(const wsgw_arbiter *a);

WSGW_API int wsgw_arb_leg_stats(const wsgw_arbiter *a, uint32_t leg,
                                struct wsgw_arb_leg_stats *out);
/* The leg's lag samples in storage order (as the Python reference's list): count copied. */
WSGW_API int wsgw_arb_lag_samples(const wsgw_arbiter *a, uint32_t leg, int64_t *out,
                                  uint32_t cap);
/* The q-th percentile (0..100) of the leg's lag samples: 1 and *ns, 0 without samples. */
WSGW_API int wsgw_arb_lag_percentile(const wsgw_arbiter *a, uint32_t leg, double q,
                                     int64_t *ns);
WSGW_API void wsgw_arb_totals(const wsgw_arbiter *a, struct wsgw_arb_totals *out);

#endif
