/* wsgw message ring: one producer (the engine thread) fans messages out to any number of
 * consumer processes through shared memory. No DPDK, no locks: C11 atomics and POSIX.
 *
 * Model (LMAX/Aeron style broadcast buffer, DPDK rte_seqlock for consistency):
 *  - The writer never blocks and never waits for readers. Readers keep their own position
 *    in private memory, so a slow or dead reader costs the writer nothing.
 *  - Positions are byte offsets that only grow (u64: they never wrap); the slot of a
 *    position is (pos & (capacity - 1)). Sequence numbers are global, contiguous and start
 *    at 1, so a gap's size is exact: first sequence after the gap - expected sequence.
 *  - A reader that was lapped finds out by validating after it copied: the writer announces
 *    every region it is about to overwrite (claim_pos, release fence, then the stores), so
 *    after an acquire fence a reader knows that bytes below claim_pos - capacity may have
 *    changed under it. If any byte it copied lies there, the whole copy is discarded (never
 *    delivered) and the reader resynchronises to the oldest intact record (tail_pos/tail_seq,
 *    kept by the writer as it overwrites), reporting tail_seq - expected messages lost.
 *  - Readers copy records into a private arena before validating; the views they hand out
 *    point there and stay valid until their next read. In-place views could be overwritten
 *    by the writer at any moment after validation, which would deliver torn data.
 *
 * File: /dev/shm/wsgw-<gateway>-<ring> (or a memfd whose fd is passed), laid out as
 *
 *   page 0   control      identity (line 0), producer positions (line 1); readers map all
 *                         but page 1 read-only, so a consumer cannot damage the ring
 *   page 1   wait queue   futex word + waiter count (line 0), then the reader table from
 *                         readers_offset: the only words readers write
 *   page 2.. topic table  max_topics x struct wsgw_ring_topic (id = index, 0 unused)
 *   data     capacity     records, from offset data_offset (page aligned)
 *
 *   control line 0, written once before the file gets its name (so never seen half done):
 *     0 magic u64 · 8 layout u32 · 12 data_offset u32 · 16 capacity u64 · 24 max_payload u32
 *     28 max_topics u32 · 32 topics_offset u32 · 36 waitq_offset u32 · 40 created_ns u64
 *     48 instance u64 (random) · 56 writer_pid u32 · 60 state u32 (bit 0: closed)
 *   control line 1, the producer's (one cache line, written once per published slice):
 *     64 version u64 (odd while a pair below changes: readers take pairs seqlock-style)
 *     72 claim_pos · 80 write_pos · 88 write_seq · 96 tail_pos · 104 tail_seq · 112 topic_count u32
 *   control line 2, the writer's advice to readers (written rarely, read at attach):
 *     128 wait_hint u64: 0 none, else mode << 48 | spin_ns (mode: WSGW_RING_WAIT_*; spin_ns
 *         below 2^48, SPIN only). A ring made before this field existed reads 0 (the page
 *         is zero), so older files and older readers stay compatible: no layout change.
 *     136 readers_offset u32 (file offset of the reader table) · 140 max_readers u32
 *         (layout 2; written once, before the file gets its name)
 *     144 writer_cpu u32: the CPU + 1 of the engine whose feed writes the ring (0: none),
 *         so a reader can sleep on the CPU that wakes it (zero in older files: compatible)
 *   wait page: 0 notify u32 (the futex word) · 4 waiters u32
 *   reader table (layout 2): max_readers x struct wsgw_ring_reader_slot, 128 bytes each,
 *     from readers_offset (page 1 + 128: 31 slots fill the page)
 *
 * Reader table: the writer still never waits for readers; the table only lets the gateway
 * (and tools) see who reads and how far behind they are. A reader with write access claims
 * a free slot at attach (CAS of pid 0 -> its pid), stores its position and counters after
 * every read and a heartbeat (CLOCK_REALTIME) at every read and wait, and frees the slot at
 * detach (pid back to 0, last). A slot whose pid no longer exists (kill(pid, 0): ESRCH; a
 * SIGKILLed reader) is reclaimed by the next attach or listing (CAS dead pid -> new pid or 0,
 * so two reclaimers never share it). A reader that could only open the file read-only, or
 * that finds the table full, reads as before without a slot (invisible). The writer's side
 * may set WSGW_RING_SLOT_CLOSE in a slot (an operator's force-close): the reader's next read
 * or wait fails with -ECONNABORTED. pids are those of the writer's pid namespace only when
 * both share it (a reader in another container shows its own pid, and is never reclaimed
 * as dead unless that pid is unused here too).
 *
 * Sizes: capacity is a power of two (4 KiB .. 1 TiB); a message takes at most half of it
 * (max_payload = capacity/2 - 32, capped at 64 MiB), so a record and the padding before it
 * always fit. A batch is published in slices of at most capacity/2 bytes.
 *
 * Record: a 32-byte header then the payload, padded to 8 bytes (WSGW_RING_ALIGN). A record
 * never wraps: when it does not fit before the end of the buffer the writer first writes a
 * PAD record covering the rest (8 bytes are enough to say so: type and length come first).
 *
 *   off  size  field
 *     0     4  len         MSG: payload bytes. PAD: bytes from this header to the buffer end
 *     4     2  type        1 = MSG, 2 = PAD
 *     6     2  flags       0 (reserved)
 *     8     4  session_id  upstream session the message came from
 *    12     4  topic_id    index in the topic table (0 = no topic)
 *    16     8  seq         global sequence number (MSG only)
 *    24     8  ts_ns       receive time, CLOCK_REALTIME ns (vDSO, read once per batch when
 *                          the caller gives 0; a TSC would need per-host calibration for
 *                          readers and buys nothing at one clock read per batch)
 *    32     -  payload
 *
 * Records are 8-byte aligned, not 64: a 100-byte message takes 136 bytes instead of 192
 * (30% less memory traffic per reader) and the u64 fields stay naturally aligned. False
 * sharing between neighbours does not matter: a published record is never rewritten while
 * it is live, and readers copy whole runs of records at a time.
 *
 * Wake-up: a reader that wants to sleep increments waiters, reads notify, re-checks
 * write_pos and the closed bit, then FUTEX_WAITs on notify (shared futex, with a timeout).
 * The writer, after publishing, issues a full fence and loads waiters; only when it is not
 * zero does it bump notify and FUTEX_WAKE everyone: one load per slice while nobody sleeps.
 * A reader SIGKILLed while asleep leaves waiters > 0; the writer then pays one useless
 * FUTEX_WAKE per slice: a cost, never a lost wake-up. A reader that could only open the file
 * read-only polls with short sleeps.
 *
 * Wait policies (wsgw_ring_wait's spin_ns), for consumers that trade a core for latency:
 *  - futex (0, the default): sleep at once. Costs no CPU while idle; a wake-up costs a futex
 *    round trip and a scheduler wake-up of the reader (tens of us on a loaded 2-core VM).
 *  - spin then block (> 0): poll write_pos with cpu_relax (PAUSE) for spin_ns, then sleep on
 *    the futex. The DPDK/Aeron/LMAX "busy spin, then back off" wait: a feed that keeps
 *    publishing within spin_ns never pays a wake-up; an idle one costs spin_ns per wait.
 *  - busy (< 0, WSGW_RING_SPIN_BUSY): poll until data, close, interrupt or the timeout; a
 *    whole core. Every WSGW_RING_PROBE_NS it probes the writer's flock: once the writer is
 *    gone (crashed), nothing more can come and the wait falls back to the futex.
 * Spinning readers never write shared memory (waiters stays untouched), so the writer's cost
 * does not change; the spin runs in C with the caller's GIL released.
 *
 * Liveness: the writer holds an flock(LOCK_EX) on the file for its whole life; readers probe
 * it (wsgw_ring_writer_alive) to tell a crashed gateway from an idle one. A successor
 * created with WSGW_RING_F_REPLACE marks the old ring closed, so its readers stop.
 *
 * Trust: readers treat the file as untrusted input (every length and offset is checked
 * before it is used), but a process with write access that truncates the file would still
 * make readers fault (SIGBUS); memfd rings are sealed against that.
 *
 * All fields are host byte order (readers and the writer share one machine).
 * Writers: any threads of the writer's process (the hub, the engines' feeds); every writer
 * call takes the writer's spinlock, so one call's messages get consecutive sequence numbers
 * and callers read the numbers they got from the return value. Readers: any number of
 * processes/threads, one thread per reader handle.
 */
