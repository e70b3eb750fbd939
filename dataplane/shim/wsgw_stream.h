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

/* Words per envelope in wsgw_stream_read's out[] array. */
#define WSGW_STREAM_WORDS 7
/* info[] words. */
#define WSGW_STREAM_INFO_GOT 0      /* recv's result: bytes read, 0 at EOF, or -errno */
#define WSGW_STREAM_INFO_CONSUMED 1 /* offset in buf past the last envelope described */
#define WSGW_STREAM_INFO_WORDS 2

/* (fd comes last, so that a caller binds the rest once and passes only fd.)
 * Read fd once without blocking (recv, MSG_DONTWAIT) into buf[0..cap); fd < 0: no read,
 * buf[0..cap) is what to scan (info GOT = cap). Then describe the leading run of complete
 * WebSocket frames of what was read that are each one text frame (FIN, no RSV bit, unmasked,
 * the shortest length form, payload <= max_payload) holding exactly
 *   {"type":"msg","seq":N,"session":N,"topic":"T","recv_ts_ns":N,"payload":"P"}
 * with N 1..19 digits (no leading zero), T without a backslash or control byte, P with only
 * the sink's escapes (\" \\ \/ \b \f \n \r \t \u00XX for XX < 0x80), and the whole frame
 * valid UTF-8; at most max_msgs of them, each in WSGW_STREAM_WORDS words of out:
 *   out[0] = seq, out[1] = session, out[2] = recv_ts_ns,
 *   out[3], out[4] = offset in buf and length of T,
 *   out[5], out[6] = offset in pay and length of P unescaped (pay holds cap bytes).
 * info[GOT] = what recv returned (bytes, 0, -errno), info[CONSUMED] = the offset past the
 * last frame described (0 when none; the rest, up to GOT, is the caller's).
 * Returns the number of envelopes described (>= 0), or -EINVAL (bad arguments). */
WSGW_API int wsgw_stream_read(uint8_t *buf, size_t cap, uint64_t max_payload, uint8_t *pay,
                              uint64_t *out, uint32_t max_msgs, int64_t *info, int fd);

#endif
