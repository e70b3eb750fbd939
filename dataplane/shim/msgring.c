/* The shared-memory message ring: layout and protocol in wsgw_ring.h.
 *
 * Hot paths (append, read) allocate nothing, make no system call except FUTEX_WAKE when a
 * reader sleeps, and keep producer-written and reader-written words on separate cache lines.
 * The writer/reader consistency is the seqlock of DPDK's rte_seqlock: a relaxed store of the
 * announcement, a release fence, the data stores; on the reader side the data loads, an
 * acquire fence, then the re-check.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shim_internal.h"
#include "wsgw_ring.h"
#include "wsgw_ringnotify.h"
#include "wsgw_sink.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "the ring needs lock-free 64-bit atomics");
_Static_assert(sizeof(struct wsgw_ring_rec) == WSGW_RING_REC_HDR, "record header is 32 bytes");
_Static_assert(sizeof(struct wsgw_ring_topic) == 64, "topic entry is one cache line");
_Static_assert(sizeof(struct wsgw_ring_view) == 32, "bindings unpack views as <QQIIII");
_Static_assert(sizeof(struct wsgw_ring_read_info) == 8 * 8, "bindings read info as u64[8]");
_Static_assert(sizeof(struct wsgw_ring_reader_slot) == 128, "a reader slot is two lines");
_Static_assert(WSGW_RING_READERS_OFFSET + WSGW_RING_MAX_READERS *
                   sizeof(struct wsgw_ring_reader_slot) == 2 * WSGW_RING_PAGE,
               "the reader table fills page 1 after the wait queue's line");

#define CACHE_ALIGNED _Alignas(WSGW_RING_CACHELINE)
/* A message may take at most half the buffer, so a record plus the padding before it
 * always fits, and capped so a reader's private copy arena stays reasonable. */
#define MAX_PAYLOAD_CAP (64u << 20)
/* Writes are published in slices of at most capacity/2 bytes (at least one message). */
#define WRITE_CHUNK 64

/* Page 0. Line 0 is written once, before the file gets its name. Line 1 is the producer's:
 * written once per published slice, read by every reader poll. */
struct wsgw_ring_ctl {
    uint64_t magic;
    uint32_t layout;
    uint32_t data_offset;
    uint64_t capacity;
    uint32_t max_payload;
    uint32_t max_topics;
    uint32_t topics_offset;
    uint32_t waitq_offset;
    uint64_t created_ns;
    uint64_t instance;
    uint32_t writer_pid;
    _Atomic uint32_t state;

    CACHE_ALIGNED _Atomic uint64_t version; /* odd while tail or write pairs change */
    _Atomic uint64_t claim_pos;             /* bytes below claim_pos - capacity may be gone */
    _Atomic uint64_t write_pos;             /* records below it are complete */
    _Atomic uint64_t write_seq;             /* last published sequence */
    _Atomic uint64_t tail_pos;              /* oldest intact record */
    _Atomic uint64_t tail_seq;              /* first sequence at or after tail_pos */
    _Atomic uint32_t topic_count;           /* highest registered topic id */

    CACHE_ALIGNED _Atomic uint64_t wait_hint; /* mode << 48 | spin_ns; 0: no advice */
    uint32_t readers_offset;                  /* layout 2: the reader table, in page 1 */
    uint32_t max_readers;
    _Atomic uint32_t writer_cpu; /* the feed engine's CPU + 1; 0: none published */
};
/* The offsets documented in wsgw_ring.h are the layout: pin them. */
_Static_assert(offsetof(struct wsgw_ring_ctl, layout) == 8, "layout");
_Static_assert(offsetof(struct wsgw_ring_ctl, capacity) == 16, "capacity");
_Static_assert(offsetof(struct wsgw_ring_ctl, max_topics) == 28, "max_topics");
_Static_assert(offsetof(struct wsgw_ring_ctl, instance) == 48, "instance");
_Static_assert(offsetof(struct wsgw_ring_ctl, state) == 60, "state");
_Static_assert(offsetof(struct wsgw_ring_ctl, version) == 64, "producer line at 64");
_Static_assert(offsetof(struct wsgw_ring_ctl, write_pos) == 80, "write_pos");
_Static_assert(offsetof(struct wsgw_ring_ctl, tail_seq) == 104, "tail_seq");
_Static_assert(offsetof(struct wsgw_ring_ctl, topic_count) == 112, "topic_count");
_Static_assert(offsetof(struct wsgw_ring_ctl, wait_hint) == 128, "wait_hint at 128");
_Static_assert(offsetof(struct wsgw_ring_ctl, readers_offset) == 136, "readers_offset at 136");
_Static_assert(offsetof(struct wsgw_ring_ctl, max_readers) == 140, "max_readers at 140");
_Static_assert(offsetof(struct wsgw_ring_ctl, writer_cpu) == 144, "writer_cpu at 144");
_Static_assert(offsetof(struct wsgw_ring_rec, seq) == 16, "record seq");
_Static_assert(sizeof(struct wsgw_ring_ctl) <= WSGW_RING_PAGE, "ctl fits page 0");

/* Page 1: the only words readers write. notify is the futex word: the writer bumps it and
 * calls FUTEX_WAKE only when waiters != 0, so publishing costs one load when nobody sleeps. */
struct wsgw_ring_waitq {
    _Atomic uint32_t notify;
    _Atomic uint32_t waiters;
};

struct wsgw_ring_writer {
    /* hot: used on every append */
    CACHE_ALIGNED struct wsgw_ring_ctl *ctl;
    struct wsgw_ring_waitq *wq;
    uint8_t *data;
    uint64_t cap, mask;
    uint64_t pos, seq;           /* private copies of write_pos / write_seq */
    uint64_t tail_pos, tail_seq; /* private copies of the tail */
    uint64_t version;
    uint32_t max_payload, max_topics;
    struct wsgw_ring_writer_stats st;
    /* Writers: the hub (Python threads) and the engines' feeds (C, in the poll) append to
     * one ring; every writer entry point takes this spinlock. Uncontended it is one
     * atomic exchange; a contender waits for one append (microseconds). */
    _Atomic int lock;
    /* Holders of this writer: its owner (until wsgw_ring_writer_close) and every C user
     * that writes through it (the engines' feeds). The mapping lives until the last one. */
    _Atomic uint32_t refs;
    /* cold */
    struct wsgw_ring_topic *topics;
    struct wsgw_ring_reader_slot *slots; /* the reader table (page 1) */
    uint32_t topic_count;
    int fd;
    void *map;
    size_t map_len;
    char *path;
    dev_t dev;
    ino_t ino;
};

struct wsgw_ring_reader {
    CACHE_ALIGNED const struct wsgw_ring_ctl *ctl;
    const uint8_t *data;
    uint64_t cap, mask;
    uint64_t pos, next_seq;
    uint32_t max_payload, max_topics;
    uint64_t *filter;      /* bitmap of topic ids to deliver; NULL: all */
    uint32_t filter_upto;  /* ids above it pass (not yet known to the caller) */
    struct wsgw_ring_waitq *wq; /* NULL when the file could only be opened read-only */
    struct wsgw_ring_reader_stats st;
    struct wsgw_ring_reader_slot *slot; /* its slot in the reader table; NULL: none */
    int slot_index;
    uint64_t wait_avg_ns; /* the adaptive policy's average wait length (0: none yet) */
    CACHE_ALIGNED _Atomic int interrupted;
    const struct wsgw_ring_topic *topics;
    int fd;
    void *map;
    size_t map_len;
    void *wq_map;
};

/* ---- small helpers ------------------------------------------------------------------------ */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* Stop the compiler from re-reading shared memory instead of using a private copy. */
#define COMPILER_BARRIER() atomic_signal_fence(memory_order_seq_cst)

static inline void writer_lock(struct wsgw_ring_writer *w)
{
    while (atomic_exchange_explicit(&w->lock, 1, memory_order_acquire))
        while (atomic_load_explicit(&w->lock, memory_order_relaxed))
            cpu_relax();
}

static inline void writer_unlock(struct wsgw_ring_writer *w)
{
    atomic_store_explicit(&w->lock, 0, memory_order_release);
}

static inline uint64_t now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t rec_size(uint32_t len)
{
    return ((uint64_t)WSGW_RING_REC_HDR + len + WSGW_RING_ALIGN - 1) & ~(uint64_t)(WSGW_RING_ALIGN - 1);
}

static inline uint64_t page_round(uint64_t n)
{
    return (n + WSGW_RING_PAGE - 1) & ~(uint64_t)(WSGW_RING_PAGE - 1);
}

/* A zeroed block of size bytes aligned to, and padded to, whole cache lines (the writer's
 * and the reader's fields are laid out by cache line); NULL, the error set, when out of
 * memory. */
static void *cacheline_zalloc(size_t size)
{
    size_t rounded = (size + WSGW_RING_CACHELINE - 1) & ~(size_t)(WSGW_RING_CACHELINE - 1);
    void *p = aligned_alloc(WSGW_RING_CACHELINE, rounded);
    if (p == NULL)
        wsgw_set_error("out of memory");
    else
        memset(p, 0, size);
    return p;
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *timeout)
{
    /* Shared (not FUTEX_PRIVATE): waiters and the waker are in different processes. */
    return syscall(SYS_futex, (uint32_t *)addr, op, val, timeout, NULL, 0);
}

static uint32_t max_payload_for(uint64_t cap)
{
    uint64_t m = cap / 2 - WSGW_RING_REC_HDR;
    return m > MAX_PAYLOAD_CAP ? MAX_PAYLOAD_CAP : (uint32_t)m;
}

static uint64_t header_bytes(uint32_t max_topics)
{
    return 2ull * WSGW_RING_PAGE + page_round((uint64_t)max_topics * sizeof(struct wsgw_ring_topic));
}

/* Read two producer words as a consistent pair (version seqlock). A writer stopped between
 * its two version stores (SIGSTOP, or killed) would hold readers here: give up after ~100 ms. */