#ifndef WSGW_RING_H
#define WSGW_RING_H

#include <stddef.h>
#include <stdint.h>

#include "wsgw_shim.h"

#define WSGW_RING_MAGIC 0x474e495257475357ull /* "WSGWRING" as little-endian bytes */
#define WSGW_RING_LAYOUT 2                    /* bumped on any change of the file layout */
#define WSGW_RING_API 5                       /* bumped on any change of the C API below */
#define WSGW_RING_CACHELINE 64
#define WSGW_RING_PAGE 4096
#define WSGW_RING_ALIGN 8
#define WSGW_RING_REC_HDR 32
#define WSGW_RING_MIN_CAPACITY 4096u
#define WSGW_RING_MAX_CAPACITY (1ull << 40)
#define WSGW_RING_TOPIC_NAME_MAX 56
#define WSGW_RING_MAX_TOPICS 65536u
#define WSGW_RING_DEFAULT_TOPICS 4096u
#define WSGW_RING_READER_NAME_MAX 64
#define WSGW_RING_READERS_OFFSET (WSGW_RING_PAGE + 128)
#define WSGW_RING_MAX_READERS 31 /* (WSGW_RING_PAGE - 128) / sizeof(struct wsgw_ring_reader_slot) */

enum wsgw_ring_rec_type { WSGW_RING_REC_MSG = 1, WSGW_RING_REC_PAD = 2 };

