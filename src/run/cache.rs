//! Which requests may have a reusable answer in the database, held in
//! memory so most requests of a new run need no cache query at all.

use std::collections::HashSet;
use std::sync::RwLock;

use crate::domain::{NewResult, request_key};

/// Which requests may have a reusable answer in the database: the keys of
/// every stored request hash, loaded when the run starts and extended as
/// its results are written. A request whose key is absent (nearly every
/// request of a new run) needs no cache query at all.
#[derive(Debug)]
pub(super) struct CacheFilter {
    pub(super) replies: RwLock<HashSet<u64>>,
    pub(super) judgements: RwLock<HashSet<u64>>,
}

impl CacheFilter {
    pub(super) fn may_have_reply(&self, request_hash: &str) -> bool {
        let key = request_key(request_hash);
        self.replies
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key)
    }

    pub(super) fn may_have_judgement(&self, request_hash: &str) -> bool {
        let key = request_key(request_hash);
        self.judgements
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key)
    }

    /// Adds the request hash of a conversation's turn just written.
    pub(super) fn note_reply(&self, request_hash: &str) {
        self.replies
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(request_key(request_hash));
    }

    /// Adds the request hashes of results just written.
    pub(super) fn note(&self, written: &[NewResult]) {
        self.replies
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .extend(written.iter().map(|r| request_key(&r.request_hash)));
        let mut judgements = self.judgements.write().unwrap_or_else(|e| e.into_inner());
        for r in written {
            judgements.extend(
                r.judgements
                    .iter()
                    .filter_map(|j| j.request_hash.as_deref().map(request_key)),
            );
        }
    }
}
