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
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int armed; /* under mu: the loop is done reading */
    atomic_int stop;
    atomic_uint_fast64_t sent;
};

static void *notifier_main(void *arg)
{
    wsgw_ring_notifier *n = arg;
    const uint64_t one = 1;
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
        ssize_t w;
        do
            w = write(n->fd, &one, sizeof one);
        while (w < 0 && errno == EINTR);
        atomic_fetch_add(&n->sent, 1);
        pthread_mutex_lock(&n->mu);
        while (!n->armed && !atomic_load(&n->stop))
            pthread_cond_wait(&n->cv, &n->mu);
        pthread_mutex_unlock(&n->mu);
        if (rc == -EPIPE)
            break; /* the writer closed the ring: the loop was told, and reads the rest */
    }
    return NULL;
}

WSGW_API int wsgw_ring_notifier_start(wsgw_ring_reader *r, int notify_fd, int64_t spin_ns,
                                      wsgw_ring_notifier **out)
{
    wsgw_ring_notifier *n = calloc(1, sizeof *n);
    if (n == NULL)
        return -ENOMEM;
    n->r = r;
    n->fd = notify_fd;
    n->spin_ns = spin_ns;
    n->armed = 1;
    atomic_init(&n->stop, 0);
    atomic_init(&n->sent, 0);
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

WSGW_API void wsgw_ring_notifier_rearm(wsgw_ring_notifier *n)
{
    pthread_mutex_lock(&n->mu);
    n->armed = 1;
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

WSGW_API uint64_t wsgw_ring_notifier_count(wsgw_ring_notifier *n)
{
    return atomic_load(&n->sent);
}

WSGW_API void wsgw_ring_notifier_stop(wsgw_ring_notifier *n)
{
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