/* ctl.state bits */
#define WSGW_RING_STATE_CLOSED 1u /* the writer closed the ring: nothing more will come */

/* ---- shared layout (offsets are part of the layout version) ----------------------------- */
struct wsgw_ring_rec {
    uint32_t len;
    uint16_t type;
    uint16_t flags;
    uint32_t session_id;
    uint32_t topic_id;
    uint64_t seq;
    uint64_t ts_ns;
};

struct wsgw_ring_topic {
    uint32_t len;  /* name length; stored last (release): 0 = slot not yet published */
    uint32_t reserved;
    char name[WSGW_RING_TOPIC_NAME_MAX];
};

/* One reader's slot in the reader table (page 1). pid 0: free. Written by its reader,
 * except flags' WSGW_RING_SLOT_CLOSE (the writer's side); read by anyone. */
struct wsgw_ring_reader_slot {
    uint32_t pid;
    uint32_t flags;         /* WSGW_RING_SLOT_* */
    uint64_t attached_ns;   /* CLOCK_REALTIME */
    uint64_t heartbeat_ns;  /* last read or wait, CLOCK_REALTIME */
    uint64_t next_seq;      /* sequence the reader expects next (last read + 1) */
    uint64_t messages;      /* delivered */
    uint64_t gaps;          /* times it was lapped */
    uint64_t lost;          /* messages lost in them (dropped) */
    uint64_t reserved;
    char name[WSGW_RING_READER_NAME_MAX]; /* NUL padded; not NUL terminated when full */
};

/* slot flags */
#define WSGW_RING_SLOT_CLOSE 1u /* the operator closed this reader: its reads fail */

/* One entry of wsgw_ring_readers (a copy of a slot, for bindings: all u64 then the name). */
struct wsgw_ring_reader_entry {
    uint64_t slot;
    uint64_t pid;
    uint64_t flags;
    uint64_t attached_ns;
    uint64_t heartbeat_ns;
    uint64_t next_seq;
    uint64_t messages;
    uint64_t gaps;
    uint64_t lost;
    uint64_t alive; /* 1: the pid exists (kill(pid, 0)), 0: gone (the slot was reclaimed) */
    char name[WSGW_RING_READER_NAME_MAX];
};

/* create/attach flags */
#define WSGW_RING_F_REPLACE 1u      /* create: take over a ring file whose writer is gone */
#define WSGW_RING_F_START_OLDEST 2u /* attach: start at the oldest record still in the ring */

/* One message for wsgw_ring_write_batch (C callers). */
struct wsgw_ring_msg {
    const void *data;
    uint32_t len;
    uint32_t session_id;
    uint32_t topic_id;
    uint32_t reserved;
    uint64_t ts_ns; /* 0: now (CLOCK_REALTIME, read once per batch) */
};

/* One delivered message: its payload is arena[offset, offset + len) of the reader. */
struct wsgw_ring_view {
    uint64_t seq;
    uint64_t ts_ns;
    uint32_t session_id;
    uint32_t topic_id;
    uint32_t offset;
    uint32_t len;
};

