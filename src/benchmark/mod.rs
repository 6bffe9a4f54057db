//! The benchmark as a domain (SPEC §1, §3, §4): pillars, behaviours,
//! scenarios and their components, how each is evaluated, and the model and
//! scoring configuration. Built by [`crate::content`] from files; read by
//! every later stage (compose, run, judge, score, report).

pub mod cases;
pub mod codes;
pub mod compose;
pub mod conversation;
pub mod hash;
pub mod variants;
pub mod vary;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::domain::ModelEntry;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use hash::{hex, sha256, sha256_hex, sha256_hex_pieces};

/// The loaded benchmark: everything needed to compose and judge every test case.
#[derive(Debug, Clone)]
pub struct Benchmark {
    pub root: PathBuf,
    pub models: Option<ModelsConfig>,
    pub scoring: ScoringConfig,
    pub pillars: Vec<Pillar>,
    pub behaviours: Vec<Behaviour>,
    pub scenarios: Vec<Scenario>,
    /// Hash over every content file: identifies the exact benchmark a run used.
    pub content_hash: String,
    /// Folders under `scenarios/` skipped because a scenario path stands
    /// among other words in their name (`Scenario-P1-B7-S1`), with why.
    pub skipped_folders: Vec<(PathBuf, String)>,
    /// The word lists variants draw from (`word-lists/`, else bundled).
    pub word_lists: variants::lists::WordLists,
}

impl Benchmark {
    pub fn scenario(&self, code: &str) -> Option<&Scenario> {
        self.scenarios.iter().find(|s| s.code == code)
    }

    pub fn behaviour(&self, code: &str) -> Option<&Behaviour> {
        self.behaviours.iter().find(|b| b.code == code)
    }

