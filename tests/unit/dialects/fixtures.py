"""Messages of each exchange as their public documentation shows them (written by hand),
with the classification each must get. `setup` topics are subscribed first, so acks and
errors can name what they answer."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.dialects import INFO, RECONNECT, Ack, Classified, Data, Error, Heartbeat, Other


@dataclass(frozen=True)
class Case:
    raw: bytes
    expected: Classified
    setup: tuple[str, ...] = ()


FIXTURES: dict[str, list[Case]] = {
    "binance": [
        Case(
            b'{"stream":"btcusdt@trade","data":{"e":"trade","E":1672515782136,"s":"BTCUSDT",'
            b'"t":12345,"p":"0.001","q":"100","T":1672515782136,"m":true,"M":true}}',
            Data("btcusdt@trade"),
        ),
        Case(
            b'{"stream":"bnbbtc@depth@100ms","data":{"e":"depthUpdate","E":1672515782136,'
            b'"s":"BNBBTC","U":157,"u":160,"b":[["0.0024","10"]],"a":[["0.0026","100"]]}}',
            Data("bnbbtc@depth@100ms"),
        ),
        Case(
            b'{"stream":"btcusdt@kline_1M","data":{"e":"kline","E":1672515782136,"s":"BTCUSDT",'
            b'"k":{"t":1672515780000,"T":1672515839999,"s":"BTCUSDT","i":"1M","f":100,"L":200,'
            b'"o":"0.0010","c":"0.0020","h":"0.0025","l":"0.0015","v":"1000","n":100,"x":false,'
            b'"q":"1.0000","V":"500","Q":"0.500","B":"123456"}}}',
            Data("btcusdt@kline_1M"),
        ),
        # An escaped stream name: the fast path declines, the parse decides.
        Case(b'{"stream":"btc\\u0075sdt@trade","data":{}}', Data("btcusdt@trade")),
        # The raw endpoint (/ws) sends events unwrapped.
        Case(
            b'{"e":"aggTrade","E":1672515782136,"s":"BNBBTC","a":12345,"p":"0.001","q":"100",'
            b'"f":100,"l":105,"T":1672515782136,"m":true,"M":true}',
            Data("bnbbtc@aggTrade"),
        ),
        Case(
            b'{"result":null,"id":1}', Ack(1, ("btcusdt@trade",), "subscribe"), ("btcusdt@trade",)
        ),
        Case(
            b'{"error":{"code":2,"msg":"Invalid request: invalid stream"},"id":1}',
            Error("Invalid request: invalid stream", 1, ("xx@trade",), 2),
            ("xx@trade",),
        ),
        Case(
            b'{"code":0,"msg":"Unknown property","id":1}',
            Error("Unknown property", 1, ("btcusdt@trade",), 0),
            ("btcusdt@trade",),
        ),
        Case(b'{"e":"serverShutdown","E":1700000000000}', Other(RECONNECT, "serverShutdown")),
    ],
    "coinbase": [
        Case(
            b'{"type":"match","trade_id":10,"sequence":50,'
            b'"maker_order_id":"ac928c66-ca53-498f-9c13-a110027a60e8",'
            b'"taker_order_id":"132fb6ae-456b-4654-b4e0-d681ac05cea1",'
            b'"time":"2014-11-07T08:19:27.028459Z","product_id":"BTC-USD","size":"5.23512",'
            b'"price":"400.23","side":"sell"}',
            Data("matches:BTC-USD"),
        ),
        Case(
            b'{"type":"l2update","product_id":"BTC-USD","time":"2019-08-14T20:42:27.265Z",'
            b'"changes":[["buy","10101.80000000","0.162567"]]}',
            Data("level2:BTC-USD"),
        ),
        Case(
            b'{"type":"snapshot","product_id":"ETH-USD","bids":[["10101.10","0.45054140"]],'
            b'"asks":[["10102.55","0.57753524"]]}',
            Data("level2_batch:ETH-USD"),
            ("level2_batch:ETH-USD",),
        ),
        Case(
            b'{"type":"ticker","sequence":37475248783,"product_id":"ETH-USD","price":"1285.22",'
            b'"open_24h":"1310.79","volume_24h":"245532.79269678","low_24h":"1280.52",'
            b'"high_24h":"1313.8","volume_30d":"9788783.60117027","best_bid":"1285.04",'
            b'"best_bid_size":"0.46688654","best_ask":"1285.27","best_ask_size":"1.56637040",'
            b'"side":"buy","time":"2022-10-19T23:28:22.061769Z","trade_id":370843401,'
            b'"last_size":"11.4396987"}',
            Data("ticker:ETH-USD"),
        ),
        Case(
            b'{"type":"heartbeat","sequence":90,"last_trade_id":20,"product_id":"BTC-USD",'
            b'"time":"2014-11-07T08:19:28.464459Z"}',
            Heartbeat("heartbeat:BTC-USD"),
        ),
        Case(
            b'{"type":"subscriptions","channels":[{"name":"level2","product_ids":["ETH-USD",'
            b'"ETH-EUR"]},{"name":"heartbeat","product_ids":["ETH-USD"]}]}',
            Ack(
                1,
                ("level2:ETH-USD", "level2:ETH-EUR", "heartbeat:ETH-USD"),
                "subscribe",
                ("level2:ETH-USD", "level2:ETH-EUR", "heartbeat:ETH-USD"),
            ),
            ("level2:ETH-USD", "level2:ETH-EUR", "heartbeat:ETH-USD"),
        ),
        Case(
            b'{"type":"error","message":"Failed to subscribe","reason":"ABC-XYZ is not a valid '
            b'product"}',
            Error("Failed to subscribe: ABC-XYZ is not a valid product", 1, ("matches:ABC-XYZ",)),
            ("matches:ABC-XYZ",),
        ),
        Case(b'{"type":"status","products":[],"currencies":[]}', Other(INFO, "status")),
    ],
    "kraken": [
        Case(
            b'{"channel":"trade","type":"update","data":[{"symbol":"MATIC/USD","side":"buy",'
            b'"price":0.5147,"qty":6423.46326,"ord_type":"limit","trade_id":4665846,'
            b'"timestamp":"2023-09-25T07:48:36.925533Z"}]}',
            Data("trade:MATIC/USD"),
        ),
        Case(
            b'{"channel":"book","type":"snapshot","data":[{"symbol":"MATIC/USD","bids":[{"price":'
            b'0.5666,"qty":4831.75496},{"price":0.5665,"qty":6658.22734}],"asks":[{"price":'
            b'0.5668,"qty":4410.79769}],"checksum":2439117997}]}',
            Data("book:MATIC/USD"),
        ),
        Case(b'{"channel":"heartbeat"}', Heartbeat()),
        Case(
            b'{"channel":"status","data":[{"api_version":"v2","connection_id":'
            b'12393906104898154338,"system":"online","version":"2.0.0"}],"type":"update"}',
            Other(INFO, "status"),
        ),
        Case(
            b'{"method":"subscribe","result":{"channel":"ticker","snapshot":true,"symbol":'
            b'"ALGO/USD"},"success":true,"time_in":"2023-09-25T09:04:31.742599Z",'
            b'"time_out":"2023-09-25T09:04:31.742648Z","req_id":1}',
            Ack(1, ("ticker:ALGO/USD",), "subscribe"),
            ("ticker:ALGO/USD",),
        ),
        Case(
            b'{"error":"Currency pair not supported ALGO/XYZ","method":"subscribe","req_id":1,'
            b'"success":false,"symbol":"ALGO/XYZ","time_in":"2023-09-25T09:04:31.742599Z",'
            b'"time_out":"2023-09-25T09:04:31.742648Z"}',
            Error("Currency pair not supported ALGO/XYZ", 1, ("ticker:ALGO/XYZ",)),
            ("ticker:ALGO/XYZ",),
        ),
        Case(
            b'{"method":"pong","req_id":101,"time_in":"2023-09-24T14:10:23.799685Z",'
            b'"time_out":"2023-09-24T14:10:23.799703Z"}',
            Heartbeat(),
        ),
    ],
    "okx": [
        Case(
            b'{"arg":{"channel":"trades","instId":"BTC-USDT"},"data":[{"instId":"BTC-USDT",'
            b'"tradeId":"130639474","px":"42219.9","sz":"0.12060306","side":"buy",'
            b'"ts":"1630048897897","count":"3","source":"0","seqId":1234}]}',
            Data("trades:BTC-USDT"),
        ),
        Case(
            b'{"arg":{"channel":"books","instId":"BTC-USDT"},"action":"snapshot","data":[{"asks":'
            b'[["8476.98","415","0","13"]],"bids":[["8476.97","256","0","12"]],'
            b'"ts":"1597026383085","checksum":-855196043,"prevSeqId":-1,"seqId":123456}]}',
            Data("books:BTC-USDT"),
        ),
        Case(
            b'{"id":"1","event":"subscribe","arg":{"channel":"trades","instId":"BTC-USDT"},'
            b'"connId":"accb8e21"}',
            Ack("1", ("trades:BTC-USDT",), "subscribe"),
            ("trades:BTC-USDT",),
        ),
        Case(
            b'{"id":"1","event":"error","code":"60012","msg":"Invalid request: {\\"op\\": '
            b'\\"subscribe\\", \\"argss\\":[{ \\"channel\\" : \\"tickers\\"}]}",'
            b'"connId":"a4d3ae55"}',
            Error(
                'Invalid request: {"op": "subscribe", "argss":[{ "channel" : "tickers"}]}',
                "1",
                ("tickers:BTC-USDT",),
                "60012",
            ),
            ("tickers:BTC-USDT",),
        ),
        Case(
            b'{"event":"notice","code":"64008","msg":"The connection will soon be closed for a '
            b'service upgrade. Please reconnect.","connId":"a4d3ae55"}',
            Other(
                RECONNECT,
                "The connection will soon be closed for a service upgrade. Please reconnect.",
            ),
        ),
        Case(b"pong", Heartbeat()),
        Case(
            b'{"event":"channel-conn-count","channel":"orders","connCount":"2",'
            b'"connId":"abcd1234"}',
            Other(INFO, "channel-conn-count"),
        ),
    ],
    "bybit": [
        Case(
            b'{"topic":"publicTrade.BTCUSDT","type":"snapshot","ts":1672304486868,"data":[{"T":'
            b'1672304486865,"s":"BTCUSDT","S":"Buy","v":"0.001","p":"16578.50","L":"PlusTick",'
            b'"i":"20f43950-d8dd-5b31-9112-a178eb6023af","BT":false}]}',
            Data("publicTrade.BTCUSDT"),
        ),
        Case(
            b'{"topic":"orderbook.50.BTCUSDT","type":"snapshot","ts":1672304484978,"data":{"s":'
            b'"BTCUSDT","b":[["16493.50","0.006"]],"a":[["16611.00","0.029"]],"u":18521288,'
            b'"seq":7961638724},"cts":1672304484976}',
            Data("orderbook.50.BTCUSDT"),
        ),
        Case(
            b'{"success":true,"ret_msg":"","conn_id":"cejreaspqfh3sjdnldmg-p","req_id":"1",'
            b'"op":"subscribe"}',
            Ack("1", ("publicTrade.BTCUSDT",), "subscribe"),
            ("publicTrade.BTCUSDT",),
        ),
        Case(
            b'{"success":false,"ret_msg":"error:handler not found,topic:publicTrade.FOO",'
            b'"conn_id":"cejreaspqfh3sjdnldmg-p","req_id":"1","op":"subscribe"}',
            Error("error:handler not found,topic:publicTrade.FOO", "1", ("publicTrade.FOO",)),
            ("publicTrade.FOO",),
        ),
        Case(
            b'{"success":true,"ret_msg":"pong","conn_id":"0970e817-426e-429a-a679-ff7f55e0b16a",'
            b'"req_id":"","op":"ping"}',
            Heartbeat(),
        ),
        Case(
            b'{"req_id":"","op":"pong","args":["1675418560633"],"conn_id":"cfcb4ocsvfriu23r3er0-1b"}',
            Heartbeat(),
        ),
    ],
    "bitstamp": [
        Case(
            b'{"data":{"id":307183929,"timestamp":"1700000000","amount":0.0125,"amount_str":'
            b'"0.01250000","price":37123,"price_str":"37123","type":0,"microtimestamp":'
            b'"1700000000123456","buy_order_id":1683456789012345,"sell_order_id":'
            b'1683456789012346},"channel":"live_trades_btcusd","event":"trade"}',
            Data("live_trades_btcusd"),
        ),
        Case(
            b'{"data":{"timestamp":"1700000000","microtimestamp":"1700000000123456","bids":'
            b'[["37120","0.5"]],"asks":[]},"channel":"diff_order_book_btcusd","event":"data"}',
            Data("diff_order_book_btcusd"),
        ),
        Case(
            b'{"event":"bts:subscription_succeeded","channel":"live_trades_btcusd","data":{}}',
            Ack(None, ("live_trades_btcusd",), "subscribe"),
            ("live_trades_btcusd",),
        ),
        Case(
            b'{"event":"bts:error","channel":"","data":{"code":null,"message":'
            b'"Bad subscription string."}}',
            Error("Bad subscription string.", None, ("live_trades_foo",)),
            ("live_trades_foo",),
        ),
        Case(
            b'{"event":"bts:request_reconnect","channel":"","data":""}',
            Other(RECONNECT, "bts:request_reconnect"),
        ),
        Case(b'{"event":"bts:heartbeat","channel":"","data":{"status":"success"}}', Heartbeat()),
    ],
    "generic": [
        Case(b'{"topic":"trades.BTC","price":"1","seq":5}', Data("trades.BTC")),
        Case(b'{"result":null,"id":1}', Ack(1, ("trades.BTC",), "subscribe"), ("trades.BTC",)),
        Case(b'{"error":"unknown topic","id":1}', Error("unknown topic", 1, ("x",)), ("x",)),
        Case(b'{"type":"heartbeat"}', Heartbeat()),
    ],
}