/* Filled by wsgw_ring_read. All u64 so bindings can read it as one array. */
struct wsgw_ring_read_info {
    uint64_t lost;        /* messages lost (lapped) in this call, right before views[0] */
    uint64_t resume_seq;  /* with lost: the first sequence after the gap, which is
                           * [resume_seq - lost, resume_seq - 1] */
    uint64_t next_seq;    /* sequence the reader expects next */
    uint64_t write_seq;   /* last sequence the writer had published */
    uint64_t topic_count; /* highest topic id registered so far */
    uint64_t closed;      /* 1: the writer closed the ring (read before write_pos) */
    uint64_t filtered;    /* messages skipped by the topic filter in this call */
    uint64_t woke_ns;     /* wsgw_ring_read_wait: CLOCK_REALTIME when its last wait ended
                           * (0: it did not wait); wsgw_ring_read sets 0 */
};

/* A snapshot of the ring for status pages and tests. */
struct wsgw_ring_info {
    uint64_t capacity;
    uint64_t data_offset;
    uint64_t max_payload;
    uint64_t max_topics;
    uint64_t topic_count;
    uint64_t write_pos;
    uint64_t write_seq;  /* last published sequence (0: none yet) */
    uint64_t tail_pos;
    uint64_t tail_seq;   /* oldest sequence still in the ring (write_seq + 1 when empty) */
    uint64_t state;
    uint64_t writer_pid;
    uint64_t instance;
    uint64_t created_ns;
    uint64_t waiters;
};

struct wsgw_ring_writer_stats {
    uint64_t messages, bytes, batches, pads;
    uint64_t overwritten; /* messages that left the ring to make room (oldest first) */
    uint64_t wakeups;     /* FUTEX_WAKE calls (only made when a reader sleeps) */
};

struct wsgw_ring_reader_stats {
    uint64_t messages, bytes;
    uint64_t gaps, lost;  /* lapped events, messages lost in them */
    uint64_t filtered;
    uint64_t retries;     /* copies discarded by validation */
    uint64_t waits, wakeups;
    uint64_t spin_hits;   /* waits that saw data while spinning (no futex) */
    uint64_t spin_ns;     /* time spent spinning, all waits together */
};

/* The wait policy the writer recommends to its readers (the gateway's latency profile):
 * readers that were not told how to wait follow it. NONE: no advice. */
enum wsgw_ring_wait_mode {
    WSGW_RING_WAIT_NONE = 0,
    WSGW_RING_WAIT_FUTEX = 1,
    WSGW_RING_WAIT_SPIN = 2,
    WSGW_RING_WAIT_BUSY = 3,
    WSGW_RING_WAIT_ADAPTIVE = 4, /* spin_ns is the cap (see WSGW_RING_SPIN_ADAPTIVE) */
};
#define WSGW_RING_WAIT_SPIN_MAX_NS ((1ull << 48) - 1)
/* wsgw_ring_wait's spin_ns | this flag: the adaptive policy, the low bits its cap. It spins
 * up to twice the recent wait (an average of the last few waits' lengths: how long the feed
 * has been leaving this reader idle) when that is below the cap, and sleeps at once when it
 * is not: a fast feed is caught by the spin with no wake-up, a slow one costs no CPU. */
#define WSGW_RING_SPIN_ADAPTIVE (1ll << 62)

/* wsgw_ring_wait's spin_ns for the busy policy; how often a busy spin probes the writer. */
#define WSGW_RING_SPIN_BUSY (-1)
#define WSGW_RING_PROBE_NS 50000000ull

typedef struct wsgw_ring_writer wsgw_ring_writer;
typedef struct wsgw_ring_reader wsgw_ring_reader;

/* ---- identity -------------------------------------------------------------------------- */
WSGW_API int wsgw_ring_api_version(void);
WSGW_API int wsgw_ring_layout_version(void);

/* ---- writer ---------------------------------------------------------------------------- */
/* Create a ring of capacity bytes (power of two, >= 4096) at path, or as a memfd when path is
 * NULL (get the fd with wsgw_ring_writer_fd, pass it to readers). The file is built under a
 * temporary name and linked into place complete, so a reader never sees half a header.
 * -EEXIST: path exists (WSGW_RING_F_REPLACE takes over when its writer is gone);
 * -EBUSY: a live writer holds it; -ENOSPC: /dev/shm too small (reserved now, never SIGBUS). */
WSGW_API int wsgw_ring_create(const char *path, uint64_t capacity, uint32_t max_topics,
                              uint32_t mode, uint32_t flags, wsgw_ring_writer **out);