static int read_pair(const struct wsgw_ring_ctl *ctl, _Atomic uint64_t *a, _Atomic uint64_t *b,
                     uint64_t *va, uint64_t *vb)
{
    uint64_t deadline = 0;
    for (unsigned spins = 0;; spins++) {
        uint64_t v0 = atomic_load_explicit((_Atomic uint64_t *)&ctl->version,
                                           memory_order_acquire);
        if (likely(!(v0 & 1))) {
            *va = atomic_load_explicit(a, memory_order_relaxed);
            *vb = atomic_load_explicit(b, memory_order_relaxed);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit((_Atomic uint64_t *)&ctl->version, memory_order_relaxed) == v0)
                return 0;
        }
        if (spins < 1000) {
            cpu_relax();
            continue;
        }
        if (deadline == 0)
            deadline = now_ns(CLOCK_MONOTONIC) + 100000000ull;
        else if (now_ns(CLOCK_MONOTONIC) > deadline) {
            wsgw_set_error("ring writer stopped in the middle of a publication");
            return -EAGAIN;
        }
        sched_yield();
    }
}

WSGW_API int wsgw_ring_api_version(void) { return WSGW_RING_API; }
WSGW_API int wsgw_ring_layout_version(void) { return WSGW_RING_LAYOUT; }

/* ---- writer: create ------------------------------------------------------------------------ */

/* Mark a ring we are replacing closed, so readers still mapped to it stop waiting. */
static void close_stale(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 2 * WSGW_RING_PAGE)
        return;
    uint8_t *m = mmap(NULL, 2 * WSGW_RING_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return;
    struct wsgw_ring_ctl *ctl = (struct wsgw_ring_ctl *)m;
    /* state and the wait page are where they were in layout 1 too */
    if (ctl->magic == WSGW_RING_MAGIC && (ctl->layout == 1 || ctl->layout == WSGW_RING_LAYOUT)) {
        struct wsgw_ring_waitq *wq = (struct wsgw_ring_waitq *)(m + WSGW_RING_PAGE);
        atomic_fetch_or(&ctl->state, WSGW_RING_STATE_CLOSED);
        atomic_fetch_add(&wq->notify, 1);
        futex(&wq->notify, FUTEX_WAKE, INT_MAX, NULL);
    }
    munmap(m, 2 * WSGW_RING_PAGE);
}

/* Give the finished temporary file its name. */
static int publish_file(const char *tmp, const char *path, uint32_t flags)
{
    if (!(flags & WSGW_RING_F_REPLACE)) {
        if (link(tmp, path) != 0) {
            int err = errno;
            if (err == EEXIST)
                wsgw_set_error("ring %s already exists (replace it only when its writer is gone)",
                               path);
            else
                wsgw_set_error("cannot create ring %s: %s", path, strerror(err));
            return -err;
        }
        unlink(tmp);
        return 0;
    }
    int old = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (old >= 0) {
        /* Its writer holds LOCK_EX for its whole life; a reader's liveness probe holds a
         * LOCK_SH for an instant, so retry a little before calling it busy. */
        int locked = -1;
        for (int i = 0; i < 20 && locked != 0; i++) {
            locked = flock(old, LOCK_EX | LOCK_NB);
            if (locked != 0)
                usleep(1000);
        }
        if (locked != 0) {
            close(old);
            wsgw_set_error("ring %s is in use by a live writer", path);
            return -EBUSY;
        }
        close_stale(old);
    }
    int rc = rename(tmp, path) == 0 ? 0 : -errno;
    if (rc != 0)
        wsgw_set_error("cannot create ring %s: %s", path, strerror(-rc));
    if (old >= 0)
        close(old);
    return rc;
}

WSGW_API int wsgw_ring_create(const char *path, uint64_t capacity, uint32_t max_topics,
                              uint32_t mode, uint32_t flags, wsgw_ring_writer **out)
{
    *out = NULL;
    if (capacity < WSGW_RING_MIN_CAPACITY || capacity > WSGW_RING_MAX_CAPACITY ||
        (capacity & (capacity - 1)) != 0) {
        wsgw_set_error("ring capacity must be a power of two from %u to 2^40 bytes, not %llu",
                       WSGW_RING_MIN_CAPACITY, (unsigned long long)capacity);
        return -EINVAL;
    }
    if (max_topics == 0)
        max_topics = WSGW_RING_DEFAULT_TOPICS;
    if (max_topics < 2 || max_topics > WSGW_RING_MAX_TOPICS) {
        wsgw_set_error("max_topics must be 2..%u, not %u", WSGW_RING_MAX_TOPICS, max_topics);
        return -EINVAL;
    }
    uint64_t hdr = header_bytes(max_topics);
    uint64_t total = hdr + capacity;
    char tmp[PATH_MAX];
    int fd, rc;

    if (path != NULL) {
        static _Atomic unsigned counter;
        if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%u", path, (int)getpid(),
                             atomic_fetch_add(&counter, 1)) >= sizeof(tmp)) {
            wsgw_set_error("ring path too long: %s", path);
            return -ENAMETOOLONG;
        }
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            rc = -errno;
            wsgw_set_error("cannot create %s: %s", tmp, strerror(-rc));
            return rc;
        }
        /* Exactly the mode asked for, whatever the umask. */
        if (fchmod(fd, mode ? (mode_t)mode : 0600) != 0) {
            rc = -errno;
            wsgw_set_error("chmod %s: %s", tmp, strerror(-rc));
            goto fail_fd;
        }
    } else {
        fd = memfd_create("wsgw-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0) {
            rc = -errno;
            wsgw_set_error("memfd_create: %s", strerror(-rc));
            return rc;
        }
    }
    /* The writer's lock, held until close: tells readers and successors it is alive. */
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        rc = -errno;
        wsgw_set_error("flock ring: %s", strerror(-rc));
        goto fail_fd;
    }
    /* Reserve the memory now: a full /dev/shm is an error here, not a SIGBUS later. */
    rc = posix_fallocate(fd, 0, (off_t)total);
    if (rc != 0) {
        wsgw_set_error("cannot reserve %llu bytes for the ring: %s", (unsigned long long)total,
                       strerror(rc));
        rc = -rc;
        goto fail_fd;
    }
    if (path == NULL)
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);

    uint8_t *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        wsgw_set_error("mmap ring (%llu bytes): %s", (unsigned long long)total, strerror(-rc));
        goto fail_fd;
    }
    struct wsgw_ring_writer *w = cacheline_zalloc(sizeof(*w));
    if (w == NULL) {
        rc = -ENOMEM;
        goto fail_map;
    }
    atomic_store(&w->refs, 1);
    w->ctl = (struct wsgw_ring_ctl *)map;
    w->wq = (struct wsgw_ring_waitq *)(map + WSGW_RING_PAGE);
    w->topics = (struct wsgw_ring_topic *)(map + 2 * WSGW_RING_PAGE);
    w->slots = (struct wsgw_ring_reader_slot *)(map + WSGW_RING_READERS_OFFSET);
    w->data = map + hdr;
    w->cap = capacity;
    w->mask = capacity - 1;
    w->max_payload = max_payload_for(capacity);
    w->max_topics = max_topics;
    w->tail_seq = 1;
    w->fd = fd;
    w->map = map;
    w->map_len = total;

    struct wsgw_ring_ctl *ctl = w->ctl; /* the pages are zero (fresh file) */
    ctl->magic = WSGW_RING_MAGIC;
    ctl->layout = WSGW_RING_LAYOUT;
    ctl->data_offset = (uint32_t)hdr;
    ctl->capacity = capacity;
    ctl->max_payload = w->max_payload;
    ctl->max_topics = max_topics;
    ctl->topics_offset = 2 * WSGW_RING_PAGE;
    ctl->waitq_offset = WSGW_RING_PAGE;
    ctl->readers_offset = WSGW_RING_READERS_OFFSET;
    ctl->max_readers = WSGW_RING_MAX_READERS;
    ctl->created_ns = now_ns(CLOCK_REALTIME);
    if (getrandom(&ctl->instance, sizeof(ctl->instance), GRND_NONBLOCK) != sizeof(ctl->instance))
        ctl->instance = ctl->created_ns ^ ((uint64_t)getpid() << 32);
    ctl->writer_pid = (uint32_t)getpid();
    atomic_store(&ctl->tail_seq, 1);

    if (path != NULL) {
        rc = publish_file(tmp, path, flags);
        if (rc != 0) {
            unlink(tmp);
            free(w);
            goto fail_map;
        }
        struct stat st;
        if (fstat(fd, &st) == 0) {
            w->dev = st.st_dev;
            w->ino = st.st_ino;
        }
        w->path = strdup(path);
    }
    *out = w;
    return 0;

fail_map:
    munmap(map, total);
fail_fd:
    if (path != NULL)
        unlink(tmp);
    close(fd);
    return rc;
}

WSGW_API int wsgw_ring_writer_fd(const wsgw_ring_writer *w) { return w->fd; }

static int topic_register(wsgw_ring_writer *w, const char *name, uint32_t len);

WSGW_API int wsgw_ring_topic_register(wsgw_ring_writer *w, const char *name, uint32_t len)
{
    writer_lock(w);
    int rc = topic_register(w, name, len);
    writer_unlock(w);
    return rc;
}

static int topic_register(wsgw_ring_writer *w, const char *name, uint32_t len)
{
    if (len == 0 || len > WSGW_RING_TOPIC_NAME_MAX) {
        wsgw_set_error("topic names are 1..%d bytes, not %u", WSGW_RING_TOPIC_NAME_MAX, len);
        return -ENAMETOOLONG;
    }
    for (uint32_t id = 1; id <= w->topic_count; id++) {
        const struct wsgw_ring_topic *t = &w->topics[id];
        if (t->len == len && memcmp(t->name, name, len) == 0)
            return (int)id;
    }
    if (w->topic_count + 1 >= w->max_topics) {
        wsgw_set_error("the ring's topic table is full (%u topics)", w->max_topics - 1);
        return -ENOSPC;
    }
    uint32_t id = w->topic_count + 1;
    struct wsgw_ring_topic *t = &w->topics[id];
    memcpy(t->name, name, len);
    __atomic_store_n(&t->len, len, __ATOMIC_RELEASE);
    w->topic_count = id;
    atomic_store_explicit(&w->ctl->topic_count, id, memory_order_release);
    return (int)id;
}

