/* A ring follower's wake-up: how records written to a ring wake an event loop (an eventfd
 * the loop watches), in one of two modes.
 *
 *  - thread (wsgw_ring_notifier_start): a waiting thread in C sleeps in wsgw_ring_wait on a
 *    reader and, when records arrive, writes to the eventfd, then sleeps until the loop
 *    re-arms it (after reading). It never runs Python, so waking a loop costs no GIL
 *    hand-over: a Python waiting thread would have to take the GIL from a busy publisher
 *    first, up to a whole switch interval (5 ms), every time (a convoy). Works whoever
 *    writes the ring, in any process; costs two wake-ups in series (the thread's futex
 *    wake-up, then the loop's).
 *  - direct (wsgw_ring_notifier_start_direct): for a follower in the writer's own process.
 *    No thread: every write through that writer handle (the hub's publish, the engines' C
 *    feeds) ends with wsgw_ring_notify_local, which writes the eventfd of each armed direct
 *    follower of the writer itself. One wake-up in series (the loop's) instead of two.
 *
 * Protocol: armed means the loop waits for a notification; a notification disarms (only one
 * is ever pending), wsgw_ring_notifier_rearm arms again and notifies at once when records
 * (or the close) arrived meanwhile, so none is lost. In thread mode the reader belongs to
 * the thread while armed and to the loop between a notification and the rearm, never both;
 * in direct mode it belongs to the loop alone (the writer only touches the armed flag and
 * the eventfd). */
#ifndef WSGW_RINGNOTIFY_H
#define WSGW_RINGNOTIFY_H

#include <stdint.h>

#include "wsgw_ring.h"
#include "wsgw_shim.h"

typedef struct wsgw_ring_notifier wsgw_ring_notifier;

/* Start the thread on reader r, writing 1 (8 bytes) to notify_fd per notification. spin_ns
 * as wsgw_ring_wait's. 0, or -errno (ENOMEM, pthread_create's error). */
WSGW_API int wsgw_ring_notifier_start(wsgw_ring_reader *r, int notify_fd, int64_t spin_ns,
                                      wsgw_ring_notifier **out);
/* A direct follower of writer w (this process's handle of r's ring): notified by w's writes,
 * no thread. 0, or -ENOMEM. */
WSGW_API int wsgw_ring_notifier_start_direct(wsgw_ring_reader *r, int notify_fd,
                                             const wsgw_ring_writer *w,
                                             wsgw_ring_notifier **out);
/* Done reading: the next record (or one still there) notifies again. The loop's thread. */
WSGW_API void wsgw_ring_notifier_rearm(wsgw_ring_notifier *n);
/* Notifications sent so far. */
WSGW_API uint64_t wsgw_ring_notifier_count(wsgw_ring_notifier *n);
/* Whether n is a direct follower (1) or has a waiting thread (0). */
WSGW_API int wsgw_ring_notifier_is_direct(wsgw_ring_notifier *n);
/* Stop notifying (a thread: interrupt its wait and join it) and free n; the reader stays
 * attached. Once it returns, no writer touches n's eventfd any more. */
WSGW_API void wsgw_ring_notifier_stop(wsgw_ring_notifier *n);

/* For the ring's writer (msgring.c), after each published slice and on close: notify the
 * armed direct followers of w. One relaxed load when the process has no direct follower. */
void wsgw_ring_notify_local(const wsgw_ring_writer *w);

#endif
