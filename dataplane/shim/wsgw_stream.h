/* The /v1/stream consumer's read (gateway/client/stream.py): one call that reads the socket
 * and takes the envelopes the C stream sink writes (sink.c envelope_chunk), so the consumer's
 * Python runs per read, not per frame. Only that exact shape is taken; the first frame that
 * is anything else (another field order or field, a control frame, a fragment, a payload
 * escape other than the sink's, a frame not all in the buffer) stops the run, and the caller
 * gives the rest of the read to its WebSocket client (dataplane.ws.WsClient) and JSON parser,
 * which stay the reference: the same events either way (tested for equality).
 */
#ifndef WSGW_STREAM_H
#define WSGW_STREAM_H

#include "wsgw_shim.h"

/* Words per envelope in the out[] array. */
#define WSGW_STREAM_WORDS 7

/* One reader's buffers and limits (set once), and the last read's outcome (got, consumed).
 * The read takes this and the fd only: a call with few arguments costs less in ctypes. */
struct wsgw_stream_ctx {
    uint8_t *buf;         /* cap bytes: what recv reads */
    uint8_t *pay;         /* cap bytes: the payloads, unescaped */
    uint64_t *out;        /* max_msgs * WSGW_STREAM_WORDS words */
    uint64_t cap;
    uint64_t max_payload;
    uint32_t max_msgs;
    uint32_t pad_;
    int64_t got;          /* out: recv's result: bytes read, 0 at EOF, or -errno */
    uint64_t consumed;    /* out: offset in buf past the last envelope described */
};

/* Read fd once without blocking (recv, MSG_DONTWAIT) into buf[0..cap); fd < 0: no read,
 * buf[0..cap) is what to scan (got = cap). Then describe the leading run of complete
 * WebSocket frames of what was read that are each one text frame (FIN, no RSV bit, unmasked,
 * the shortest length form, payload <= max_payload) holding exactly
 *   {"type":"msg","seq":N,"session":N,"topic":"T","recv_ts_ns":N,"payload":"P"}
 * with N 1..19 digits (no leading zero), T without a backslash or control byte, P with only
 * the sink's escapes (\" \\ \/ \b \f \n \r \t \u00XX for XX < 0x80), and the whole frame
 * valid UTF-8; at most max_msgs of them, each in WSGW_STREAM_WORDS words of out:
 *   out[0] = seq, out[1] = session, out[2] = recv_ts_ns,
 *   out[3], out[4] = offset in buf and length of T,
 *   out[5], out[6] = offset in pay and length of P unescaped.
 * got = what recv returned, consumed = the offset past the last frame described (0 when
 * none; the rest, up to got, is the caller's).
 * Returns the number of envelopes described (>= 0), or -EINVAL (bad arguments). */
WSGW_API int wsgw_stream_read(struct wsgw_stream_ctx *c, int fd);

#endif