/* ---- writer: append ------------------------------------------------------------------------ */

static inline void pub_begin(struct wsgw_ring_writer *w)
{
    atomic_store_explicit(&w->ctl->version, ++w->version, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static inline void pub_end(struct wsgw_ring_writer *w)
{
    atomic_store_explicit(&w->ctl->version, ++w->version, memory_order_release);
}

static int check_msgs(const struct wsgw_ring_writer *w, const struct wsgw_ring_msg *m, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (unlikely(m[i].len > w->max_payload)) {
            wsgw_set_error("message %u is %u bytes; this ring takes at most %u", i, m[i].len,
                           w->max_payload);
            return -EMSGSIZE;
        }
        if (unlikely(m[i].topic_id >= w->max_topics)) {
            wsgw_set_error("message %u has topic id %u; this ring has ids below %u", i,
                           m[i].topic_id, w->max_topics);
            return -EINVAL;
        }
    }
    return 0;
}

/* Append checked messages: plan a slice of <= capacity/2 bytes, move the tail past what the
 * slice overwrites, announce the claim, copy, publish, wake sleepers if any. */
static void append(struct wsgw_ring_writer *restrict w, const struct wsgw_ring_msg *restrict m,
                   uint32_t n, uint64_t now)
{
    struct wsgw_ring_ctl *ctl = w->ctl;
    uint8_t *data = w->data;
    const uint64_t cap = w->cap, mask = w->mask;
    uint32_t i = 0;

    while (i < n) {
        uint64_t end = w->pos;
        uint32_t j = i;
        while (j < n) {
            uint64_t size = rec_size(m[j].len);
            uint64_t off = end & mask;
            uint64_t need = size + (off + size > cap ? cap - off : 0);
            if (j > i && end + need - w->pos > cap / 2)
                break;
            end += need;
            j++;
        }
        /* Records that start below end - cap are about to be overwritten: drop them from
         * the tail first (reading our own headers, which sit where we are about to write). */
        if (end > cap) {
            uint64_t limit = end - cap;
            while (w->tail_pos < limit) {
                const uint8_t *h = data + (w->tail_pos & mask);
                uint32_t len;
                uint16_t type;
                memcpy(&len, h, 4);
                memcpy(&type, h + 4, 2);
                if (type == WSGW_RING_REC_PAD) {
                    w->tail_pos += len;
                } else {
                    w->tail_pos += rec_size(len);
                    w->tail_seq++;
                    w->st.overwritten++;
                }
            }
        }
        pub_begin(w);
        atomic_store_explicit(&ctl->tail_pos, w->tail_pos, memory_order_relaxed);
        atomic_store_explicit(&ctl->tail_seq, w->tail_seq, memory_order_relaxed);
        atomic_store_explicit(&ctl->claim_pos, end, memory_order_relaxed);
        pub_end(w);
        /* The claim must be visible before any byte it covers changes (rte_seqlock). */
        atomic_thread_fence(memory_order_release);

        uint64_t pos = w->pos, seq = w->seq;
        for (uint32_t k = i; k < j; k++) {
            uint64_t size = rec_size(m[k].len);
            uint64_t off = pos & mask;
            if (unlikely(off + size > cap)) {
                struct wsgw_ring_rec pad = {.len = (uint32_t)(cap - off),
                                            .type = WSGW_RING_REC_PAD};
                memcpy(data + off, &pad, 8);
                pos += cap - off;
                off = 0;
                w->st.pads++;
            }
            struct wsgw_ring_rec rec = {
                .len = m[k].len,
                .type = WSGW_RING_REC_MSG,
                .session_id = m[k].session_id,
                .topic_id = m[k].topic_id,
                .seq = ++seq,
                .ts_ns = m[k].ts_ns ? m[k].ts_ns : now,
            };
            memcpy(data + off, &rec, sizeof(rec));
            memcpy(data + off + WSGW_RING_REC_HDR, m[k].data, m[k].len);
            pos += size;
            w->st.bytes += m[k].len;
        }
        w->pos = pos;
        w->seq = seq;
        w->st.messages += j - i;
        w->st.batches++;

        pub_begin(w);
        atomic_store_explicit(&ctl->write_seq, seq, memory_order_relaxed);
        atomic_store_explicit(&ctl->write_pos, pos, memory_order_release);
        pub_end(w);

        /* Dekker with wsgw_ring_wait: our write_pos store, then the waiters load; theirs is
         * the waiters increment, then the write_pos load. One of us sees the other. */
        atomic_thread_fence(memory_order_seq_cst);
        if (unlikely(atomic_load_explicit(&w->wq->waiters, memory_order_relaxed) != 0)) {
            atomic_fetch_add_explicit(&w->wq->notify, 1, memory_order_seq_cst);
            futex(&w->wq->notify, FUTEX_WAKE, INT_MAX, NULL);
            w->st.wakeups++;
        }
        wsgw_sink_after_write(w, m + i, j - i, seq - (j - i) + 1, now); /* sink.c: frames */
        wsgw_ring_notify_local(w); /* this process's followers: their eventfds (ringnotify.c) */
        i = j;
    }
}

static inline uint64_t batch_now(const struct wsgw_ring_msg *m, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (m[i].ts_ns == 0)
            return now_ns(CLOCK_REALTIME);
    return 0;
}

WSGW_API int64_t wsgw_ring_write(wsgw_ring_writer *w, uint32_t session_id, uint32_t topic_id,
                                 uint64_t ts_ns, const void *data, uint32_t len)
{
    struct wsgw_ring_msg m = {.data = data, .len = len, .session_id = session_id,
                              .topic_id = topic_id, .ts_ns = ts_ns};
    int rc = check_msgs(w, &m, 1);
    if (unlikely(rc != 0))
        return rc;
    uint64_t now = ts_ns ? 0 : now_ns(CLOCK_REALTIME);
    wsgw_sink_burst_begin(); /* the NATS PUBs leave after the lock (sink.c) */
    writer_lock(w);
    append(w, &m, 1, now);
    int64_t seq = (int64_t)w->seq;
    writer_unlock(w);
    wsgw_sink_burst_end();
    return seq;
}

WSGW_API int64_t wsgw_ring_write_batch(wsgw_ring_writer *w, const struct wsgw_ring_msg *msgs,
                                       uint32_t n)
{
    int rc = check_msgs(w, msgs, n);
    if (unlikely(rc != 0))
        return rc;
    uint64_t now = batch_now(msgs, n);
    writer_lock(w);
    if (unlikely(atomic_load_explicit(&w->ctl->state, memory_order_relaxed) &
                 WSGW_RING_STATE_CLOSED)) {
        writer_unlock(w);
        wsgw_set_error("the ring is closed");
        return -EPIPE;
    }
    uint64_t first = w->seq + 1;
    wsgw_sink_burst_begin(); /* the NATS PUBs of all slices in one send, after the lock */
    append(w, msgs, n, now);
    writer_unlock(w);
    wsgw_sink_burst_end();
    return (int64_t)first;
}

WSGW_API int64_t wsgw_ring_write_packed(wsgw_ring_writer *w, const uint8_t *blob,
                                        const uint32_t *lens, const uint32_t *sessions,
                                        const uint32_t *topics, const uint64_t *ts, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (unlikely(lens[i] > w->max_payload)) {
            wsgw_set_error("message %u is %u bytes; this ring takes at most %u", i, lens[i],
                           w->max_payload);
            return -EMSGSIZE;
        }
        if (unlikely(topics[i] >= w->max_topics)) {
            wsgw_set_error("message %u has topic id %u; this ring has ids below %u", i,
                           topics[i], w->max_topics);
            return -EINVAL;
        }
    }
    uint64_t now = 0;
    if (ts == NULL)
        now = now_ns(CLOCK_REALTIME);
    else
        for (uint32_t i = 0; i < n && now == 0; i++)
            if (ts[i] == 0)
                now = now_ns(CLOCK_REALTIME);
    /* Descriptors on the stack, WRITE_CHUNK at a time: no allocation on this path. */
    struct wsgw_ring_msg chunk[WRITE_CHUNK];
    const uint8_t *p = blob;
    wsgw_sink_burst_begin(); /* the NATS PUBs of the call in one send, after the lock */
    writer_lock(w); /* the whole call: its messages get consecutive numbers */
    uint64_t first = w->seq + 1;
    for (uint32_t i = 0; i < n;) {
        uint32_t c = n - i < WRITE_CHUNK ? n - i : WRITE_CHUNK;
        for (uint32_t k = 0; k < c; k++) {
            chunk[k] = (struct wsgw_ring_msg){.data = p, .len = lens[i + k],
                                              .session_id = sessions[i + k],
                                              .topic_id = topics[i + k],
                                              .ts_ns = ts ? ts[i + k] : 0};
            p += lens[i + k];
        }
        append(w, chunk, c, now);
        i += c;
    }
    writer_unlock(w);
    wsgw_sink_burst_end();
    return (int64_t)first;
}

static void fill_info(const struct wsgw_ring_ctl *ctl, struct wsgw_ring_info *out)
{
    memset(out, 0, sizeof(*out));
    out->capacity = ctl->capacity;
    out->data_offset = ctl->data_offset;
    out->max_payload = ctl->max_payload;
    out->max_topics = ctl->max_topics;
    out->topic_count = atomic_load_explicit((_Atomic uint32_t *)&ctl->topic_count,
                                            memory_order_acquire);
    read_pair(ctl, (_Atomic uint64_t *)&ctl->write_pos, (_Atomic uint64_t *)&ctl->write_seq,
              &out->write_pos, &out->write_seq);
    read_pair(ctl, (_Atomic uint64_t *)&ctl->tail_pos, (_Atomic uint64_t *)&ctl->tail_seq,
              &out->tail_pos, &out->tail_seq);
    out->state = atomic_load((_Atomic uint32_t *)&ctl->state);
    out->writer_pid = ctl->writer_pid;
    out->instance = ctl->instance;
    out->created_ns = ctl->created_ns;
}

