//! Peak memory while reading a large completed batch (issue 33): serves
//! one `GET /api/beta/batches/:id` whose body holds N results of R bytes
//! each, generated as it is written (the server holds none of it), reads
//! it with helmbench's client (spooled to disk, then streamed item by
//! item), and prints the peak RSS before and after, the body size and the
//! time taken.
//!
//! ```sh
//! cargo run --release --example batch_parse -- [ITEMS 50000] [REPLY_BYTES 4096]
//! ```

use std::io::Write as _;
use std::time::Instant;

use helmbench::openrouter::{Client, ClientConfig, ItemReply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Peak resident set size of this process, in KiB (`VmHWM`).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// One result item with a reply of about `bytes` characters.
fn item(i: usize, bytes: usize) -> String {
    let reply = "I hear you. Please reach out for support. ".repeat(bytes / 42 + 1);
    let content = serde_json::to_string(&format!(
        "{{\"category\":\"HANDOFF\",\"response\":\"{}\"}}",
        &reply[..bytes]
    ))
    .unwrap();
    format!(
        r#"{{"id":"batch_req_{i}","custom_id":"P1-B1-S1-C1-PT{i}~0","response":{{"status_code":200,"request_id":"request_{i}","body":{{"id":"gen-batch-{i}","object":"chat.completion","model":"test/model","choices":[{{"index":0,"message":{{"role":"assistant","content":{content}}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":500,"completion_tokens":1000,"cost":0.0005}}}}}},"error":null}}"#
    )
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let items: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let bytes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4096);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = sock.read(&mut buf).await;
        let head = format!(
            r#"{{"id":"batch_1","object":"batch","endpoint":"/v1/chat/completions","model":"test/model","status":"completed","request_counts":{{"total":{items},"completed":{items},"failed":0}},"usage":{{"prompt_tokens":{},"completion_tokens":{},"cost":{},"is_byok":false}},"results":["#,
            500 * items,
            1000 * items,
            0.0005 * items as f64
        );
        sock.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
        sock.write_all(head.as_bytes()).await.unwrap();
        let mut chunk = Vec::with_capacity(1 << 20);
        for i in 0..items {
            if i > 0 {
                chunk.push(b',');
            }
            chunk.extend_from_slice(item(i, bytes).as_bytes());
            if chunk.len() >= 1 << 20 {
                sock.write_all(&chunk).await.unwrap();
                chunk.clear();
            }
        }
        chunk.extend_from_slice(b"],\"error\":null}");
        sock.write_all(&chunk).await.unwrap();
        sock.shutdown().await.unwrap();
    });
    let before = peak_rss_kib();
    let client = Client::new(ClientConfig::new(
        format!("http://127.0.0.1:{port}/api/v1"),
        "sk-or-bench-key",
    ))
    .unwrap();
    let started = Instant::now();
    let polled = client.poll_batch("batch_1").await.unwrap();
    let scanned = started.elapsed();
    let results = polled.results.expect("a completed batch");
    let (tx, mut rx) = tokio::sync::mpsc::channel(256);
    let reader = tokio::spawn(results.read(tx));
    let (mut n, mut answered, mut cost, mut chars) = (0usize, 0usize, 0.0f64, 0usize);
    while let Some(item) = rx.recv().await {
        n += 1;
        if let ItemReply::Answered(c) = item.reply {
            answered += 1;
            cost += c.cost_usd;
            chars += c.content.len();
        }
    }
    reader.await.unwrap().unwrap();
    let total = started.elapsed();
    let after = peak_rss_kib();
    let body_mb = (items * (bytes + 420)) as f64 / 1e6;
    let mut o = std::io::stdout().lock();
    writeln!(
        o,
        "items {n} (answered {answered}), reply chars {chars}, cost ${cost:.4}, body ~{body_mb:.0} MB"
    )
    .unwrap();
    writeln!(
        o,
        "peak RSS before {} MiB, after {} MiB; spool+scan {:.1} s, read {:.1} s",
        before / 1024,
        after / 1024,
        scanned.as_secs_f64(),
        (total - scanned).as_secs_f64()
    )
    .unwrap();
}
