"""The C shim's public surface: everything code outside dataplane/shim may use of it.

The modules of this package are private: `_loader` opens libwsgw_shim.so (the one place that
does) and `_bind_<area>` declares one C area's prototypes and Structures. Import from here,
never from them (tests/unit/test_shim_imports.py fails on a `_bind_*` or `_loader` import
outside this package). Names are re-exported, not wrapped: a function bound here is the same
object as in its binding, so the hot path pays no extra Python call. Names that would be
ambiguous at this level carry their area's prefix (`ring_create`, `JSON_NULL`, `TOPIC_OK`).
"""

from dataplane.shim import _bind_sink as stream_sink  # the stream sink (sink.c)
from dataplane.shim._bind_arbiter import ARB_OUT_FORMAT, ArbLegStats, ArbOut, ArbTotals
from dataplane.shim._bind_arbiter import DELIVERED as ARB_DELIVERED
from dataplane.shim._bind_arbiter import LAG_SAMPLES as ARB_LAG_SAMPLES
from dataplane.shim._bind_arbiter import MAX_LEGS as ARB_MAX_LEGS
from dataplane.shim._bind_arbiter import NO_MISSING as ARB_NO_MISSING
from dataplane.shim._bind_arbiter import NO_PREV as ARB_NO_PREV
from dataplane.shim._bind_arbiter import UNREAD_FN as ARB_UNREAD_FN
from dataplane.shim._bind_arbiter import lib as arbiter_library
from dataplane.shim._bind_book import APPLIED as BOOK_APPLIED
from dataplane.shim._bind_book import ASKS as BOOK_ASKS
from dataplane.shim._bind_book import BIDS as BOOK_BIDS
from dataplane.shim._bind_book import CHECKSUM as BOOK_CHECKSUM
from dataplane.shim._bind_book import IGNORED as BOOK_IGNORED
from dataplane.shim._bind_book import OUT_BINARY as BOOK_OUT_BINARY
from dataplane.shim._bind_book import OUT_JSON as BOOK_OUT_JSON
from dataplane.shim._bind_book import STATUS_NAMES as BOOK_STATUS_NAMES
from dataplane.shim._bind_book import BookError, CBook
from dataplane.shim._bind_engine import (
    EngineBinding,
    EngineConf,
    FlowStruct,
    bench_checksum,
    flow_template,
)
from dataplane.shim._bind_feed import MAX_TOPICS as FEED_MAX_TOPICS
from dataplane.shim._bind_feed import TOPIC_MAX as FEED_TOPIC_MAX
from dataplane.shim._bind_feed import (
    FeedBinding,
    FeedError,
    GroupBinding,
    GroupConf,
    GroupStats,
    flow_set_feed,
)
from dataplane.shim._bind_identity import DIALECTS as IDENTITY_DIALECTS
from dataplane.shim._bind_identity import ID as IDENTITY_ID
from dataplane.shim._bind_identity import NO_PREV as IDENTITY_NO_PREV
from dataplane.shim._bind_identity import SEQUENCE as IDENTITY_SEQUENCE
from dataplane.shim._bind_identity import IdentityStruct
from dataplane.shim._bind_identity import dialect_code as identity_dialect_code
from dataplane.shim._bind_identity import scan as identity_scan
from dataplane.shim._bind_nats import NatsScanner
from dataplane.shim._bind_ring import F_REPLACE as RING_F_REPLACE
from dataplane.shim._bind_ring import F_START_OLDEST as RING_F_START_OLDEST
from dataplane.shim._bind_ring import INFO_CLOSED as RING_INFO_CLOSED
from dataplane.shim._bind_ring import INFO_LOST as RING_INFO_LOST
from dataplane.shim._bind_ring import INFO_RESUME_SEQ as RING_INFO_RESUME_SEQ
from dataplane.shim._bind_ring import INFO_TOPIC_COUNT as RING_INFO_TOPIC_COUNT
from dataplane.shim._bind_ring import INFO_WOKE_NS as RING_INFO_WOKE_NS
from dataplane.shim._bind_ring import MAGIC as RING_MAGIC
from dataplane.shim._bind_ring import MAX_READERS as RING_MAX_READERS
from dataplane.shim._bind_ring import REC_HDR as RING_REC_HDR
from dataplane.shim._bind_ring import RING_API, RING_LAYOUT
from dataplane.shim._bind_ring import SPIN_ADAPTIVE as RING_SPIN_ADAPTIVE
from dataplane.shim._bind_ring import SPIN_BUSY as RING_SPIN_BUSY
from dataplane.shim._bind_ring import TOPIC_NAME_MAX as RING_TOPIC_NAME_MAX
from dataplane.shim._bind_ring import VIEW_FORMAT as RING_VIEW_FORMAT
from dataplane.shim._bind_ring import VIEW_SIZE as RING_VIEW_SIZE
from dataplane.shim._bind_ring import WAIT_ADAPTIVE as RING_WAIT_ADAPTIVE
from dataplane.shim._bind_ring import WAIT_BUSY as RING_WAIT_BUSY
from dataplane.shim._bind_ring import WAIT_FUTEX as RING_WAIT_FUTEX
from dataplane.shim._bind_ring import WAIT_NONE as RING_WAIT_NONE
from dataplane.shim._bind_ring import WAIT_SPIN as RING_WAIT_SPIN
from dataplane.shim._bind_ring import WAIT_SPIN_MAX_NS as RING_WAIT_SPIN_MAX_NS
from dataplane.shim._bind_ring import ReadBuffers as RingReadBuffers
from dataplane.shim._bind_ring import WriteFn as RingWriteFn
from dataplane.shim._bind_ring import attach as ring_attach
from dataplane.shim._bind_ring import bench_latency as ring_bench_latency
from dataplane.shim._bind_ring import bench_pace as ring_bench_pace
from dataplane.shim._bind_ring import bench_read as ring_bench_read
from dataplane.shim._bind_ring import bench_rw as ring_bench_rw
from dataplane.shim._bind_ring import bench_write as ring_bench_write
from dataplane.shim._bind_ring import close_reader as ring_close_reader
from dataplane.shim._bind_ring import create as ring_create
from dataplane.shim._bind_ring import detach as ring_detach
from dataplane.shim._bind_ring import interrupt as ring_interrupt
from dataplane.shim._bind_ring import last_error as ring_last_error
from dataplane.shim._bind_ring import next_seq as ring_next_seq
from dataplane.shim._bind_ring import reader_info as ring_reader_info
from dataplane.shim._bind_ring import reader_set_name as ring_reader_set_name
from dataplane.shim._bind_ring import reader_slot as ring_reader_slot
from dataplane.shim._bind_ring import reader_stats as ring_reader_stats
from dataplane.shim._bind_ring import readers as ring_readers
from dataplane.shim._bind_ring import seek as ring_seek
from dataplane.shim._bind_ring import set_filter as ring_set_filter
from dataplane.shim._bind_ring import set_wait_hint as ring_set_wait_hint
from dataplane.shim._bind_ring import set_writer_cpu as ring_set_writer_cpu
from dataplane.shim._bind_ring import spin_adaptive as ring_spin_adaptive
from dataplane.shim._bind_ring import topic_name as ring_topic_name
from dataplane.shim._bind_ring import topic_register as ring_topic_register
from dataplane.shim._bind_ring import versions as ring_versions
from dataplane.shim._bind_ring import wait as ring_wait
from dataplane.shim._bind_ring import wait_hint as ring_wait_hint
from dataplane.shim._bind_ring import writer_alive as ring_writer_alive
from dataplane.shim._bind_ring import writer_close as ring_writer_close
from dataplane.shim._bind_ring import writer_cpu as ring_writer_cpu
from dataplane.shim._bind_ring import writer_fd as ring_writer_fd
from dataplane.shim._bind_ring import writer_info as ring_writer_info
from dataplane.shim._bind_ring import writer_stats as ring_writer_stats
from dataplane.shim._bind_ringnotify import count as ring_notifier_count
from dataplane.shim._bind_ringnotify import is_direct as ring_notifier_is_direct
from dataplane.shim._bind_ringnotify import rearm as ring_notifier_rearm
from dataplane.shim._bind_ringnotify import start as ring_notifier_start
from dataplane.shim._bind_ringnotify import start_direct as ring_notifier_start_direct
from dataplane.shim._bind_ringnotify import stop as ring_notifier_stop
from dataplane.shim._bind_stream import StreamRead
from dataplane.shim._bind_topic import ABSENT as JSON_ABSENT
from dataplane.shim._bind_topic import ARRAY as JSON_ARRAY
from dataplane.shim._bind_topic import FALSE as JSON_FALSE
from dataplane.shim._bind_topic import KIND_NAMES as JSON_KIND_NAMES
from dataplane.shim._bind_topic import MALFORMED as TOPIC_MALFORMED
from dataplane.shim._bind_topic import MAX_DEPTH as TOPIC_MAX_DEPTH
from dataplane.shim._bind_topic import MAX_KEY as TOPIC_MAX_KEY
from dataplane.shim._bind_topic import MAX_NESTING as TOPIC_MAX_NESTING
from dataplane.shim._bind_topic import MAX_PATHS as TOPIC_MAX_PATHS
from dataplane.shim._bind_topic import NULL as JSON_NULL
from dataplane.shim._bind_topic import NUMBER as JSON_NUMBER
from dataplane.shim._bind_topic import OBJECT as JSON_OBJECT
from dataplane.shim._bind_topic import OK as TOPIC_OK
from dataplane.shim._bind_topic import PARTIAL as TOPIC_PARTIAL
from dataplane.shim._bind_topic import STRING as JSON_STRING
from dataplane.shim._bind_topic import STRING_ESC as JSON_STRING_ESC
from dataplane.shim._bind_topic import TOO_DEEP as TOPIC_TOO_DEEP
from dataplane.shim._bind_topic import TRUE as JSON_TRUE
from dataplane.shim._bind_topic import Component as TopicPathComponent
from dataplane.shim._bind_topic import Span as TopicValueSpan
from dataplane.shim._bind_topic import TopicBatch, TopicError, TopicSpec
from dataplane.shim._bind_topic import build_spec as build_topic_spec
from dataplane.shim._bind_topic import extract as topic_extract
from dataplane.shim._bind_udpgen import FloodResult as UdpFloodResult
from dataplane.shim._bind_udpgen import udp_flood, udp_frame
from dataplane.shim._bind_ws import CBatchScanner as WsBatchScanner
from dataplane.shim._bind_ws import CScanner as WsScanner
from dataplane.shim._bind_ws import SeqCheck as WsSeqCheck
from dataplane.shim._bind_ws import mask_copy as ws_mask_copy
from dataplane.shim._bind_ws import mask_inplace as ws_mask_inplace
from dataplane.shim._bind_ws import mask_into as ws_mask_into
from dataplane.shim._bind_ws import utf8_valid
from dataplane.shim._loader import ABI_VERSION, Shim, available, library, load, shim_info