WSGW_API int wsgw_ring_writer_fd(const wsgw_ring_writer *w);
/* Register a topic name (1..56 bytes); returns its id (> 0), the same id for the same name. */
WSGW_API int wsgw_ring_topic_register(wsgw_ring_writer *w, const char *name, uint32_t len);
/* Append one message; returns its sequence number (> 0) or -errno (-EMSGSIZE, -EINVAL). */
WSGW_API int64_t wsgw_ring_write(wsgw_ring_writer *w, uint32_t session_id, uint32_t topic_id,
                                 uint64_t ts_ns, const void *data, uint32_t len);
/* Append n messages, published together (one release store per <= capacity/2 bytes).
 * All or nothing: every message is checked first. Returns the first sequence or -errno. */
WSGW_API int64_t wsgw_ring_write_batch(wsgw_ring_writer *w, const struct wsgw_ring_msg *msgs,
                                       uint32_t n);
/* The same from columns (what bindings build cheaply): payloads back to back in blob with
 * lens[i] bytes each; sessions/topics per message; ts NULL means now. */
WSGW_API int64_t wsgw_ring_write_packed(wsgw_ring_writer *w, const uint8_t *blob,
                                        const uint32_t *lens, const uint32_t *sessions,
                                        const uint32_t *topics, const uint64_t *ts,
                                        uint32_t n);
WSGW_API int wsgw_ring_writer_info(const wsgw_ring_writer *w, struct wsgw_ring_info *out);
WSGW_API int wsgw_ring_writer_stats(const wsgw_ring_writer *w,
                                    struct wsgw_ring_writer_stats *out);
/* Recommend a wait policy to readers: mode WSGW_RING_WAIT_*, spin_ns (1..2^48-1) for SPIN
 * only (0 otherwise). May be called at any time; readers look when they attach.
 * -EINVAL: unknown mode or a spin_ns that does not fit. */
WSGW_API int wsgw_ring_set_wait_hint(wsgw_ring_writer *w, uint32_t mode, uint64_t spin_ns);
/* Publish the CPU the feed's engine runs on (-1: none), for readers that want to wait on it.
 * -EINVAL: below -1 or not below WSGW_RING_MAX_CPU. */
#define WSGW_RING_MAX_CPU 4096
WSGW_API int wsgw_ring_set_writer_cpu(wsgw_ring_writer *w, int32_t cpu);
/* The reader table: copies of the occupied slots into out[0..max) (lowest slot first);
 * returns how many. Slots of dead pids are reclaimed on the way (and not listed). */
WSGW_API int wsgw_ring_readers(const wsgw_ring_writer *w, struct wsgw_ring_reader_entry *out,
                               uint32_t max);
/* Ask the reader in slot (if its pid is still pid) to stop: its next read or wait returns
 * -ECONNABORTED; sleeping readers are woken. -ENOENT: no such reader (gone, or another). */
WSGW_API int wsgw_ring_close_reader(wsgw_ring_writer *w, uint32_t slot, uint32_t pid);
/* Mark the ring closed, wake every sleeping reader, unmap; unlink the file when asked
 * (only if the path still names this ring). Readers keep their mapping and drain it. */
WSGW_API void wsgw_ring_writer_close(wsgw_ring_writer *w, int unlink_file);
/* Inside the library: C code that keeps writing through a writer it does not own (an engine's
 * feed) holds a reference, so a close by the owner never unmaps the ring under it; its
 * writes fail with -EPIPE once the ring is closed. */
void wsgw_ring_writer_retain(wsgw_ring_writer *w);
void wsgw_ring_writer_release(wsgw_ring_writer *w);

/* ---- reader ---------------------------------------------------------------------------- */
/* Attach to the ring at path, or to fd when path is NULL (reopened, so the caller keeps its
 * fd). Starts at the newest position unless WSGW_RING_F_START_OLDEST. Claims a slot of the
 * reader table when it can (named after the process: PR_GET_NAME).
 * -ENOENT: no such ring; -EBADMSG: not a wsgw ring (magic, sizes);
 * -EPROTONOSUPPORT: a layout version this library does not read. */
WSGW_API int wsgw_ring_attach(const char *path, int fd, uint32_t flags,
                              wsgw_ring_reader **out);
