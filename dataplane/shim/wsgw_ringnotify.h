/* A ring follower's waiting thread, in C: it sleeps in wsgw_ring_wait on a reader and, when
 * records arrive, writes to an eventfd that an event loop watches, then sleeps until the
 * loop re-arms it (after reading). It never runs Python, so waking a loop costs no GIL
 * hand-over: a Python waiting thread would have to take the GIL from a busy publisher
 * first, up to a whole switch interval (5 ms), every time (a convoy).
 *
 * Protocol: the reader belongs to the notifier's thread while armed (it waits on it) and to
 * the loop between a notification and wsgw_ring_notifier_rearm (it reads it): never both. */
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
/* Done reading: the next record (or one still there) notifies again. */
WSGW_API void wsgw_ring_notifier_rearm(wsgw_ring_notifier *n);
/* Notifications sent so far. */
WSGW_API uint64_t wsgw_ring_notifier_count(wsgw_ring_notifier *n);
/* Stop the thread (interrupting its wait), join it and free n; the reader stays attached. */
WSGW_API void wsgw_ring_notifier_stop(wsgw_ring_notifier *n);

#endif