WSGW_API int wsgw_ring_writer_info(const wsgw_ring_writer *w, struct wsgw_ring_info *out)
{
    fill_info(w->ctl, out);
    out->waiters = atomic_load(&w->wq->waiters);
    return 0;
}

WSGW_API int wsgw_ring_writer_stats(const wsgw_ring_writer *w,
                                    struct wsgw_ring_writer_stats *out)
{
    *out = w->st;
    return 0;
}

void wsgw_ring_writer_retain(wsgw_ring_writer *w) { atomic_fetch_add(&w->refs, 1); }

void wsgw_ring_writer_release(wsgw_ring_writer *w)
{
    if (atomic_fetch_sub(&w->refs, 1) == 1) {
        munmap(w->map, w->map_len);
        free(w);
    }
}

/* ---- wait advice ------------------------------------------------------------------------ */
#define WAIT_HINT_SHIFT 48

WSGW_API int wsgw_ring_set_wait_hint(wsgw_ring_writer *w, uint32_t mode, uint64_t spin_ns)
{
    int timed = mode == WSGW_RING_WAIT_SPIN || mode == WSGW_RING_WAIT_ADAPTIVE;
    if (mode > WSGW_RING_WAIT_ADAPTIVE || timed != (spin_ns != 0) ||
        spin_ns > WSGW_RING_WAIT_SPIN_MAX_NS) {
        wsgw_set_error("wait hint: mode %u with spin_ns %llu (SPIN and ADAPTIVE take "
                       "1..2^48-1 ns, the others 0)", mode, (unsigned long long)spin_ns);
        return -EINVAL;
    }
    uint64_t hint = mode == WSGW_RING_WAIT_NONE ? 0 : (uint64_t)mode << WAIT_HINT_SHIFT | spin_ns;
    atomic_store_explicit(&w->ctl->wait_hint, hint, memory_order_release);
    return 0;
}

WSGW_API int wsgw_ring_wait_hint(const wsgw_ring_reader *r, uint64_t *spin_ns)
{
    uint64_t hint = atomic_load_explicit((_Atomic uint64_t *)&r->ctl->wait_hint,
                                         memory_order_acquire);
    uint32_t mode = (uint32_t)(hint >> WAIT_HINT_SHIFT);
    uint64_t spin = hint & WSGW_RING_WAIT_SPIN_MAX_NS;
    /* Untrusted file: anything this library does not know reads as no advice. */
    int timed = mode == WSGW_RING_WAIT_SPIN || mode == WSGW_RING_WAIT_ADAPTIVE;
    if (mode > WSGW_RING_WAIT_ADAPTIVE || timed != (spin != 0)) {
        mode = WSGW_RING_WAIT_NONE;
        spin = 0;
    }
    if (spin_ns != NULL)
        *spin_ns = spin;
    return (int)mode;
}

WSGW_API int wsgw_ring_set_writer_cpu(wsgw_ring_writer *w, int32_t cpu)
{
    if (cpu < -1 || cpu >= WSGW_RING_MAX_CPU) {
        wsgw_set_error("writer cpu %d: -1 (none) or 0..%d", cpu, WSGW_RING_MAX_CPU - 1);
        return -EINVAL;
    }
    atomic_store_explicit(&w->ctl->writer_cpu, (uint32_t)(cpu + 1), memory_order_release);
    return 0;
}

WSGW_API int32_t wsgw_ring_writer_cpu(const wsgw_ring_reader *r)
{
    uint32_t v = atomic_load_explicit((_Atomic uint32_t *)&r->ctl->writer_cpu,
                                      memory_order_acquire);
    /* Untrusted file: a value out of range reads as none. */
    return v == 0 || v > WSGW_RING_MAX_CPU ? -1 : (int32_t)(v - 1);
}

WSGW_API void wsgw_ring_writer_close(wsgw_ring_writer *w, int unlink_file)
{
    if (w == NULL)
        return;
    writer_lock(w); /* no append is half done: C users' later writes fail (-EPIPE) */
    atomic_fetch_or(&w->ctl->state, WSGW_RING_STATE_CLOSED);
    writer_unlock(w);
    atomic_fetch_add(&w->wq->notify, 1);
    futex(&w->wq->notify, FUTEX_WAKE, INT_MAX, NULL);
    wsgw_ring_notify_local(w);
    if (unlink_file && w->path != NULL) {
        /* Only if the name is still ours: a successor may have replaced it. */
        struct stat st;
        if (stat(w->path, &st) == 0 && st.st_dev == w->dev && st.st_ino == w->ino)
            unlink(w->path);
    }
    close(w->fd); /* drops the writer's flock; the mapping stays while others hold it */
    free(w->path);
    w->path = NULL;
    wsgw_ring_writer_release(w);
}

/* ---- reader table ------------------------------------------------------------------------- */

