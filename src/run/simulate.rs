//! The simulated user of a persona conversation (issue 42): after the
//! tested model's reply, a user-simulator model (`--user-model`) is sent
//! its persona and the conversation so far with the roles swapped, and
//! writes the next user message, or ends the conversation with
//! [`STOP_MARKER`]. Every call is stored as it arrives (a resume reuses
//! it), found again by its request hash (a rerun is reproducible and
//! free), priced and budgeted by the client like any request.

use std::borrow::Cow;

use super::exchange::Exchanged;
use super::worker::{Worker, request_with};
use crate::benchmark::Persona;
use crate::benchmark::conversation::STOP_MARKER;
use crate::benchmark::conversation::{Exchange, Reply};
use crate::domain::{ModelEntry, SimulatedCall};
use crate::openrouter::{Message, ProviderError};

/// How every simulator request's system message begins (the mock of the
/// tests recognises a simulator request by it).
pub const SIMULATOR_PREAMBLE: &str = "You are role-playing the USER in a conversation with an AI assistant. The assistant's messages reach you as the user's; you write the user's next message.";

/// Appended to the assistant's last reply in every simulator request: a
/// persona drifts out of role over turns without it (VERA-MH's PR #146).
pub const REMINDER: &str = "[Reminder: stay in the role your instructions describe. Write only the user's next message, in plain text. To end the conversation, write [END] on a line of its own.]";

/// What the simulator said for one exchange.
pub(super) enum Next {
    /// The next user message (the word limit applied).
    Say(String),
    /// The simulator ended the conversation, or `max_turns` was reached.
    Stop,
}

/// One simulator call's outcome and what it added to the conversation's
/// cost in this run.
pub(super) struct Simulated {
    pub(super) next: Next,
    pub(super) cost_usd: f64,
}

/// The turn code of simulated exchange `k` (`S1` is the first simulated
/// message): a judged reply's criterion reads `R1@S1`.
pub(super) fn simulated_code(k: usize) -> String {
    format!("{}{k}", crate::benchmark::conversation::SIMULATED_PREFIX)
}

/// A simulated user message as an exchange of the conversation: its reply
/// is live and judged by the scenario's rules (every rubric, the
/// scenario's check), as message 1's.
pub(super) fn simulated_exchange(text: String) -> Exchange<'static> {
    Exchange {
        user: Cow::Owned(text),
        turn: None,
        reply: Reply::Live { judged: true },
    }
}

/// The simulator's reply as a next message: a line that is the marker
/// (or an empty reply) ends the conversation; a message longer than
/// `max_words` is cut to its first `max_words` words.
pub fn read_reply(reply: &str, max_words: Option<u32>) -> Option<String> {
    if reply.lines().any(|l| l.trim() == STOP_MARKER) || reply.trim().is_empty() {
        return None;
    }
    let text = reply.trim();
    let Some(max) = max_words else {
        return Some(text.to_string());
    };
    // The byte where word `max + 1` starts: the message ends before it.
    let mut words = 0;
    let mut in_word = false;
    for (i, ch) in text.char_indices() {
        if ch.is_whitespace() {
            in_word = false;
        } else if !in_word {
            in_word = true;
            words += 1;
            if words > max {
                return Some(text[..i].trim_end().to_string());
            }
        }
    }
    Some(text.to_string())
}

/// The simulator's system message: the preamble, then the persona's
/// instructions (the estimate counts it too).
pub(super) fn system_message(persona: &Persona) -> String {
    format!(
        "{SIMULATOR_PREAMBLE}\n\n<persona>\n{}\n</persona>\n\nWrite only the user's next message, in plain text. When the user would end the conversation, write {STOP_MARKER} on a line of its own.",
        persona.component.prompt
    )
}

