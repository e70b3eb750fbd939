// Exchange presets for the session form: each exchange's public market-data WebSocket
// endpoint (the path its dialect connects to, see gateway/dialects/) and example topics.

export const PRESETS = {
  binance: {
    label: "Binance spot",
    url: "wss://stream.binance.com:9443/stream",
    topics: ["btcusdt@trade", "ethusdt@trade"],
  },
  coinbase: {
    label: "Coinbase Exchange",
    url: "wss://ws-feed.exchange.coinbase.com",
    topics: ["matches:BTC-USD", "level2_batch:ETH-USD"],
  },
  kraken: {
    label: "Kraken spot v2",
    url: "wss://ws.kraken.com/v2",
    topics: ["trade:BTC/USD", "book:ETH/USD"],
  },
  okx: {
    label: "OKX v5 public",
    url: "wss://ws.okx.com:8443/ws/v5/public",
    topics: ["trades:BTC-USDT", "books5:ETH-USDT"],
  },
  bybit: {
    label: "Bybit v5 spot",
    url: "wss://stream.bybit.com/v5/public/spot",
    topics: ["publicTrade.BTCUSDT", "orderbook.50.BTCUSDT"],
  },
  bitstamp: {
    label: "Bitstamp v2",
    url: "wss://ws.bitstamp.net",
    topics: ["live_trades_btcusd", "diff_order_book_btcusd"],
  },
  generic: {
    label: "Generic (templates)",
    url: "",
    placeholder: "wss://feed.example.com/ws",
    topics: ["trades:BTC-USD"],
  },
};

/** The preset of a dialect, or a blank one for a dialect the dashboard does not know. */
export function preset(dialect) {
  return PRESETS[dialect] || { label: dialect, url: "", placeholder: "wss://", topics: [] };
}

/** Whether `url` is empty or one of the presets' (so switching dialect may replace it). */
export function isPresetUrl(url) {
  return !url || Object.values(PRESETS).some((p) => p.url === url);
}
