//! The database's pseudonym: a random id made on first use and kept, sent
//! as `user` on every chat request so a provider can tell one researcher's
//! traffic apart without learning who it is. Never derived from the key.

use rand::Rng;

use super::{Store, StoreError};

impl Store {
    /// This database's pseudonym (`hb-` and 32 hex digits), made and
    /// stored the first time it is asked for.
    pub async fn pseudonym(&self) -> Result<String, StoreError> {
        let bytes: [u8; 16] = rand::rng().random();
        let fresh: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        // Two processes asking at once keep whichever was written first.
        sqlx::query("INSERT OR IGNORE INTO pseudonym (id, user_id) VALUES (1, ?)")
            .bind(format!("hb-{fresh}"))
            .execute(&self.pool)
            .await?;
        Ok(
            sqlx::query_scalar("SELECT user_id FROM pseudonym WHERE id = 1")
                .fetch_one(&self.pool)
                .await?,
        )
    }
}