/* Copy up to max messages into the caller's arena (8-byte aligned payloads, back to back)
 * and describe them in views. Never blocks. The arena belongs to the caller, so views into
 * it outlive the reader; it must hold max_payload bytes for every message to fit.
 * Returns how many (>= 0; info->lost > 0 reports a gap before them) or -errno
 * (-EBADMSG: the ring is corrupt, not merely lapped; -EMSGSIZE: arena too small;
 * -ECONNABORTED: the operator closed this reader). */
WSGW_API int wsgw_ring_read(wsgw_ring_reader *r, struct wsgw_ring_view *views, uint32_t max,
                            uint8_t *arena, uint32_t arena_size,
                            struct wsgw_ring_read_info *info);
/* Wait until there is something to read: 1 ready, 0 timeout, -EPIPE closed and drained,
 * -EINTR a signal arrived (retry after handling it), -ECANCELED wsgw_ring_reader_interrupt,
 * -ECONNABORTED the operator closed this reader (wsgw_ring_close_reader).
 * timeout_ns < 0 waits forever. spin_ns is the wait policy (see "Wait policies" above):
 * 0 sleeps on the futex at once, > 0 spins that long first, < 0 spins until the timeout
 * (falling back to the futex only when the writer is gone); WSGW_RING_SPIN_ADAPTIVE | cap
 * spins as that flag says. Without write access to the wait page the sleep is a poll with
 * short sleeps. */
WSGW_API int wsgw_ring_wait(wsgw_ring_reader *r, int64_t timeout_ns, int64_t spin_ns);
/* The spinning half of the adaptive policy, for a reader that splits its wait between a
 * thread that must not sleep (an event loop) and one that may: spins as
 * WSGW_RING_SPIN_ADAPTIVE | cap would and never sleeps. 0 at once when the recent wait is
 * over the cap (a slow feed: sleep elsewhere now), 0 also when nothing came within the
 * spin, else as wsgw_ring_wait. A spin that catches data counts in the recent wait. */
WSGW_API int wsgw_ring_spin_adaptive(wsgw_ring_reader *r, uint64_t cap);
/* wsgw_ring_read, and when that finds nothing (no message, no gap, not closed) and timeout_ns
 * is not 0: wsgw_ring_wait(timeout_ns, spin_ns) and read again, in one call, so a consumer
 * pays one crossing of its binding per wake-up and runs none of its own code between the
 * wake-up and the batch. Waits again while what came was all filtered out, until the
 * timeout. Returns what wsgw_ring_read returns (0 also after the timeout: one last read
 * found nothing), -ECANCELED (wsgw_ring_reader_interrupt, and nothing to report), -EINTR (a
 * signal: handle it and call again) or -ECONNABORTED; info->woke_ns stamps the wake-up
 * (info may be NULL, as for wsgw_ring_read). */
WSGW_API int wsgw_ring_read_wait(wsgw_ring_reader *r, struct wsgw_ring_view *views,
                                 uint32_t max, uint8_t *arena, uint32_t arena_size,
                                 struct wsgw_ring_read_info *info, int64_t timeout_ns,
                                 int64_t spin_ns);
/* Make a wait on r (in another thread) return -ECANCELED now, or the next one if none runs. */
WSGW_API void wsgw_ring_reader_interrupt(wsgw_ring_reader *r);
/* Deliver only the topic ids in ids[0..n) among ids 0..upto; ids above upto (registered after
 * the caller looked at the table) are all delivered, for the caller to decide once it knows
 * their names. ids NULL: deliver everything. */
WSGW_API int wsgw_ring_reader_filter(wsgw_ring_reader *r, const uint32_t *ids, uint32_t n,
                                     uint32_t upto);
/* Jump to the oldest record (1) or the newest position (0); the skipped ones are no gap. */
WSGW_API int wsgw_ring_reader_seek(wsgw_ring_reader *r, int oldest);
/* Topic name of id into buf (not NUL terminated); returns its length or -ENOENT. */
WSGW_API int wsgw_ring_topic_name(const wsgw_ring_reader *r, uint32_t id, char *buf,
                                  uint32_t buflen);
WSGW_API int wsgw_ring_reader_info(const wsgw_ring_reader *r, struct wsgw_ring_info *out);
WSGW_API int wsgw_ring_reader_stats(const wsgw_ring_reader *r,
                                    struct wsgw_ring_reader_stats *out);
