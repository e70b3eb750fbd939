/* The ring notifier: see wsgw_ringnotify.h. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "wsgw_ringnotify.h"

#define NOTIFIER_WAIT_NS 1000000000LL /* longest wait: how often it looks at `stop` */

struct wsgw_ring_notifier {
    wsgw_ring_reader *r;
    int fd;
    int64_t spin_ns;
    const wsgw_ring_writer *writer; /* direct mode: the writer whose writes notify; else NULL */
    struct wsgw_ring_notifier *next; /* direct mode: the registry's list, under registry_mu */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int armed; /* thread mode, under mu: the loop is done reading */
    atomic_int direct_armed; /* direct mode: the loop waits for a notification */
    int closed_told; /* direct mode, loop thread: the close was notified */
    atomic_int stop;
    atomic_uint_fast64_t sent;
};

/* The direct followers of this process, of every writer: a short list (one per event loop
 * with /v1/stream consumers, one per NATS sink), walked by the writers under the mutex. */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static wsgw_ring_notifier *registry;
static atomic_uint registry_count;

static void notify(wsgw_ring_notifier *n)
{
    const uint64_t one = 1;
    ssize_t w;
    do
        w = write(n->fd, &one, sizeof one);
    while (w < 0 && errno == EINTR);
    atomic_fetch_add(&n->sent, 1);
}

/* Notify n unless a notification is already pending (one writer or the loop wins). */
static void notify_if_armed(wsgw_ring_notifier *n)
{
    if (atomic_load_explicit(&n->direct_armed, memory_order_relaxed) &&
        atomic_exchange(&n->direct_armed, 0))
        notify(n);
}

void wsgw_ring_notify_local(const wsgw_ring_writer *w)
{
    /* The writer's seq_cst fence after its write_pos store comes first (msgring.c's append):
     * Dekker with the rearm's armed store, then its write_pos load. */
    if (atomic_load_explicit(&registry_count, memory_order_relaxed) == 0)
        return;
    pthread_mutex_lock(&registry_mu);
    for (wsgw_ring_notifier *n = registry; n != NULL; n = n->next)
        if (n->writer == w)
            notify_if_armed(n);
    pthread_mutex_unlock(&registry_mu);
}

static void *notifier_main(void *arg)
{
    wsgw_ring_notifier *n = arg;
    while (!atomic_load(&n->stop)) {
        int rc = wsgw_ring_wait(n->r, NOTIFIER_WAIT_NS, n->spin_ns);
        if (atomic_load(&n->stop))
            break;
        if (rc == 0 || rc == -ECANCELED || rc == -EINTR)
            continue; /* timed out, interrupted, a signal: wait again */
        if (rc != 1 && rc != -EPIPE)
            break; /* the reader is broken: nothing more will come */
        pthread_mutex_lock(&n->mu);
        n->armed = 0;
        pthread_mutex_unlock(&n->mu);
        notify(n);
        pthread_mutex_lock(&n->mu);
        while (!n->armed && !atomic_load(&n->stop))
            pthread_cond_wait(&n->cv, &n->mu);
        pthread_mutex_unlock(&n->mu);
        if (rc == -EPIPE)
            break; /* the writer closed the ring: the loop was told, and reads the rest */
    }
    return NULL;
}

static wsgw_ring_notifier *notifier_new(wsgw_ring_reader *r, int notify_fd, int64_t spin_ns)
{
    wsgw_ring_notifier *n = calloc(1, sizeof *n);
    if (n == NULL)
        return NULL;
    n->r = r;
    n->fd = notify_fd;
    n->spin_ns = spin_ns;
    n->armed = 1;
    atomic_init(&n->direct_armed, 0);
    atomic_init(&n->stop, 0);
    atomic_init(&n->sent, 0);
    return n;
}

WSGW_API int wsgw_ring_notifier_start(wsgw_ring_reader *r, int notify_fd, int64_t spin_ns,
                                      wsgw_ring_notifier **out)
{
    wsgw_ring_notifier *n = notifier_new(r, notify_fd, spin_ns);
    if (n == NULL)
        return -ENOMEM;
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    int rc = pthread_create(&n->thread, NULL, notifier_main, n);
    if (rc != 0) {
        pthread_mutex_destroy(&n->mu);
        pthread_cond_destroy(&n->cv);
        free(n);
        return -rc;
    }
    *out = n;
    return 0;
}

/* Direct mode: arm, then look at the ring: what was written (or the close) before the arm
 * was seen by no writer, so the loop is told now. Loop thread (it owns the reader). */
static void direct_arm(wsgw_ring_notifier *n)
{
    atomic_store(&n->direct_armed, 1);
    atomic_thread_fence(memory_order_seq_cst);
    int rc = wsgw_ring_wait(n->r, 0, 0);
    if (rc == -ECANCELED) /* an interrupt of the reader: it has no waiter to cancel here */
        rc = wsgw_ring_wait(n->r, 0, 0);
    if (rc == -EPIPE) {
        if (n->closed_told)
            return; /* drained and closed: nothing will come, and the loop knows */
        n->closed_told = 1;
    } else if (rc != 1) {
        return;
    }
    notify_if_armed(n);
}

WSGW_API int wsgw_ring_notifier_start_direct(wsgw_ring_reader *r, int notify_fd,
                                             const wsgw_ring_writer *w,
                                             wsgw_ring_notifier **out)
{
    wsgw_ring_notifier *n = notifier_new(r, notify_fd, 0);
    if (n == NULL)
        return -ENOMEM;
    n->writer = w;
    pthread_mutex_lock(&registry_mu);
    n->next = registry;
    registry = n;
    atomic_fetch_add(&registry_count, 1);
    pthread_mutex_unlock(&registry_mu);
    /* A record written between the reader's attach and the count's increment was seen by
     * no one: the arm looks. */
    direct_arm(n);
    *out = n;
    return 0;
}

WSGW_API void wsgw_ring_notifier_rearm(wsgw_ring_notifier *n)
{
    if (n->writer != NULL) {
        direct_arm(n);
        return;
    }
    pthread_mutex_lock(&n->mu);
    n->armed = 1;
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

WSGW_API uint64_t wsgw_ring_notifier_count(wsgw_ring_notifier *n)
{
    return atomic_load(&n->sent);
}

WSGW_API int wsgw_ring_notifier_is_direct(wsgw_ring_notifier *n) { return n->writer != NULL; }

WSGW_API void wsgw_ring_notifier_stop(wsgw_ring_notifier *n)
{
    if (n->writer != NULL) {
        /* Under the mutex: no writer is notifying n when it is unlinked, none will after. */
        pthread_mutex_lock(&registry_mu);
        for (wsgw_ring_notifier **p = &registry; *p != NULL; p = &(*p)->next) {
            if (*p == n) {
                *p = n->next;
                atomic_fetch_sub(&registry_count, 1);
                break;
            }
        }
        pthread_mutex_unlock(&registry_mu);
        free(n);
        return;
    }
    atomic_store(&n->stop, 1);
    wsgw_ring_reader_interrupt(n->r);
    pthread_mutex_lock(&n->mu);
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->thread, NULL);
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cv);
    free(n);
}
