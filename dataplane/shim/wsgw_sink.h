/* The stream sink: the ring's writer sends /v1/stream frames itself.
 *
 * A sink belongs to one ring writer (the hub's). It holds a table of downstream stream
 * sockets (a dup of each connection's fd, the ring session it reads, the ring topic ids it
 * is subscribed to, or every topic of the session). After each published slice the ring's
 * writer calls wsgw_sink_after_write (msgring.c, under the writer's lock, so slices come in
 * sequence order), and the sink sends every *armed* socket its matching records as
 * unmasked, unfragmented server frames (RFC 6455 section 5.2: text when the payload is valid
 * UTF-8, else binary; the bytes gateway.hub.events.ws_frame makes), in one sendmsg per
 * socket per chunk of records, MSG_DONTWAIT | MSG_NOSIGNAL. The loop thread's wake-up is
 * then off the stream's path: the frames leave in the writer's thread.
 *
 * Hand-over, exact: Python arms a socket at sequence S (wsgw_sink_arm) only when it has
 * written every record before S and its transport holds nothing; the arm is refused
 * (-EAGAIN) when the ring already holds S, so no record falls between the two. From then on
 * the sink owns the socket's records from S on. It disarms the socket itself on a partial
 * send, EAGAIN, any error, or a gap record ($gap topic) of the socket's session (an envelope
 * socket at more: below), and keeps
 * where it stopped: next_seq (the first record it did not send whole) and the rest of a
 * frame it sent in part (wsgw_sink_take_rest: Python writes it first). Python disarms
 * before it writes anything else (control frames, closes, subscription changes), and
 * resumes from next_seq. */
#ifndef WSGW_SINK_H
#define WSGW_SINK_H

#include <stdint.h>

#include "wsgw_ring.h"
#include "wsgw_shim.h"

typedef struct wsgw_sink wsgw_sink;

#define WSGW_SINK_MAX_SOCKETS 1024
#define WSGW_SINK_MAX_TOPICS 4096

/* Why a socket is not armed (state[WSGW_SINK_ST_REASON]). */
enum wsgw_sink_reason {
    WSGW_SINK_NEVER = 0,   /* not armed yet */
    WSGW_SINK_ARMED = 1,   /* armed: the sink sends */
    WSGW_SINK_PYTHON = 2,  /* disarmed by wsgw_sink_disarm */
    WSGW_SINK_AGAIN = 3,   /* the socket's buffer was full (EAGAIN) */
    WSGW_SINK_PARTIAL = 4, /* a frame went out in part: the rest waits in the sink */
    WSGW_SINK_ERROR = 5,   /* send failed (state[WSGW_SINK_ST_ERRNO]) */
    WSGW_SINK_GAP = 6,     /* a gap record of the session: Python sends the notice */
    WSGW_SINK_TOPIC = 7,   /* NATS: a topic without a subject yet: Python publishes it */
    WSGW_SINK_BUSY = 8,    /* NATS: more than busy_sends sends in a millisecond */
    WSGW_SINK_UTF8 = 9,    /* envelope: a payload not UTF-8 (payload_b64 is Python's) */
    WSGW_SINK_EXTRA = 10,  /* envelope: a record written under wsgw_sink_envelope_hold */
};

/* wsgw_sink_state's out[]: */
enum {
    WSGW_SINK_ST_ARMED = 0,  /* 1 while armed */
    WSGW_SINK_ST_NEXT_SEQ,   /* the first record the sink did not send whole (armed: yet) */
    WSGW_SINK_ST_REST_LEN,   /* bytes of a frame sent in part, waiting for take_rest */
    WSGW_SINK_ST_REASON,     /* enum wsgw_sink_reason */
    WSGW_SINK_ST_ERRNO,      /* the failed send's errno */
    WSGW_SINK_ST_MESSAGES,   /* frames sent whole, in all */
    WSGW_SINK_ST_BYTES,      /* bytes sent, in all */
    WSGW_SINK_ST_DISARMS,    /* disarms by the sink (EAGAIN, partial, error, gap) */
    WSGW_SINK_ST_SENDS,      /* sends that wrote something, in all */
    WSGW_SINK_ST_COUNT
};

