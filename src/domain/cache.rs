//! The reply cache: a reply already paid for, which an identical request
//! reuses, and the short key of a request hash that tells, without asking
//! the database, which requests may have one.

/// A reply already paid for, reusable for an identical request.
#[derive(Debug, Clone)]
pub struct CachedReply {
    pub response: String,
    pub finish_reason: Option<String>,
    pub generation_id: Option<String>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Who served it: a reused reply keeps its model and provider.
    pub served_model: Option<String>,
    pub provider: Option<String>,
}

/// A 64-bit key of a request hash (FNV-1a): the store reads the keys of
/// every stored hash, and a run asks the database only about requests
/// whose key is among them.
pub fn request_key(hash: &str) -> u64 {
    // Of the first 16 characters, which the result table's index holds
    // (the store reads its keys from it): 64 bits of a SHA-256.
    let prefix = hash.get(..16).unwrap_or(hash);
    prefix.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