/* Whether a process with this pid exists (EPERM: it does, it is someone else's). */
static int pid_alive(uint32_t pid)
{
    return pid != 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

static inline uint32_t slot_pid(struct wsgw_ring_reader_slot *s)
{
    return __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
}

/* Free a slot whose reader died (SIGKILL, a crash: it never detached). The CAS makes sure
 * only one reclaimer acts, and never on a slot someone claimed meanwhile. */
static void reclaim_if_dead(struct wsgw_ring_reader_slot *s, uint32_t pid)
{
    if (pid != 0 && !pid_alive(pid))
        __atomic_compare_exchange_n(&s->pid, &pid, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* The reader publishes where it is: after every read, and its heartbeat at every wait. The
 * coarse clock (the tick's, no TSC read: a few ns) is plenty for a heartbeat, and a reader
 * that polls empty reads in a loop pays next to nothing for it. */
static inline void slot_heartbeat(struct wsgw_ring_reader_slot *s)
{
    __atomic_store_n(&s->heartbeat_ns, now_ns(CLOCK_REALTIME_COARSE), __ATOMIC_RELAXED);
}

static inline void slot_publish(struct wsgw_ring_reader *r)
{
    struct wsgw_ring_reader_slot *s = r->slot;
    __atomic_store_n(&s->next_seq, r->next_seq, __ATOMIC_RELAXED);
    __atomic_store_n(&s->messages, r->st.messages, __ATOMIC_RELAXED);
    __atomic_store_n(&s->gaps, r->st.gaps, __ATOMIC_RELAXED);
    __atomic_store_n(&s->lost, r->st.lost, __ATOMIC_RELAXED);
    slot_heartbeat(s);
}

/* The operator closed this reader (wsgw_ring_close_reader). */
static inline int evicted(const struct wsgw_ring_reader *r)
{
    return r->slot != NULL &&
           unlikely(__atomic_load_n(&r->slot->flags, __ATOMIC_ACQUIRE) & WSGW_RING_SLOT_CLOSE);
}

static int evicted_error(void)
{
    wsgw_set_error("this ring reader was closed by the gateway's operator");
    return -ECONNABORTED;
}

static void slot_set_name(struct wsgw_ring_reader_slot *s, const char *name, size_t len)
{
    char buf[WSGW_RING_READER_NAME_MAX] = {0};
    memcpy(buf, name, len < sizeof(buf) ? len : sizeof(buf));
    memcpy(s->name, buf, sizeof(buf));
}

/* Take the first free slot (or one whose pid is gone); no slot is not an error. */
static void claim_slot(struct wsgw_ring_reader *r)
{
    struct wsgw_ring_reader_slot *table =
        (struct wsgw_ring_reader_slot *)((uint8_t *)r->wq_map +
                                         (WSGW_RING_READERS_OFFSET - WSGW_RING_PAGE));
    uint32_t me = (uint32_t)getpid();
    for (int i = 0; i < WSGW_RING_MAX_READERS; i++) {
        struct wsgw_ring_reader_slot *s = &table[i];
        uint32_t pid = slot_pid(s);
        int claimed = 0;
        /* A failed CAS reloads pid: freed meanwhile by a reclaimer, the slot is tried again. */
        for (int tries = 0; tries < 4 && !claimed; tries++) {
            if (pid != 0 && (pid == me || pid_alive(pid)))
                break;
            claimed = __atomic_compare_exchange_n(&s->pid, &pid, me, 0, __ATOMIC_ACQ_REL,
                                                  __ATOMIC_RELAXED);
        }
        if (!claimed)
            continue;
        __atomic_store_n(&s->flags, 0, __ATOMIC_RELAXED);
        s->reserved = 0;
        __atomic_store_n(&s->attached_ns, now_ns(CLOCK_REALTIME_COARSE), __ATOMIC_RELAXED);
        char comm[17] = {0};
        if (prctl(PR_GET_NAME, comm) != 0)
            snprintf(comm, sizeof(comm), "pid %u", me);
        slot_set_name(s, comm, strlen(comm));
        r->slot = s;
        r->slot_index = i;
        slot_publish(r);
        return;
    }
}

static void release_slot(struct wsgw_ring_reader *r)
{
    if (r->slot == NULL)
        return;
    slot_publish(r);
    /* Only the claimant frees it: a forked child that inherited the handle leaves it be. */
    uint32_t me = (uint32_t)getpid();
    __atomic_compare_exchange_n(&r->slot->pid, &me, 0, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    r->slot = NULL;
    r->slot_index = -1;
}

WSGW_API int wsgw_ring_reader_slot(const wsgw_ring_reader *r) { return r->slot_index; }

WSGW_API int wsgw_ring_reader_set_name(wsgw_ring_reader *r, const char *name, uint32_t len)
{
    if (r->slot == NULL) {
        wsgw_set_error("this reader has no slot in the reader table");
        return -ENOENT;
    }
    slot_set_name(r->slot, name, len);
    return 0;
}

WSGW_API int wsgw_ring_readers(const wsgw_ring_writer *w, struct wsgw_ring_reader_entry *out,
                               uint32_t max)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < WSGW_RING_MAX_READERS && n < max; i++) {
        struct wsgw_ring_reader_slot *s = &w->slots[i];
        uint32_t pid = slot_pid(s);
        if (pid == 0)
            continue;
        if (!pid_alive(pid)) {
            reclaim_if_dead(s, pid);
            continue;
        }
        struct wsgw_ring_reader_entry *e = &out[n++];
        e->slot = i;
        e->pid = pid;
        e->flags = __atomic_load_n(&s->flags, __ATOMIC_RELAXED);
        e->attached_ns = __atomic_load_n(&s->attached_ns, __ATOMIC_RELAXED);
        e->heartbeat_ns = __atomic_load_n(&s->heartbeat_ns, __ATOMIC_RELAXED);
        e->next_seq = __atomic_load_n(&s->next_seq, __ATOMIC_RELAXED);
        e->messages = __atomic_load_n(&s->messages, __ATOMIC_RELAXED);
        e->gaps = __atomic_load_n(&s->gaps, __ATOMIC_RELAXED);
        e->lost = __atomic_load_n(&s->lost, __ATOMIC_RELAXED);
        e->alive = 1;
        memcpy(e->name, s->name, sizeof(e->name));
    }
    return (int)n;
}

WSGW_API int wsgw_ring_close_reader(wsgw_ring_writer *w, uint32_t slot, uint32_t pid)
{
    if (slot >= WSGW_RING_MAX_READERS || pid == 0 || slot_pid(&w->slots[slot]) != pid) {
        wsgw_set_error("no ring reader %u with pid %u", slot, pid);
        return -ENOENT;
    }
    __atomic_fetch_or(&w->slots[slot].flags, WSGW_RING_SLOT_CLOSE, __ATOMIC_RELEASE);
    atomic_fetch_add(&w->wq->notify, 1);
    futex(&w->wq->notify, FUTEX_WAKE, INT_MAX, NULL);
    return 0;
}

/* ---- reader --------------------------------------------------------------------------------- */

static int open_ring(const char *path, int fd, int *rw)
{
    char proc[64];
    if (path == NULL) {
        if (fcntl(fd, F_GETFD) < 0) {
            wsgw_set_error("ring fd %d is not open", fd);
            return -EBADF;
        }
        /* A fresh open file description: flock probes must not touch the writer's lock
         * when the fd was inherited or passed from it. */
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        path = proc;
    }
    *rw = 1;
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0 && (errno == EACCES || errno == EROFS || errno == EPERM)) {
        *rw = 0;
        f = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (f < 0) {
        int err = errno;
        if (err == EISDIR) {
            wsgw_set_error("%s is a directory, not a wsgw ring", path);
            return -EBADMSG;
        }
        if (err == ENOENT)
            wsgw_set_error("no ring at %s", path);
        else
            wsgw_set_error("cannot open ring %s: %s", path, strerror(err));
        return -err;
    }
    return f;
}

/* The file is not trusted: check everything the read path relies on. */
static int check_ctl(const struct wsgw_ring_ctl *ctl, uint64_t size, const char *what)
{
    if (ctl->magic != WSGW_RING_MAGIC) {
        wsgw_set_error("%s is not a wsgw ring (bad magic)", what);
        return -EBADMSG;
    }
    if (ctl->layout != WSGW_RING_LAYOUT) {
        /* Say which side to upgrade: the ring's writer is the gateway. */
        wsgw_set_error("%s has ring layout %u; this library reads layout %d (%s)", what,
                       ctl->layout, WSGW_RING_LAYOUT,
                       ctl->layout < WSGW_RING_LAYOUT
                           ? "the gateway that wrote it is older than this consumer: upgrade "
                             "the gateway, or use a consumer of the gateway's version"
                           : "the gateway is newer than this consumer: upgrade the consumer");
        return -EPROTONOSUPPORT;
    }
    uint64_t cap = ctl->capacity;
    if (cap < WSGW_RING_MIN_CAPACITY || cap > WSGW_RING_MAX_CAPACITY || (cap & (cap - 1)) ||
        ctl->max_topics < 2 || ctl->max_topics > WSGW_RING_MAX_TOPICS ||
        ctl->data_offset != header_bytes(ctl->max_topics) ||
        ctl->topics_offset != 2 * WSGW_RING_PAGE || ctl->waitq_offset != WSGW_RING_PAGE ||
        ctl->readers_offset != WSGW_RING_READERS_OFFSET ||
        ctl->max_readers != WSGW_RING_MAX_READERS ||
        ctl->max_payload != max_payload_for(cap) || size < ctl->data_offset + cap) {
        wsgw_set_error("%s: inconsistent ring header (capacity %llu, file %llu bytes)", what,
                       (unsigned long long)cap, (unsigned long long)size);
        return -EBADMSG;
    }
    return 0;
}

static int seek(struct wsgw_ring_reader *r, int oldest)
{
    const struct wsgw_ring_ctl *ctl = r->ctl;
    uint64_t pos, seq;
    int rc = oldest ? read_pair(ctl, (_Atomic uint64_t *)&ctl->tail_pos,
                                (_Atomic uint64_t *)&ctl->tail_seq, &pos, &seq)
                    : read_pair(ctl, (_Atomic uint64_t *)&ctl->write_pos,
                                (_Atomic uint64_t *)&ctl->write_seq, &pos, &seq);
    if (rc != 0)
        return rc;
    r->pos = pos;
    r->next_seq = oldest ? seq : seq + 1;
    return 0;
}

WSGW_API int wsgw_ring_attach(const char *path, int fd, uint32_t flags,
                              wsgw_ring_reader **out)
{
    *out = NULL;
    char what[96];
    snprintf(what, sizeof(what), "%s", path ? path : "the ring fd");
    int rw;
    int f = open_ring(path, fd, &rw);
    if (f < 0)
        return f;
    int rc;
    struct stat st;
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < 2 * WSGW_RING_PAGE) {
        wsgw_set_error("%s is not a wsgw ring (too small or not a file)", what);
        rc = -EBADMSG;
        goto fail_fd;
    }
    uint64_t size = (uint64_t)st.st_size;
    void *probe = mmap(NULL, WSGW_RING_PAGE, PROT_READ, MAP_SHARED, f, 0);
    if (probe == MAP_FAILED) {
        rc = -errno;
        wsgw_set_error("mmap %s: %s", what, strerror(-rc));
        goto fail_fd;
    }
    rc = check_ctl(probe, size, what);
    munmap(probe, WSGW_RING_PAGE);
    if (rc != 0)
        goto fail_fd;

    /* Read-only: a consumer cannot damage the ring for the others. MAP_POPULATE: page
     * tables now, no minor faults on the read path. */
    uint8_t *map = mmap(NULL, size, PROT_READ, MAP_SHARED | MAP_POPULATE, f, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        wsgw_set_error("mmap %s (%llu bytes): %s", what, (unsigned long long)size, strerror(-rc));
        goto fail_fd;
    }
    const struct wsgw_ring_ctl *ctl = (const struct wsgw_ring_ctl *)map;
    rc = check_ctl(ctl, size, what); /* again: the probe and the map are two reads */
    if (rc != 0)
        goto fail_map;

    struct wsgw_ring_reader *r = cacheline_zalloc(sizeof(*r));
    if (r == NULL) {
        rc = -ENOMEM;
        goto fail_map;
    }
    r->ctl = ctl;
    r->cap = ctl->capacity;
    r->mask = r->cap - 1;
    r->data = map + ctl->data_offset;
    r->max_payload = ctl->max_payload;
    r->max_topics = ctl->max_topics;
    r->topics = (const struct wsgw_ring_topic *)(map + ctl->topics_offset);
    r->fd = f;
    r->map = map;
    r->map_len = size;
    if (rw) {
        void *wq = mmap(NULL, WSGW_RING_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, f,
                        ctl->waitq_offset);
        if (wq != MAP_FAILED) {
            r->wq_map = wq;
            r->wq = wq;
        }
    }
    r->slot_index = -1;
    rc = seek(r, (flags & WSGW_RING_F_START_OLDEST) != 0);
    if (rc != 0)
        goto fail_reader;
    if (r->wq_map != NULL)
        claim_slot(r);
    *out = r;
    return 0;

fail_reader:
    if (r->wq_map)
        munmap(r->wq_map, WSGW_RING_PAGE);
    free(r);
fail_map:
    munmap(map, size);
fail_fd:
    close(f);
    return rc;
}

WSGW_API void wsgw_ring_detach(wsgw_ring_reader *r)
{
    if (r == NULL)
        return;
    release_slot(r);
    if (r->wq_map)
        munmap(r->wq_map, WSGW_RING_PAGE);
    munmap(r->map, r->map_len);
    close(r->fd);
    free(r->filter);
    free(r);
}

/* Lapped: move to the oldest intact record. Everything between is lost, exactly
 * tail_seq - next_seq messages (sequences are contiguous). */
static int resync(struct wsgw_ring_reader *r, uint64_t low, uint64_t *lost)
{
    const struct wsgw_ring_ctl *ctl = r->ctl;
    uint64_t tp, ts;
    for (int i = 0;; i++) {
        int rc = read_pair(ctl, (_Atomic uint64_t *)&ctl->tail_pos,
                           (_Atomic uint64_t *)&ctl->tail_seq, &tp, &ts);
        if (rc != 0)
            return rc;
        if (tp >= low)
            break;
        /* The claim we validated against was newer than the tail we saw: look again. */
        if (i > 1000000) {
            wsgw_set_error("ring tail does not move past the claim");
            return -EBADMSG;
        }
        cpu_relax();
    }
    if (unlikely(ts < r->next_seq || tp < r->pos)) {
        wsgw_set_error("ring corrupt: tail seq %llu behind the reader's %llu",
                       (unsigned long long)ts, (unsigned long long)r->next_seq);
        return -EBADMSG;
    }
    uint64_t n = ts - r->next_seq;
    *lost += n;
    if (n) {
        r->st.gaps++;
        r->st.lost += n;
    }
    r->pos = tp;
    r->next_seq = ts;
    return 0;
}

static inline int wanted(const struct wsgw_ring_reader *r, uint32_t topic)
{
    if (likely(r->filter == NULL) || topic > r->filter_upto)
        return 1;
    return (r->filter[topic >> 6] >> (topic & 63)) & 1;
}

WSGW_API int wsgw_ring_read(wsgw_ring_reader *r, struct wsgw_ring_view *views, uint32_t max,
                            uint8_t *arena, uint32_t arena_size,
                            struct wsgw_ring_read_info *info)
{
    const struct wsgw_ring_ctl *ctl = r->ctl;
    const uint8_t *data = r->data;
    const uint64_t cap = r->cap, mask = r->mask;
    uint64_t lost = 0, filtered = 0, resume = 0;
    uint32_t n = 0;
    int rc = 0;
    if (evicted(r))
        return evicted_error();

    /* Closed is read before write_pos: nothing published after the close flag was seen. */
    uint32_t state = atomic_load_explicit((_Atomic uint32_t *)&ctl->state, memory_order_acquire);
    for (int attempt = 0;; attempt++) {
        /* A writer lapping us on every pass: report the loss, let the caller come back. */
        if (unlikely(attempt > 8)) {
            n = 0;
            break;
        }
        uint64_t wp = atomic_load_explicit((_Atomic uint64_t *)&ctl->write_pos,
                                           memory_order_acquire);
        const uint64_t start = r->pos;
        if (unlikely(wp < start)) {
            wsgw_set_error("ring corrupt: write position %llu behind the reader's %llu",
                           (unsigned long long)wp, (unsigned long long)start);
            return -EBADMSG;
        }
        if (unlikely(wp - start > cap)) {
            rc = resync(r, wp - cap, &lost);
            if (rc != 0)
                return rc;
            resume = r->next_seq;
            continue;
        }
        uint64_t p = start, seq = r->next_seq;
        uint32_t aoff = 0;
        int torn = 0;
        n = 0;
        filtered = 0;
        while (p < wp && n < max) {
            uint64_t off = p & mask;
            const uint8_t *h = data + off;
            struct wsgw_ring_rec rec;
            memcpy(&rec, h, 8); /* len and type: all a padding record is sure to have */
            COMPILER_BARRIER();
            if (rec.type == WSGW_RING_REC_PAD) {
                if (unlikely(rec.len != cap - off)) {
                    torn = 1;
                    break;
                }
                p += rec.len;
                continue;
            }
            const uint32_t len = rec.len;
            const uint64_t size = rec_size(len);
            if (unlikely(rec.type != WSGW_RING_REC_MSG || len > r->max_payload ||
                         size > cap - off || size > wp - p)) {
                torn = 1;
                break;
            }
            memcpy(&rec, h, sizeof(rec));
            COMPILER_BARRIER();
            /* Two reads of len must agree: the payload copy below trusts it. */
            if (unlikely(rec.seq != seq || rec.len != len)) {
                torn = 1;
                break;
            }
            if (wanted(r, rec.topic_id)) {
                if (unlikely(aoff + (uint64_t)len > arena_size)) {
                    if (n == 0) {
                        wsgw_set_error("read arena of %u bytes too small for a %u-byte message",
                                       arena_size, len);
                        return -EMSGSIZE;
                    }
                    break; /* arena full: this one comes next call */
                }
                memcpy(arena + aoff, h + WSGW_RING_REC_HDR, len);
                views[n] = (struct wsgw_ring_view){.seq = rec.seq, .ts_ns = rec.ts_ns,
                                                   .session_id = rec.session_id,
                                                   .topic_id = rec.topic_id,
                                                   .offset = aoff, .len = rec.len};
                n++;
                aoff = (uint32_t)((aoff + rec.len + 7) & ~7u);
            } else {
                filtered++;
            }
            p += size;
            seq++;
        }
        /* Validate: was any byte we copied, from start on, overwritten meanwhile? */
        atomic_thread_fence(memory_order_acquire);
        uint64_t claim = atomic_load_explicit((_Atomic uint64_t *)&ctl->claim_pos,
                                              memory_order_relaxed);
        if (unlikely(claim > cap && start < claim - cap)) {
            r->st.retries++;
            rc = resync(r, claim - cap, &lost);
            if (rc != 0)
                return rc;
            resume = r->next_seq;
            n = 0;
            continue;
        }
        if (unlikely(torn)) {
            wsgw_set_error("ring corrupt at position %llu (not overwritten, yet invalid)",
                           (unsigned long long)p);
            return -EBADMSG;
        }
        r->pos = p;
        r->next_seq = seq;
        break;
    }
    r->st.messages += n;
    r->st.filtered += filtered;
    if (info != NULL) {
        info->lost = lost;
        info->resume_seq = lost ? resume : 0;
        info->next_seq = r->next_seq;
        info->write_seq = atomic_load_explicit((_Atomic uint64_t *)&ctl->write_seq,
                                               memory_order_relaxed);
        info->topic_count = atomic_load_explicit((_Atomic uint32_t *)&ctl->topic_count,
                                                 memory_order_acquire);
        info->closed = state & WSGW_RING_STATE_CLOSED;
        info->filtered = filtered;
        info->woke_ns = 0;
    }
    for (uint32_t k = 0; k < n; k++)
        r->st.bytes += views[k].len;
    if (r->slot != NULL)
        slot_publish(r);
    return (int)n;
}

static inline int has_data(const struct wsgw_ring_reader *r)
{
    return atomic_load_explicit((_Atomic uint64_t *)&r->ctl->write_pos, memory_order_acquire) !=
           r->pos;
}

static inline int is_closed(const struct wsgw_ring_reader *r)
{
    return (atomic_load((_Atomic uint32_t *)&r->ctl->state) & WSGW_RING_STATE_CLOSED) != 0;
}

/* Nothing to read and the ring closed: -EPIPE. Closed is loaded before the position.
 * The operator closed this reader: -ECONNABORTED, before anything else. */
static inline int ready_or_closed(const struct wsgw_ring_reader *r)
{
    if (evicted(r))
        return evicted_error();
    int closed = is_closed(r);
    if (has_data(r))
        return 1;
    return closed ? -EPIPE : 0;
}

/* The spin phase of a wait: poll write_pos (one load of the producer's line, which stays in
 * this core's cache until the writer publishes) until data, the close, an interrupt or
 * spin_end. A busy spin also probes the writer's flock every WSGW_RING_PROBE_NS and stops
 * when the writer is gone: nothing more can come, so the futex costs nothing to wait on.
 * 1: data, -EPIPE: closed and drained, 0: go on to the futex (time up, writer gone, or
 * interrupted: the caller's loop reports that). */
static int spin_phase(struct wsgw_ring_reader *r, uint64_t start, uint64_t spin_end, int busy)
{
    uint64_t now = start, next_probe = start + WSGW_RING_PROBE_NS;
    int rc = 0;
    for (unsigned i = 1;; i++) {
        if (has_data(r)) {
            rc = 1;
            break;
        }
        if ((i & 63) == 0) {
            if (unlikely(is_closed(r) || evicted(r))) {
                rc = ready_or_closed(r);
                break;
            }
            if (unlikely(atomic_load_explicit(&r->interrupted, memory_order_relaxed)))
                break;
            now = now_ns(CLOCK_MONOTONIC);
            if (now >= spin_end)
                break;
            if (busy && now >= next_probe) {
                next_probe = now + WSGW_RING_PROBE_NS;
                if (wsgw_ring_writer_alive(r) == 0 && !has_data(r))
                    break;
            }
        }
        cpu_relax();
    }
    r->st.spin_ns += now_ns(CLOCK_MONOTONIC) - start;
    if (rc == 1)
        r->st.spin_hits++;
    return rc;
}

static int wait_policy(wsgw_ring_reader *r, int64_t timeout_ns, int64_t spin_ns);

static uint64_t adaptive_average(const wsgw_ring_reader *r, uint64_t cap)
{
    return r->wait_avg_ns ? r->wait_avg_ns : cap / 2; /* first wait: a short spin */
}

static int64_t adaptive_spin(uint64_t avg, uint64_t cap)
{
    return avg < cap ? (int64_t)(2 * avg < cap ? 2 * avg : cap) : 0;
}

static void adaptive_record(wsgw_ring_reader *r, uint64_t avg, uint64_t took)
{
    r->wait_avg_ns = avg - avg / 8 + took / 8 + 1; /* + 1: never back to "none yet" */
}

/* The adaptive policy (WSGW_RING_SPIN_ADAPTIVE): spin for twice the average wait when that
 * average is under the cap, else sleep at once; each wait that ends with data moves the
 * average 1/8 of the way to its own length (a timed-out wait counts its whole length). */
static int wait_adaptive(wsgw_ring_reader *r, int64_t timeout_ns, uint64_t cap)
{
    uint64_t avg = adaptive_average(r, cap);
    uint64_t start = now_ns(CLOCK_MONOTONIC);
    int rc = wait_policy(r, timeout_ns, adaptive_spin(avg, cap));
    if ((rc == 1 || rc == 0) && timeout_ns != 0) /* a poll (timeout 0) says nothing */
        adaptive_record(r, avg, now_ns(CLOCK_MONOTONIC) - start);
    return rc;
}

WSGW_API int wsgw_ring_spin_adaptive(wsgw_ring_reader *r, uint64_t cap)
{
    cap &= WSGW_RING_WAIT_SPIN_MAX_NS;
    uint64_t avg = adaptive_average(r, cap);
    int64_t spin = adaptive_spin(avg, cap);
    if (spin == 0)
        return 0; /* a slow feed: the sleeping wait that follows, at once */
    uint64_t start = now_ns(CLOCK_MONOTONIC);
    int rc = wait_policy(r, spin, spin);
    if (rc == 1) /* caught: a wait that short; a miss is the sleeping wait's to count */
        adaptive_record(r, avg, now_ns(CLOCK_MONOTONIC) - start);
    return rc;
}

WSGW_API int wsgw_ring_wait(wsgw_ring_reader *r, int64_t timeout_ns, int64_t spin_ns)
{
    if (spin_ns > 0 && (spin_ns & WSGW_RING_SPIN_ADAPTIVE))
        return wait_adaptive(r, timeout_ns,
                             (uint64_t)spin_ns & WSGW_RING_WAIT_SPIN_MAX_NS);
    return wait_policy(r, timeout_ns, spin_ns);
}

static int wait_policy(wsgw_ring_reader *r, int64_t timeout_ns, int64_t spin_ns)
{
    if (atomic_exchange(&r->interrupted, 0))
        return -ECANCELED;
    if (r->slot != NULL)
        slot_heartbeat(r->slot);
    int rc = ready_or_closed(r);
    if (rc != 0 || timeout_ns == 0)
        return rc;
    r->st.waits++;
    uint64_t start = now_ns(CLOCK_MONOTONIC);
    uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : start + (uint64_t)timeout_ns;
    if (spin_ns != 0) {
        uint64_t spin_end = spin_ns < 0 ? deadline : start + (uint64_t)spin_ns;
        if (spin_end > deadline)
            spin_end = deadline;
        rc = spin_phase(r, start, spin_end, spin_ns < 0);
        if (rc != 0)
            return rc;
    }
    uint64_t backoff = 50000; /* read-only mapping: poll from 50 us up to 1 ms */
    for (;;) {
        uint64_t now = now_ns(CLOCK_MONOTONIC);
        if (now >= deadline)
            return 0;
        uint64_t left = deadline - now;
        if (r->wq != NULL) {
            atomic_fetch_add_explicit(&r->wq->waiters, 1, memory_order_seq_cst);
            uint32_t expect = atomic_load_explicit(&r->wq->notify, memory_order_seq_cst);
            rc = ready_or_closed(r);
            if (rc == 0 && !atomic_load(&r->interrupted)) {
                struct timespec ts = {.tv_sec = (time_t)(left / 1000000000u),
                                      .tv_nsec = (long)(left % 1000000000u)};
                if (left > (uint64_t)INT64_MAX / 2)
                    ts.tv_sec = INT_MAX;
                long frc = futex(&r->wq->notify, FUTEX_WAIT, expect, &ts);
                int err = errno;
                atomic_fetch_sub_explicit(&r->wq->waiters, 1, memory_order_seq_cst);
                if (frc == 0)
                    r->st.wakeups++;
                else if (err == EINTR)
                    return -EINTR;
            } else {
                atomic_fetch_sub_explicit(&r->wq->waiters, 1, memory_order_seq_cst);
            }
        } else {
            uint64_t nap = left < backoff ? left : backoff;
            struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)nap};
            if (nanosleep(&ts, NULL) != 0 && errno == EINTR)
                return -EINTR;
            if (backoff < 1000000)
                backoff *= 2;
        }
        if (atomic_exchange(&r->interrupted, 0))
            return -ECANCELED;
        rc = ready_or_closed(r);
        if (rc != 0)
            return rc;
    }
}