/* A sink of writer w (held until wsgw_sink_close); gap_topic_id: the $gap topic's id. */
WSGW_API int wsgw_sink_open(wsgw_ring_writer *w, uint32_t gap_topic_id, wsgw_sink **out);
/* Stop sending (no writer touches the sink once it returns), close its fds, free it. */
WSGW_API void wsgw_sink_close(wsgw_sink *s);
/* A socket (fd is duplicated: the sink never writes to a number Python reused) of ring
 * session session_id and topic ids topics[0..n) (n == 0: every topic of the session), not
 * armed. Its slot (>= 0), or -ENOSPC, -EINVAL, -errno of dup. */
WSGW_API int wsgw_sink_add(wsgw_sink *s, int fd, uint32_t session_id, const uint32_t *topics,
                           uint32_t n);
/* When the sink stops sending to slot by itself (any reason but WSGW_SINK_PYTHON), it writes
 * 1 to the eventfd fd (duplicated; -1: none): the loop that follows the ring for that socket
 * need not be woken per record while the sink sends (gateway.hub.follower's park). 0, -EINVAL,
 * -errno of dup. */
WSGW_API int wsgw_sink_wake_fd(wsgw_sink *s, int slot, int fd);
/* Forget the slot (disarmed first) and close its fd. */
WSGW_API int wsgw_sink_remove(wsgw_sink *s, int slot);
/* Arm slot at seq: 0, -EAGAIN (the ring already holds seq: route it first), -EBUSY (a
 * rest is still to be taken), -EDQUOT (a stream socket while max_streams stream sockets are
 * armed: it stays on Python), -EINVAL. */
WSGW_API int wsgw_sink_arm(wsgw_sink *s, int slot, uint64_t seq);
/* At most max_streams stream (not NATS) sockets armed at once (default and maximum
 * WSGW_SINK_MAX_SOCKETS): each costs the writer a send per record, so this bounds the
 * writer's inline fan-out; first armed, first served. Lowering it disarms nobody. The number
 * armed now (>= 0), or -EINVAL. */
WSGW_API int wsgw_sink_max_streams(wsgw_sink *s, uint32_t max_streams);
/* How many more stream sockets may be armed now, read without the sink's mutex (which the
 * writer holds while it sends): a refused stream asks this before it tries again. */
WSGW_API uint32_t wsgw_sink_stream_room(wsgw_sink *s);
/* Disarm (if armed) and fill out[WSGW_SINK_ST_COUNT]. */
WSGW_API int wsgw_sink_disarm(wsgw_sink *s, int slot, uint64_t *out);
/* Fill out[WSGW_SINK_ST_COUNT], changing nothing. */
WSGW_API int wsgw_sink_state(wsgw_sink *s, int slot, uint64_t *out);
/* Move the rest of a frame sent in part into buf (cap bytes at least state's REST_LEN):
 * its length, 0 when none, -ENOBUFS. */
WSGW_API int64_t wsgw_sink_take_rest(wsgw_sink *s, int slot, uint8_t *buf, uint64_t cap);

/* The sink's lag samples: per send (stream or NATS), the time from its oldest record's ring
 * stamp (ts_ns, CLOCK_REALTIME: the session's read) to the send, ns (capped at UINT32_MAX).
 * Copies the newest min(cap, WSGW_SINK_LAG_SAMPLES) into out, oldest first; *total: samples
 * ever taken. Returns the number copied. Records the writer stamped itself (ts_ns 0 given)
 * take no sample. For the split of a consumer's latency (issue #16). */
#define WSGW_SINK_LAG_SAMPLES 1024
WSGW_API uint32_t wsgw_sink_lags(wsgw_sink *s, uint32_t *out, uint32_t cap, uint64_t *total);