WSGW_API uint64_t wsgw_ring_reader_next_seq(const wsgw_ring_reader *r);
/* The writer's recommended wait policy: returns its mode (WSGW_RING_WAIT_NONE: none given)
 * and stores its spin_ns (0 unless SPIN) when spin_ns is not NULL. */
WSGW_API int wsgw_ring_wait_hint(const wsgw_ring_reader *r, uint64_t *spin_ns);
/* The CPU the writer published (wsgw_ring_set_writer_cpu), -1: none. */
WSGW_API int32_t wsgw_ring_writer_cpu(const wsgw_ring_reader *r);
/* 1: a writer holds the ring (flock), 0: none (crashed or closed), -errno. */
WSGW_API int wsgw_ring_writer_alive(const wsgw_ring_reader *r);
/* The reader's slot in the reader table, or -1: none (read-only file, or the table full). */
WSGW_API int wsgw_ring_reader_slot(const wsgw_ring_reader *r);
/* Name the reader in its slot (1..64 bytes; longer is cut). -ENOENT: it has no slot. */
WSGW_API int wsgw_ring_reader_set_name(wsgw_ring_reader *r, const char *name, uint32_t len);
/* Frees the reader's slot. */
WSGW_API void wsgw_ring_detach(wsgw_ring_reader *r);

/* Benchmark entry points: in the library only when built for benchmarks (setup.py's
 * WSGW_BENCH: the in-place build of a checkout, `make shim`; never the wheel's). */
#ifdef WSGW_BENCH
/* ---- benchmarks: loops in C, so the figure is the ring's and not the FFI's -------------- */
/* Write n messages of payload_len bytes in batches of batch; returns elapsed ns or -errno. */
WSGW_API int64_t wsgw_ring_bench_write(wsgw_ring_writer *w, uint32_t payload_len, uint64_t n,
                                       uint32_t batch);
/* Alternate a write batch and a read batch in this thread until n messages were read, and
 * check their order. Returns elapsed ns or -errno (-EPROTO: out of order or lost). */
WSGW_API int64_t wsgw_ring_bench_rw(wsgw_ring_writer *w, wsgw_ring_reader *r,
                                    uint32_t payload_len, uint64_t n, uint32_t batch);
/* Busy-poll until n messages were delivered or lost, or timeout_ns passed; result[0..3] =
 * delivered, lost, payload bytes, ns from the first delivered message to the last.
 * Returns 0 or -errno (-ETIMEDOUT keeps the partial result). */
WSGW_API int wsgw_ring_bench_read(wsgw_ring_reader *r, uint64_t n, int64_t timeout_ns,
                                  uint64_t result[4]);
/* Publish -> receipt latency, writer side: n messages of payload_len bytes, one due every
 * period_ns (CLOCK_MONOTONIC). The thread sleeps until the next one is due, but at least
 * WSGW_RING_PACE_TICK_NS between publishes (an engine poll's worth: 100k wake-ups a second
 * would take the writer a core of their own), with 1 ns timer slack while it runs; the
 * messages that fell due meanwhile go out in one publish, each stamped (ts_ns,
 * CLOCK_REALTIME) right before it. result[0..3] = publishes, messages, largest publish,
 * elapsed ns. Returns 0 or -errno. */
#define WSGW_RING_PACE_TICK_NS 50000ull
WSGW_API int wsgw_ring_bench_pace(wsgw_ring_writer *w, uint32_t payload_len, uint64_t n,
                                  uint64_t period_ns, uint64_t result[4]);
/* Reader side: read, and wsgw_ring_wait(spin_ns) whenever there is nothing, until n messages
 * were delivered or lost (or the timeout, -ETIMEDOUT, or the close, -EPIPE, keeping the
 * partial result); checks the order. lat_ns[i] = CLOCK_REALTIME right after the read that
 * delivered message i, minus its ts_ns (lat_ns holds n). result[0..7] = delivered, lost,
 * wall ns and thread CPU ns from the first receipt to the end, waits, futex wake-ups,
 * spin hits, out-of-order messages, involuntary context switches of the thread (times the
 * scheduler took its CPU away: what a spinning reader's tail latency is made of). */
WSGW_API int wsgw_ring_bench_latency(wsgw_ring_reader *r, uint64_t n, int64_t timeout_ns,
                                     int64_t spin_ns, uint64_t *lat_ns, uint64_t result[9]);

#endif /* WSGW_BENCH */
#endif
