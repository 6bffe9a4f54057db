//! The `user` every chat request carries (issue 29): a pseudonym per
//! database, made on first use and kept, never derived from the key; and
//! the deprecated `usage: {include: true}` no longer sent. Neither is part
//! of the reply cache's key, so replies stored before still answer.

use serde_json::Value;

use crate::support::child::open_db;
use crate::support::mock::{completion_bodies, triage_server};
use crate::support::{KEY, bench, run, stderr};

fn users(bodies: &[Value]) -> Vec<String> {
    bodies
        .iter()
        .map(|b| {
            b["user"]
                .as_str()
                .expect("every request has a user")
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_request_carries_the_databases_pseudonym_and_no_usage_flag() {
    let b = bench();
    let t = triage_server().await;
    let out = run(&b, &t.server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bodies = completion_bodies(&t.server).await;
    assert_eq!(bodies.len(), 2);
    let u = users(&bodies);
    assert!(u[0].starts_with("hb-") && u[0].len() == 35, "{u:?}");
    assert!(
        u.iter().all(|x| *x == u[0]),
        "one pseudonym per database: {u:?}"
    );
    assert!(!u[0].contains(KEY) && !KEY.contains(&u[0][3..]));
    assert!(bodies.iter().all(|b| b.get("usage").is_none()));

    // The reply cache's key is the body as it was sent before: without
    // `user`, with `usage: {include: true}` last.
    let pool = open_db(&b).await;
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT request_hash FROM result ORDER BY request_hash")
            .fetch_all(&pool)
            .await
            .unwrap();
    let mut expected: Vec<String> = bodies
        .iter()
        .map(|body| {
            let mut legacy = body.clone();
            let o = legacy.as_object_mut().unwrap();
            o.remove("user");
            o.insert("usage".into(), serde_json::json!({"include": true}));
            let text = serde_json::to_string(&legacy).unwrap();
            helmbench::benchmark::sha256_hex(&[text.as_bytes(), &0i64.to_le_bytes()])
        })
        .collect();
    expected.sort();
    assert_eq!(stored, expected);

    // A second run on the same database: the same pseudonym, every reply
    // from the cache.
    let out = run(&b, &t.server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        completion_bodies(&t.server).await.len(),
        2,
        "nothing new was sent"
    );

    // Another database, another pseudonym.
    let other = bench();
    let t2 = triage_server().await;
    let out = run(&other, &t2.server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = users(&completion_bodies(&t2.server).await);
    assert_ne!(v[0], u[0]);
}