/* NATS (core, no JetStream: https://docs.nats.io/reference/reference-protocols/nats-protocol):
 * a connection Python opened (INFO/CONNECT done) whose records of every session the sink
 * sends as `PUB <subject>  <len>\r\n<payload>\r\n`. It stops (disarms) at any $gap record
 * and at a topic id it has no subject for (WSGW_SINK_TOPIC); Python answers the server's
 * PINGs with the socket disarmed. busy_sends: more sends than that within a millisecond
 * disarm it (WSGW_SINK_BUSY: the sink's thread batches better at that rate), 0: never.
 * Its slot, or as wsgw_sink_add. */
#define WSGW_SINK_SUBJECT_MAX 1024
#define WSGW_SINK_MAX_TOPIC_ID (1u << 24)
WSGW_API int wsgw_sink_add_nats(wsgw_sink *s, int fd, uint32_t busy_sends);
/* The subject of topic_id's records on a NATS slot: 0, -EINVAL (not NATS, empty, too long,
 * whitespace), -ENOMEM. */
WSGW_API int wsgw_sink_nats_subject(wsgw_sink *s, int slot, uint32_t topic_id,
                                    const char *subject, uint32_t len);

/* Envelope streams (/v1/stream?envelope=1, gateway.hub.events.Delivery.envelope_wire): a
 * stream socket as wsgw_sink_add's whose records go out each as one text frame of
 *   {"type":"msg","seq":SEQ<middle>TS,"payload":"<the payload as a JSON string>"}
 * where middle is what Python told for the record's topic id (wsgw_sink_envelope_topic:
 * `,"session":S,"topic":"T","recv_ts_ns":`), SEQ the record's ring sequence, TS its ring stamp,
 * and the payload escaped as orjson does (" and \ escaped; bytes below 0x20 as \b \t \n \f
 * \r or \u00xx in lower-case hex; anything else, UTF-8 included, as is). Besides the stream
 * socket's stops it stops (disarms) at a record it wants of a topic without a middle
 * (WSGW_SINK_TOPIC), with a payload that is not UTF-8 (WSGW_SINK_UTF8) or written by a
 * thread under wsgw_sink_envelope_hold (WSGW_SINK_EXTRA): Python sends those. */
#define WSGW_SINK_MIDDLE_MAX 4096
WSGW_API int wsgw_sink_add_envelope(wsgw_sink *s, int fd, uint32_t session_id,
                                    const uint32_t *topics, uint32_t n);
/* The envelope's middle of topic_id's records on an envelope slot: 0, -EINVAL (not an
 * envelope slot, empty, too long), -ENOMEM. */
WSGW_API int wsgw_sink_envelope_topic(wsgw_sink *s, int slot, uint32_t topic_id,
                                      const char *middle, uint32_t len);
/* on != 0: the records this thread writes until it calls this with 0 carry what only Python
 * puts in their envelopes (an upstream_seq: gateway.hub.core's publish_batch), so envelope
 * slots stop at the first of them they want and Python sends it. Per thread, no nesting. */
WSGW_API void wsgw_sink_envelope_hold(int on);

/* A writer's burst (one engine poll's feeds, one ring write call; they nest, per thread):
 * NATS slots keep the PUBs of the records written inside it in their buffer and send them
 * at its end, one send per connection (or earlier: a buffer of 64 KiB, or 1 ms old at the
 * next append). The stream sockets send at once. Without a burst, every ring write is one
 * (msgring.c opens one around each write call, outside the writer's lock, so those sends
 * leave after the lock is released). */
WSGW_API void wsgw_sink_burst_begin(void);
WSGW_API void wsgw_sink_burst_end(void);

/* For the ring's writer (msgring.c): after publishing records m[0..n), numbered first_seq
 * on, those of m[i].ts_ns 0 stamped now. One relaxed load when the process has no sink. */
void wsgw_sink_after_write(const wsgw_ring_writer *w, const struct wsgw_ring_msg *m, uint32_t n,
                           uint64_t first_seq, uint64_t now);

#endif