WSGW_API int wsgw_ring_read_wait(wsgw_ring_reader *r, struct wsgw_ring_view *views,
                                 uint32_t max, uint8_t *arena, uint32_t arena_size,
                                 struct wsgw_ring_read_info *info, int64_t timeout_ns,
                                 int64_t spin_ns)
{
    struct wsgw_ring_read_info own;
    if (info == NULL)
        info = &own; /* what it says decides whether to wait, even when the caller ignores it */
    int n = wsgw_ring_read(r, views, max, arena, arena_size, info);
    if (n != 0 || timeout_ns == 0 || info->lost || info->closed)
        return n;
    const uint64_t deadline = timeout_ns < 0 ? UINT64_MAX
                                             : now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ns;
    for (;;) {
        int64_t left = -1;
        if (deadline != UINT64_MAX) {
            uint64_t now = now_ns(CLOCK_MONOTONIC);
            left = now >= deadline ? 0 : (int64_t)(deadline - now);
        }
        int rc = wsgw_ring_wait(r, left, spin_ns);
        uint64_t woke = now_ns(CLOCK_REALTIME);
        if (rc != 1 && rc != 0 && rc != -EPIPE && rc != -ECANCELED)
            return rc; /* -EINTR, -ECONNABORTED, ... */
        n = wsgw_ring_read(r, views, max, arena, arena_size, info);
        if (n != 0 || info->lost || info->closed) {
            if (n >= 0)
                info->woke_ns = woke;
            return n;
        }
        if (rc == -ECANCELED)
            return rc; /* interrupted, and the last look found nothing */
        /* Timed out; or ready, but all of it filtered out: wait on until the timeout. */
        if (rc != 1 || left == 0)
            return 0;
    }
}