    pub fn total_test_cases(&self, include_no_context: bool) -> usize {
        self.scenarios
            .iter()
            .map(|s| s.test_case_count(include_no_context))
            .sum()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Pillar {
    pub code: String,
    pub name: String,
    pub description: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Behaviour {
    /// `P1-B1`
    pub code: String,
    pub pillar: String,
    pub name: String,
    pub description: String,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    /// `P1-B1-S1`
    pub code: String,
    pub pillar: String,
    /// `P1-B1`
    pub behaviour: String,
    pub dir: PathBuf,
    pub prompt_file: PathBuf,
    pub frontmatter: Value,
    pub evaluation: Evaluation,
    /// The scenario's prompt after H2-to-XML conversion.
    pub prompt: String,
    /// The prompt file's markdown body as written, and the line it starts on.
    pub body: String,
    pub body_line: usize,
    /// Some component overrides the evaluation (see [`Scenario::evaluation_for`]).
    pub has_overrides: bool,
    /// The OpenRouter `response_format` wrapper, when the scenario has a schema.
    pub response_format: Option<Value>,
    pub conditions: Vec<Component>,
    pub user_contexts: Vec<Component>,
    pub perturbations: Vec<Component>,
    /// `criteria.md` for `sqe`, `CR1.md`... for `mcsqe`.
    pub rubrics: Vec<Rubric>,
    /// `turns.md`: the messages after the composed first one, in order;
    /// empty for a single-turn scenario (a conversation of one turn).
    pub turns: Vec<Turn>,
    /// `personas.md`: the simulated users its test cases talk with (each
    /// perturbation is then one test case per persona, `PT1-PR1`; see
    /// [`Persona`]); empty without one.
    pub personas: Vec<Persona>,
    /// Whether the live reply to message 1 is judged (`judge_first: false`
    /// in the scenario's frontmatter: a rapport opening).
    pub judge_first: bool,
    /// The variants of the user's words its test cases run with (its
    /// `variants:`, else `variants.yml`'s; issue 43).
    pub variants: Vec<variants::spec::Variant>,
    /// The variants a run made of its selected test cases (`expand` (vary.rs);
    /// empty as loaded): not content, so not in the hash.
    pub varied: VariedCases,
    pub hash: String,
}

/// The varied perturbations of a scenario's selected test cases, made by
/// `expand` (vary.rs). The varied text belongs to one test case (it is drawn from
/// the test code), so each is a component of its own: its code is
/// `PT1~typos` (the test code reads `P1-B1-S1-C1-PT1~typos`), its full code
/// the varied test code, and a test case's index names it by
/// `perturbations.len() + i`.
#[derive(Debug, Clone, Default)]
pub struct VariedCases {
    pub components: Vec<Component>,
    /// The seed they were drawn with (stored with each).
    pub seed: Option<u64>,
    /// In a conversation (issue 42), each varied test case's user turns
    /// under the same variant, by its varied test code, then turn code.
    pub turns: std::collections::HashMap<String, std::collections::HashMap<String, String>>,
    /// What a `names` or `pronouns` variant swapped in a varied test case's
    /// user messages, by its varied test code: its rubrics and evaluation
    /// take the same swaps ([`cases::TestCase::rubrics`]).
    pub swaps: std::collections::HashMap<String, variants::Swaps>,
    /// Each original test case's variants (by condition, user context and
    /// perturbation index), a range of `components`.
    pub(crate) by_case: std::collections::HashMap<(u32, Option<u32>, u32), std::ops::Range<u32>>,
}

impl Scenario {
    pub fn test_case_count(&self, include_no_context: bool) -> usize {
        let contexts = self.user_contexts.len() + usize::from(include_no_context);
        self.conditions.len() * contexts * self.perturbations.len()
    }

    /// Conditions, user contexts and perturbations that are only frontmatter.
    pub fn empty_components(&self) -> usize {
        self.conditions
            .iter()
            .chain(&self.user_contexts)
            .chain(&self.perturbations)
            .filter(|c| c.is_empty())
            .count()
    }

    /// The evaluation of one test case: the scenario's, with the overrides of
    /// its condition, user context and perturbation applied in that order.
    pub fn evaluation_for(
        &self,
        condition: &Component,
        user_context: Option<&Component>,
        perturbation: &Component,
    ) -> std::borrow::Cow<'_, Evaluation> {
        use std::borrow::Cow;
        if !self.has_overrides {
            return Cow::Borrowed(&self.evaluation);
        }
        let mut ev = Cow::Borrowed(&self.evaluation);
        for c in [Some(condition), user_context, Some(perturbation)]
            .into_iter()
            .flatten()
        {
            if let Some(o) = &c.overrides {
                ev = Cow::Owned(ev.with_override(o));
            }
        }
        ev
    }

    /// The bare JSON Schema inside the response format.
    pub fn schema(&self) -> Option<&Value> {
        self.response_format
            .as_ref()
            .and_then(|rf| rf.pointer("/json_schema/schema"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComponentKind {
    Condition,
    UserContext,
    Perturbation,
    /// A later message of a conversation (`turns.md`): read like every
    /// component, then given its role (see [`Turn`]).
    Turn,
    /// A simulated user (`personas.md`): its body is the instructions of
    /// the user-simulator model (see [`Persona`]).
    Persona,
}

impl ComponentKind {
    pub fn prefix(self) -> &'static str {
        match self {
            ComponentKind::Condition => "C",
            ComponentKind::UserContext => "U",
            ComponentKind::Perturbation => "PT",
            ComponentKind::Turn => "T",
            ComponentKind::Persona => "PR",
        }
    }

    pub fn file_stem(self) -> &'static str {
        match self {
            ComponentKind::Condition => "conditions",
            ComponentKind::UserContext => "user-contexts",
            ComponentKind::Perturbation => "perturbations",
            ComponentKind::Turn => "turns",
            ComponentKind::Persona => "personas",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ComponentKind::Condition => "condition",
            ComponentKind::UserContext => "user_context",
            ComponentKind::Perturbation => "perturbation",
            ComponentKind::Turn => "turn",
            ComponentKind::Persona => "persona",
        }
    }
}

/// A condition, user context or perturbation of one scenario.
#[derive(Debug, Clone)]
pub struct Component {
    pub kind: ComponentKind,
    /// `C1`
    pub code: String,
    /// `P1-B1-S1-C1`: components are scenario-scoped.
    pub full_code: String,
    /// Text after the code in the section heading, if any.
    pub title: Option<String>,
    pub source: PathBuf,
    pub line: usize,
    pub metadata: Value,
    /// -10..10; 0 when absent.
    pub severity: f64,
    /// Conditions only: 0..10; 0 when absent.
    pub difficulty: f64,
    /// The component's prompt after H2-to-XML conversion; empty for a
    /// component that is only frontmatter (it adds nothing to the prompt).
    pub prompt: String,
    /// The markdown body as written (frontmatter removed), for `check`.
    pub body: String,
    /// The file line where `body` starts.
    pub body_line: usize,
    /// Evaluation keys this component overrides, if any.
    pub overrides: Option<EvalOverride>,
    pub hash: String,
}

impl Component {
    /// A component with no text: it runs, adds nothing to the prompt, and
    /// its severity or difficulty still counts.
    pub fn is_empty(&self) -> bool {
        self.prompt.is_empty()
    }

    /// `# PT3` (with its title): the section an error or warning names.
    pub fn section_label(&self) -> String {
        match &self.title {
            Some(t) => format!("# {} {t}", self.code),
            None => format!("# {}", self.code),
        }
    }
}

/// Who says a turn of a conversation (SPEC §1 `turns.md`, `role:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnRole {
    /// Sent to the model, whose live reply follows it.
    User,
    /// Fixed text put into the history as the model's own earlier reply
    /// (a prefilled reply: no request is made for it).
    Assistant,
    /// An empty marker: the test case's perturbation is sent here, as a
    /// user message, instead of at the end of message 1.
    Perturbation,
}

/// One later message of a conversation: a `# T2` section of `turns.md`.
#[derive(Debug, Clone)]
pub struct Turn {
    pub role: TurnRole,
    /// A free label for reporting (`minimizing`, `rejecting-resources`, …).
    pub pressure: Option<String>,
    /// Whether the live reply to this turn is judged (`judge: false`: a
    /// rapport turn).
    pub judge: bool,
    /// The rubrics that judge the reply to this turn (None: all of the
    /// scenario's).
    pub criteria: Option<Vec<String>>,
    /// The perturbations (codes) this turn is part of (None: all).
    pub perturbations: Option<Vec<String>>,
    /// Its code (`T2`), converted text, evaluation overrides for its reply,
    /// file, line and hash, read exactly as every component's.
    pub component: Component,
}

impl Turn {
    /// Whether this turn is in the conversations of `perturbation` (a
    /// perturbation's code, `PT3`).
    pub fn applies_to(&self, perturbation: &str) -> bool {
        self.perturbations
            .as_ref()
            .is_none_or(|p| p.iter().any(|c| c == perturbation))
    }
}

/// A simulated user of a conversation (issue 42): a `# PR1` section of
/// `personas.md`. A user-simulator model (`--user-model`) is told its
/// body and writes each user message after message 1 until it says
/// [`crate::benchmark::conversation::STOP_MARKER`] or `max_turns` is reached.
#[derive(Debug, Clone)]
pub struct Persona {
    /// The most simulated user messages after message 1.
    pub max_turns: u32,
    /// The longest simulated message, in words: a longer one is cut to it.
    pub max_words: Option<u32>,
    /// A free label for reporting, as a turn's `pressure`.
    pub risk: Option<String>,
    /// Its code (`PR1`), instructions, file, line and hash.
    pub component: Component,
}

/// How a scenario's reply is judged (SPEC §4).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Evaluation {
    CategoryMatch {
        field: String,
        /// Accepted values: the reply passes when its field is any of them.
        #[serde(serialize_with = "one_or_many")]
        expected: Vec<String>,
    },
    ListIncludes {
        field: String,
        required: Vec<String>,
    },
    TagThreshold {
        field: String,
        expected: Vec<String>,
        min_correct: usize,
        max_incorrect: usize,
    },
    Sqe,
    Mcsqe,
}

impl Evaluation {
    pub fn type_name(&self) -> &'static str {
        match self {
            Evaluation::CategoryMatch { .. } => "category_match",
            Evaluation::ListIncludes { .. } => "list_includes",
            Evaluation::TagThreshold { .. } => "tag_threshold",
            Evaluation::Sqe => "sqe",
            Evaluation::Mcsqe => "mcsqe",
        }
    }

    /// Judged by an LLM rather than checked field by field.
    pub fn is_judged(&self) -> bool {
        matches!(self, Evaluation::Sqe | Evaluation::Mcsqe)
    }

    /// The reply field the deterministic check reads.
    pub fn field(&self) -> Option<&str> {
        match self {
            Evaluation::CategoryMatch { field, .. }
            | Evaluation::ListIncludes { field, .. }
            | Evaluation::TagThreshold { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// One accepted value serialises as a string (as it always has), several as a list.
fn one_or_many<S: serde::Serializer>(values: &[String], s: S) -> Result<S::Ok, S::Error> {
    match values {
        [one] => s.serialize_str(one),
        many => many.serialize(s),
    }
}

impl Evaluation {
    /// The values this evaluation expects or requires in its field: the ones
    /// a schema's `enum` must allow for the check to be passable.
    pub fn wanted_values(&self) -> &[String] {
        match self {
            Evaluation::CategoryMatch { expected, .. }
            | Evaluation::TagThreshold { expected, .. } => expected,
            Evaluation::ListIncludes { required, .. } => required,
            Evaluation::Sqe | Evaluation::Mcsqe => &[],
        }
    }

    /// This evaluation with a component's override applied (keys it sets win).
    pub fn with_override(&self, o: &EvalOverride) -> Evaluation {
        let mut ev = self.clone();
        match &mut ev {
            Evaluation::CategoryMatch { expected, .. } => {
                if let Some(e) = &o.expected {
                    expected.clone_from(e);
                }
            }
            Evaluation::ListIncludes { required, .. } => {
                if let Some(r) = &o.required {
                    required.clone_from(r);
                }
            }
            Evaluation::TagThreshold {
                expected,
                min_correct,
                max_incorrect,
                ..
            } => {
                if let Some(e) = &o.expected {
                    expected.clone_from(e);
                }
                if let Some(m) = o.min_correct {
                    *min_correct = m;
                }
                if let Some(m) = o.max_incorrect {
                    *max_incorrect = m;
                }
            }
            Evaluation::Sqe | Evaluation::Mcsqe => {}
        }
        ev
    }

    /// Why no reply could pass this evaluation, if so.
    pub fn impossible(&self) -> Option<String> {
        match self {
            Evaluation::TagThreshold {
                expected,
                min_correct,
                ..
            } if *min_correct > expected.len() => Some(format!(
                "min_correct is {min_correct} but `expected` lists only {} tags, so no reply could pass",
                expected.len()
            )),
            _ => None,
        }
    }
}

/// A component's `evaluation:` frontmatter: the scenario's evaluation keys it
/// changes for the test cases it takes part in (SPEC §4). A perturbation's
/// keys win over a user context's, which win over a condition's.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EvalOverride {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_correct: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_incorrect: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseType {
    Single,
    Multi,
}

/// One SQE rubric (`criteria.md` or `CR1.md`).
#[derive(Debug, Clone)]
pub struct Rubric {
    /// `criteria` for single-criterion SQE, `CR1`... for multi-criteria.
    pub code: String,
    pub file: PathBuf,
    pub options: Vec<String>,
    pub pass_values: Vec<String>,
    pub response_field: String,
    pub response_type: ResponseType,
    /// The rubric after frontmatter removal and H2-to-XML conversion.
    pub prompt: String,
    /// The markdown body as written and the file line it starts on, for `check`.
    pub body: String,
    pub body_line: usize,
    pub hash: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsConfig {
    /// The judge, or a list of judges kept comma-separated (issue 20).
    #[serde(default, deserialize_with = "crate::domain::deserialize_judges")]
    pub marking_model: Option<String>,
    #[serde(default)]
    pub models: Vec<ModelEntry>,
}

/// `scoring.yaml`: relative behaviour weights and safety floors.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoringConfig {
    #[serde(default)]
    pub weights: BTreeMap<String, f64>,
    #[serde(default)]
    pub floors: BTreeMap<String, f64>,
    /// How blocked and refused test cases enter the score: a run's own
    /// choice (`run-batch --blocked-as`), set from its recorded settings
    /// when it is reported, never read from scoring.yaml.
    #[serde(skip)]
    pub blocked_as: crate::domain::BlockedAs,
}

impl ScoringConfig {
    /// A behaviour's weight; missing behaviours weigh 1.
    pub fn weight(&self, behaviour: &str) -> f64 {
        self.weights.get(behaviour).copied().unwrap_or(1.0)
    }
}