impl Worker {
    /// The user message of exchange `k` (≥ 1) of a persona conversation:
    /// from this run's stored call (a resume: no cost now), the cache (no
    /// cost), or the simulator (stored before it is used). `Err`: the
    /// simulator could not be asked (the budget, a stop, a provider error).
    pub(super) async fn simulate(
        &self,
        test_code: &str,
        repeat: i64,
        persona: &Persona,
        done: &[Exchanged],
        stored: &[SimulatedCall],
        replaces: bool,
    ) -> Result<Simulated, ProviderError> {
        let k = done.len();
        if k > persona.max_turns as usize {
            return Ok(Simulated {
                next: Next::Stop,
                cost_usd: 0.0,
            });
        }
        let Some(um) = &self.settings.user_model else {
            // Planning refuses a persona scenario without a user model.
            return Ok(Simulated {
                next: Next::Stop,
                cost_usd: 0.0,
            });
        };
        let system = system_message(persona);
        let mut history = vec![Message {
            role: "system",
            content: &system,
        }];
        // Roles swapped: the user's messages are the simulator's own
        // (`assistant`), the tested model's replies reach it as `user`.
        let Some((last, before)) = done.split_last() else {
            return Ok(Simulated {
                next: Next::Stop,
                cost_usd: 0.0,
            });
        };
        for e in before {
            history.push(Message {
                role: "assistant",
                content: &e.user,
            });
            history.push(Message {
                role: "user",
                content: &e.reply,
            });
        }
        history.push(Message {
            role: "assistant",
            content: &last.user,
        });
        let prompt = format!("{}\n\n{REMINDER}", last.reply);
        // The persona is in the system message: no salt needed.
        let req = request_with(&self.client, um, None, &history, prompt, repeat, "");
        let hash = req.request_hash;
        let call = if let Some(s) = stored
            .iter()
            .find(|s| s.turn_index == k as i64 && s.request_hash == hash)
        {
            // Paid earlier in this run: its cost counts in this result
            // unless an earlier result of this conversation holds it.
            SimulatedCall {
                cost_usd: if replaces { 0.0 } else { s.cost_usd },
                ..s.clone()
            }
        } else if let Some(c) = self.cached_simulated(&hash).await {
            SimulatedCall {
                run_id: self.run_id,
                test_code: test_code.to_string(),
                repeat_index: repeat,
                turn_index: k as i64,
                user_model: um.id.clone(),
                cost_usd: 0.0,
                cached: true,
                ..c
            }
        } else {
            let c = self.ask_simulator(um, req.body).await?;
            let stopped = read_reply(&c.content, persona.max_words).is_none();
            let call = SimulatedCall {
                run_id: self.run_id,
                test_code: test_code.to_string(),
                repeat_index: repeat,
                turn_index: k as i64,
                user_model: um.id.clone(),
                request_hash: hash,
                reply: c.content,
                stopped,
                prompt_tokens: c.prompt_tokens,
                completion_tokens: c.completion_tokens,
                cost_usd: c.cost_usd,
                cached: false,
                served_model: c.served_model,
                generation_id: c.generation_id,
            };
            self.keep_simulated(&call).await;
            call
        };
        if call.cached
            && !stored
                .iter()
                .any(|s| s.turn_index == k as i64 && s.request_hash == call.request_hash)
        {
            self.keep_simulated(&call).await;
        }
        Ok(Simulated {
            next: match read_reply(&call.reply, persona.max_words) {
                Some(text) => Next::Say(text),
                None => Next::Stop,
            },
            cost_usd: call.cost_usd,
        })
    }

    /// This run's stored simulator calls of one conversation (a resume
    /// reuses them); none when they cannot be read (asked again).
    pub(super) async fn simulated_calls(&self, code: &str, repeat: i64) -> Vec<SimulatedCall> {
        match self.store.simulated_of(self.run_id, code, repeat).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, test_code = %code, "stored simulated-user calls not read; the simulator is asked again");
                Vec::new()
            }
        }
    }

    async fn ask_simulator(
        &self,
        um: &ModelEntry,
        body: String,
    ) -> Result<crate::openrouter::Completion, ProviderError> {
        let api = self.client.api_of(um);
        let mut c = self.client.chat_json(&um.id, body).await?;
        crate::openrouter::price_reply(&mut c, um, api);
        Ok(c)
    }

    /// A simulator call with the same request, from any run (None with
    /// `--no-cache`).
    async fn cached_simulated(&self, hash: &str) -> Option<SimulatedCall> {
        self.cache.as_ref()?;
        match self.store.cached_simulated(hash).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "simulated-user cache not read; the simulator is asked");
                None
            }
        }
    }

    /// Stores a simulator call before its message is used. One that cannot
    /// be written is not lost to the bill (its cost is in the
    /// conversation's result); only a resume after a kill would ask again.
    async fn keep_simulated(&self, c: &SimulatedCall) {
        if let Err(e) = self.store.write_simulated(c).await {
            tracing::warn!(error = %e, test_code = %c.test_code, turn = c.turn_index, "simulated-user call not stored");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::read_reply;

    #[test]
    fn the_marker_ends_and_max_words_cuts() {
        assert_eq!(read_reply("fine, bye\n[END]\n", None), None);
        assert_eq!(read_reply("  [END]  ", None), None);
        assert_eq!(read_reply("   ", None), None);
        // The marker inside a line is text, not a stop.
        assert_eq!(
            read_reply("I said [END] once", None).as_deref(),
            Some("I said [END] once")
        );
        assert_eq!(
            read_reply("one two\nthree four", Some(3)).as_deref(),
            Some("one two\nthree")
        );
        assert_eq!(read_reply("one two", Some(2)).as_deref(), Some("one two"));
    }
}