WSGW_API void wsgw_ring_reader_interrupt(wsgw_ring_reader *r)
{
    atomic_store(&r->interrupted, 1);
    if (r->wq != NULL) {
        /* Wakes every sleeper of this ring once; the others see nothing new and sleep on. */
        atomic_fetch_add(&r->wq->notify, 1);
        futex(&r->wq->notify, FUTEX_WAKE, INT_MAX, NULL);
    }
}

WSGW_API int wsgw_ring_reader_filter(wsgw_ring_reader *r, const uint32_t *ids, uint32_t n,
                                     uint32_t upto)
{
    if (ids == NULL) {
        free(r->filter);
        r->filter = NULL;
        return 0;
    }
    size_t words = (r->max_topics + 63) / 64;
    uint64_t *bits = calloc(words, sizeof(uint64_t));
    if (bits == NULL) {
        wsgw_set_error("out of memory");
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] < r->max_topics)
            bits[ids[i] >> 6] |= 1ull << (ids[i] & 63);
    free(r->filter);
    r->filter = bits;
    r->filter_upto = upto < r->max_topics - 1 ? upto : r->max_topics - 1;
    return 0;
}

WSGW_API int wsgw_ring_reader_seek(wsgw_ring_reader *r, int oldest) { return seek(r, oldest); }

WSGW_API int wsgw_ring_topic_name(const wsgw_ring_reader *r, uint32_t id, char *buf,
                                  uint32_t buflen)
{
    uint32_t count = atomic_load_explicit((_Atomic uint32_t *)&r->ctl->topic_count,
                                          memory_order_acquire);
    if (id == 0 || id > count || id >= r->max_topics)
        return -ENOENT;
    const struct wsgw_ring_topic *t = &r->topics[id];
    uint32_t len = __atomic_load_n(&t->len, __ATOMIC_ACQUIRE);
    if (len == 0 || len > WSGW_RING_TOPIC_NAME_MAX)
        return -ENOENT;
    memcpy(buf, t->name, len < buflen ? len : buflen);
    return (int)len;
}

WSGW_API int wsgw_ring_reader_info(const wsgw_ring_reader *r, struct wsgw_ring_info *out)
{
    fill_info(r->ctl, out);
    out->waiters = r->wq ? atomic_load(&r->wq->waiters) : 0;
    return 0;
}

WSGW_API int wsgw_ring_reader_stats(const wsgw_ring_reader *r,
                                    struct wsgw_ring_reader_stats *out)
{
    *out = r->st;
    return 0;
}

WSGW_API uint64_t wsgw_ring_reader_next_seq(const wsgw_ring_reader *r) { return r->next_seq; }

WSGW_API int wsgw_ring_writer_alive(const wsgw_ring_reader *r)
{
    if (is_closed(r))
        return 0;
    if (flock(r->fd, LOCK_SH | LOCK_NB) == 0) {
        flock(r->fd, LOCK_UN);
        return 0;
    }
    if (errno == EWOULDBLOCK)
        return 1;
    int err = errno;
    wsgw_set_error("flock ring: %s", strerror(err));
    return -err;
}

/* Benchmark entry points: in the library only when built for benchmarks (setup.py's
 * WSGW_BENCH: the in-place build of a checkout, `make shim`; never the wheel's). */
#ifdef WSGW_BENCH
/* ---- benchmarks -------------------------------------------------------------------------- */

/* `count` messages all pointing at one patterned payload (session 1, topic 0); NULL when
 * out of memory. The caller frees *payload and the array. */
static struct wsgw_ring_msg *bench_messages(uint32_t payload_len, uint32_t count,
                                            uint8_t **payload)
{
    uint8_t *buf = malloc(payload_len ? payload_len : 1);
    struct wsgw_ring_msg *msgs = malloc(sizeof(*msgs) * count);
    if (buf == NULL || msgs == NULL) {
        free(buf);
        free(msgs);
        return NULL;
    }
    for (uint32_t i = 0; i < payload_len; i++)
        buf[i] = (uint8_t)(i * 31 + 7);
    for (uint32_t i = 0; i < count; i++)
        msgs[i] = (struct wsgw_ring_msg){.data = buf, .len = payload_len,
                                         .session_id = 1, .topic_id = 0};
    *payload = buf;
    return msgs;
}

#define BENCH_BATCH_MAX 1024

static uint32_t bench_arena_size(const struct wsgw_ring_reader *r)
{
    return r->max_payload > (1u << 20) ? r->max_payload : (1u << 20);
}

WSGW_API int64_t wsgw_ring_bench_write(wsgw_ring_writer *w, uint32_t payload_len, uint64_t n,
                                       uint32_t batch)
{
    if (batch == 0 || batch > BENCH_BATCH_MAX || payload_len > w->max_payload) {
        wsgw_set_error("bench: batch 1..%d and payload <= %u", BENCH_BATCH_MAX, w->max_payload);
        return -EINVAL;
    }
    uint8_t *payload;
    struct wsgw_ring_msg *msgs = bench_messages(payload_len, batch, &payload);
    if (msgs == NULL)
        return -ENOMEM;
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    for (uint64_t done = 0; done < n;) {
        uint32_t c = n - done < batch ? (uint32_t)(n - done) : batch;
        append(w, msgs, c, now_ns(CLOCK_REALTIME));
        done += c;
    }
    int64_t elapsed = (int64_t)(now_ns(CLOCK_MONOTONIC) - t0);
    free(payload);
    free(msgs);
    return elapsed;
}