__all__ = [
    "ABI_VERSION",
    "ARB_DELIVERED",
    "ARB_LAG_SAMPLES",
    "ARB_MAX_LEGS",
    "ARB_NO_MISSING",
    "ARB_NO_PREV",
    "ARB_OUT_FORMAT",
    "ARB_UNREAD_FN",
    "BOOK_APPLIED",
    "BOOK_ASKS",
    "BOOK_BIDS",
    "BOOK_CHECKSUM",
    "BOOK_IGNORED",
    "BOOK_OUT_BINARY",
    "BOOK_OUT_JSON",
    "BOOK_STATUS_NAMES",
    "FEED_MAX_TOPICS",
    "FEED_TOPIC_MAX",
    "IDENTITY_DIALECTS",
    "IDENTITY_ID",
    "IDENTITY_NO_PREV",
    "IDENTITY_SEQUENCE",
    "JSON_ABSENT",
    "JSON_ARRAY",
    "JSON_FALSE",
    "JSON_KIND_NAMES",
    "JSON_NULL",
    "JSON_NUMBER",
    "JSON_OBJECT",
    "JSON_STRING",
    "JSON_STRING_ESC",
    "JSON_TRUE",
    "RING_API",
    "RING_F_REPLACE",
    "RING_F_START_OLDEST",
    "RING_INFO_CLOSED",
    "RING_INFO_LOST",
    "RING_INFO_RESUME_SEQ",
    "RING_INFO_TOPIC_COUNT",
    "RING_INFO_WOKE_NS",
    "RING_LAYOUT",
    "RING_MAGIC",
    "RING_MAX_READERS",
    "RING_REC_HDR",
    "RING_SPIN_ADAPTIVE",
    "RING_SPIN_BUSY",
    "RING_TOPIC_NAME_MAX",
    "RING_VIEW_FORMAT",
    "RING_VIEW_SIZE",
    "RING_WAIT_ADAPTIVE",
    "RING_WAIT_BUSY",
    "RING_WAIT_FUTEX",
    "RING_WAIT_NONE",
    "RING_WAIT_SPIN",
    "RING_WAIT_SPIN_MAX_NS",
    "TOPIC_MALFORMED",
    "TOPIC_MAX_DEPTH",
    "TOPIC_MAX_KEY",
    "TOPIC_MAX_NESTING",
    "TOPIC_MAX_PATHS",
    "TOPIC_OK",
    "TOPIC_PARTIAL",
    "TOPIC_TOO_DEEP",
    "ArbLegStats",
    "ArbOut",
    "ArbTotals",
    "BookError",
    "CBook",
    "EngineBinding",
    "EngineConf",
    "FeedBinding",
    "FeedError",
    "FlowStruct",
    "GroupBinding",
    "GroupConf",
    "GroupStats",
    "IdentityStruct",
    "NatsScanner",
    "RingReadBuffers",
    "RingWriteFn",
    "Shim",
    "StreamRead",
    "TopicBatch",
    "TopicError",
    "TopicPathComponent",
    "TopicSpec",
    "TopicValueSpan",
    "UdpFloodResult",
    "WsBatchScanner",
    "WsScanner",
    "WsSeqCheck",
    "arbiter_library",
    "available",
    "bench_checksum",
    "build_topic_spec",
    "flow_set_feed",
    "flow_template",
    "identity_dialect_code",
    "identity_scan",
    "library",
    "load",
    "ring_attach",
    "ring_bench_latency",
    "ring_bench_pace",
    "ring_bench_read",
    "ring_bench_rw",
    "ring_bench_write",
    "ring_close_reader",
    "ring_create",
    "ring_detach",
    "ring_interrupt",
    "ring_last_error",
    "ring_next_seq",
    "ring_notifier_count",
    "ring_notifier_is_direct",
    "ring_notifier_rearm",
    "ring_notifier_start",
    "ring_notifier_start_direct",
    "ring_notifier_stop",
    "ring_reader_info",
    "ring_reader_set_name",
    "ring_reader_slot",
    "ring_reader_stats",
    "ring_readers",
    "ring_seek",
    "ring_set_filter",
    "ring_set_wait_hint",
    "ring_set_writer_cpu",
    "ring_spin_adaptive",
    "ring_topic_name",
    "ring_topic_register",
    "ring_versions",
    "ring_wait",
    "ring_wait_hint",
    "ring_writer_alive",
    "ring_writer_close",
    "ring_writer_cpu",
    "ring_writer_fd",
    "ring_writer_info",
    "ring_writer_stats",
    "shim_info",
    "stream_sink",
    "topic_extract",
    "udp_flood",
    "udp_frame",
    "utf8_valid",
    "ws_mask_copy",
    "ws_mask_inplace",
    "ws_mask_into",
]
