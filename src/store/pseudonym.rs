//! The database's pseudonym: a random id made on first use and kept, sent
//! as `user` on every chat request so a provider can tell one researcher's
//! traffic apart without learning who it is. Never derived from the key.

use rand::Rng;

use super::backend::on;
use super::{Store, StoreError};

impl Store {
    /// This database's pseudonym (`hb-` and 32 hex digits), made and
    /// stored the first time it is asked for.
    pub async fn pseudonym(&self) -> Result<String, StoreError> {
        on!(&self.pool, |pool, d| {
            let bytes: [u8; 16] = rand::rng().random();
            let fresh: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            // Two processes asking at once keep whichever was written first.
            sqlx::query(
                "INSERT INTO pseudonym (id, user_id) VALUES (1, $1) ON CONFLICT DO NOTHING",
            )
            .bind(format!("hb-{fresh}"))
            .execute(pool)
            .await?
            .rows_affected();
            Ok(
                sqlx::query_scalar("SELECT user_id FROM pseudonym WHERE id = 1")
                    .fetch_one(pool)
                    .await?,
            )
        })
    }
}