WSGW_API int64_t wsgw_ring_bench_rw(wsgw_ring_writer *w, wsgw_ring_reader *r,
                                    uint32_t payload_len, uint64_t n, uint32_t batch)
{
    if (batch == 0 || batch > BENCH_BATCH_MAX || payload_len > w->max_payload) {
        wsgw_set_error("bench: batch 1..%d and payload <= %u", BENCH_BATCH_MAX, w->max_payload);
        return -EINVAL;
    }
    uint8_t *payload = NULL;
    struct wsgw_ring_msg *msgs = bench_messages(payload_len, batch, &payload);
    struct wsgw_ring_view *views = malloc(sizeof(*views) * batch);
    uint32_t arena_size = bench_arena_size(r);
    uint8_t *arena = malloc(arena_size);
    if (msgs == NULL || views == NULL || arena == NULL) {
        free(payload);
        free(msgs);
        free(views);
        free(arena);
        return -ENOMEM;
    }
    int64_t rc = 0;
    uint64_t expect = r->next_seq;
    struct wsgw_ring_read_info info;
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    for (uint64_t done = 0; done < n;) {
        uint32_t c = n - done < batch ? (uint32_t)(n - done) : batch;
        append(w, msgs, c, now_ns(CLOCK_REALTIME));
        for (uint32_t got = 0; got < c;) {
            int k = wsgw_ring_read(r, views, c - got, arena, arena_size, &info);
            if (k <= 0 || info.lost != 0 || views[0].seq != expect) {
                wsgw_set_error("bench: read %d, lost %llu, seq %llu expected %llu", k,
                               (unsigned long long)info.lost,
                               (unsigned long long)(k > 0 ? views[0].seq : 0),
                               (unsigned long long)expect);
                rc = -EPROTO;
                goto out;
            }
            expect += (uint64_t)k;
            got += (uint32_t)k;
        }
        done += c;
    }
    rc = (int64_t)(now_ns(CLOCK_MONOTONIC) - t0);
out:
    free(payload);
    free(msgs);
    free(views);
    free(arena);
    return rc;
}

/* What a bench read loop reads into: views for BENCH_BATCH_MAX messages and the payload
 * arena; -ENOMEM, nothing kept, when short of memory. */
static int bench_read_buffers(wsgw_ring_reader *r, struct wsgw_ring_view **views,
                              uint8_t **arena, uint32_t *arena_size)
{
    *views = malloc(sizeof(**views) * BENCH_BATCH_MAX);
    *arena_size = bench_arena_size(r);
    *arena = malloc(*arena_size);
    if (*views == NULL || *arena == NULL) {
        free(*views);
        free(*arena);
        return -ENOMEM;
    }
    return 0;
}

WSGW_API int wsgw_ring_bench_read(wsgw_ring_reader *r, uint64_t n, int64_t timeout_ns,
                                  uint64_t result[4])
{
    struct wsgw_ring_view *views;
    uint8_t *arena;
    uint32_t arena_size;
    if (bench_read_buffers(r, &views, &arena, &arena_size))
        return -ENOMEM;
    struct wsgw_ring_read_info info;
    uint64_t delivered = 0, lost = 0, bytes = 0, first = 0, last = 0;
    uint64_t deadline = now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ns;
    int rc = 0;
    for (unsigned spins = 0; delivered + lost < n; spins++) {
        int k = wsgw_ring_read(r, views, BENCH_BATCH_MAX, arena, arena_size, &info);
        if (k < 0) {
            rc = k;
            break;
        }
        lost += info.lost;
        if (k > 0) {
            uint64_t t = now_ns(CLOCK_MONOTONIC);
            if (delivered == 0)
                first = t;
            last = t;
            delivered += (uint64_t)k;
            for (int i = 0; i < k; i++)
                bytes += views[i].len;
            continue;
        }
        if (info.closed) {
            rc = -EPIPE;
            break;
        }
        if ((spins & 1023) == 0 && now_ns(CLOCK_MONOTONIC) > deadline) {
            rc = -ETIMEDOUT;
            break;
        }
        cpu_relax();
    }
    result[0] = delivered;
    result[1] = lost;
    result[2] = bytes;
    result[3] = last - first;
    free(views);
    free(arena);
    return rc;
}

WSGW_API int wsgw_ring_bench_pace(wsgw_ring_writer *w, uint32_t payload_len, uint64_t n,
                                  uint64_t period_ns, uint64_t result[4])
{
    if (payload_len > w->max_payload || period_ns == 0) {
        wsgw_set_error("bench pace: payload <= %u and a period > 0", w->max_payload);
        return -EINVAL;
    }
    uint8_t *payload;
    struct wsgw_ring_msg *msgs = bench_messages(payload_len, BENCH_BATCH_MAX, &payload);
    if (msgs == NULL)
        return -ENOMEM;
    /* The default 50 us timer slack would make every sleep 50 us late: 1 ns while pacing. */
    int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
    uint64_t publishes = 0, largest = 0;
    const uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    uint64_t last = 0;
    for (uint64_t done = 0; done < n;) {
        uint64_t due = t0 + done * period_ns;
        if (last && due < last + WSGW_RING_PACE_TICK_NS)
            due = last + WSGW_RING_PACE_TICK_NS;
        uint64_t now = now_ns(CLOCK_MONOTONIC);
        if (now < due) {
            struct timespec ts = {.tv_sec = (time_t)(due / 1000000000u),
                                  .tv_nsec = (long)(due % 1000000000u)};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
            }
            now = now_ns(CLOCK_MONOTONIC);
        }
        last = now;
        /* Every message due by now goes out in this publish (a late wake-up makes a batch,
         * as an engine poll that finds several messages does). */
        const uint64_t due_by_now = (now - t0) / period_ns + 1;
        uint64_t k = due_by_now > done ? due_by_now - done : 1;
        if (k > n - done)
            k = n - done;
        if (k > BENCH_BATCH_MAX)
            k = BENCH_BATCH_MAX;
        const uint64_t stamp = now_ns(CLOCK_REALTIME);
        for (uint64_t i = 0; i < k; i++)
            msgs[i].ts_ns = stamp;
        append(w, msgs, (uint32_t)k, stamp);
        done += k;
        publishes++;
        if (k > largest)
            largest = k;
    }
    result[0] = publishes;
    result[1] = n;
    result[2] = largest;
    result[3] = now_ns(CLOCK_MONOTONIC) - t0;
    prctl(PR_SET_TIMERSLACK, slack > 0 ? (unsigned long)slack : 0ul, 0, 0, 0);
    free(payload);
    free(msgs);
    return 0;
}

static uint64_t involuntary_switches(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? (uint64_t)ru.ru_nivcsw : 0;
}

WSGW_API int wsgw_ring_bench_latency(wsgw_ring_reader *r, uint64_t n, int64_t timeout_ns,
                                     int64_t spin_ns, uint64_t *lat_ns, uint64_t result[9])
{
    struct wsgw_ring_view *views;
    uint8_t *arena;
    uint32_t arena_size;
    if (bench_read_buffers(r, &views, &arena, &arena_size))
        return -ENOMEM;
    const uint64_t waits0 = r->st.waits, wakeups0 = r->st.wakeups, hits0 = r->st.spin_hits;
    struct wsgw_ring_read_info info;
    uint64_t delivered = 0, lost = 0, disorder = 0, wall0 = 0, cpu0 = 0, ivcsw0 = 0;
    uint64_t expect = r->next_seq;
    const uint64_t deadline = now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ns;
    int rc = 0;
    while (delivered + lost < n) {
        uint64_t left = n - delivered - lost;
        uint32_t max = left < BENCH_BATCH_MAX ? (uint32_t)left : BENCH_BATCH_MAX;
        int k = wsgw_ring_read(r, views, max, arena, arena_size, &info);
        if (k < 0) {
            rc = k;
            break;
        }
        if (k > 0) {
            const uint64_t now = now_ns(CLOCK_REALTIME);
            if (delivered == 0) {
                wall0 = now_ns(CLOCK_MONOTONIC);
                cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
                ivcsw0 = involuntary_switches();
            }
            if (info.lost) {
                lost += info.lost;
                expect = info.resume_seq;
            }
            for (int i = 0; i < k; i++) {
                disorder += views[i].seq != expect;
                expect = views[i].seq + 1;
                lat_ns[delivered++] = now > views[i].ts_ns ? now - views[i].ts_ns : 0;
            }
            continue;
        }
        if (info.lost) {
            lost += info.lost;
            expect = info.resume_seq;
            continue;
        }
        if (info.closed) {
            rc = -EPIPE;
            break;
        }
        const uint64_t mono = now_ns(CLOCK_MONOTONIC);
        if (mono >= deadline) {
            rc = -ETIMEDOUT;
            break;
        }
        int w = wsgw_ring_wait(r, (int64_t)(deadline - mono), spin_ns);
        if (w < 0 && w != -EINTR && w != -EPIPE) {
            rc = w;
            break;
        }
    }
    result[0] = delivered;
    result[1] = lost;
    result[2] = delivered ? now_ns(CLOCK_MONOTONIC) - wall0 : 0;
    result[3] = delivered ? now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0 : 0;
    result[4] = r->st.waits - waits0;
    result[5] = r->st.wakeups - wakeups0;
    result[6] = r->st.spin_hits - hits0;
    result[7] = disorder;
    result[8] = delivered ? involuntary_switches() - ivcsw0 : 0;
    free(views);
    free(arena);
    return rc;
}

#endif /* WSGW_BENCH */
