//! Loading a benchmark from disk: scenario folders in either layout, their
//! prompt, schema, component and rubric files, `models.yml` and
//! `scoring.yaml` (SPEC §1). Every content problem is collected with its file,
//! line and section, so an author sees all of them in one pass.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::discovery::{self, ScenarioDir, natural_cmp, parse_segment, strip_suffix};
use crate::markdown::{self, line_of, split_frontmatter, split_sections};

/// Largest content file read; anything bigger is an authoring accident.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// One problem in the benchmark content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentError {
    pub path: PathBuf,
    pub line: Option<usize>,
    /// The consolidated-file section, e.g. `# C2`.
    pub section: Option<String>,
    pub message: String,
}

impl ContentError {
    pub fn new(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        ContentError {
            path: path.as_ref().to_path_buf(),
            line: None,
            section: None,
            message: message.into(),
        }
    }

    pub fn at(mut self, line: usize) -> Self {
        self.line = Some(line);
        self
    }

    pub fn in_section(mut self, section: impl Into<String>) -> Self {
        self.section = Some(section.into());
        self
    }
}

impl fmt::Display for ContentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(section) = &self.section {
            write!(f, " [{section}]")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// All content problems of one load.
#[derive(Debug, Clone, Default, thiserror::Error)]
pub struct ContentErrors(pub Vec<ContentError>);

impl fmt::Display for ContentErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} content error(s) in the benchmark:", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

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
    pub hash: String,
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
}

impl ComponentKind {
    pub fn prefix(self) -> &'static str {
        match self {
            ComponentKind::Condition => "C",
            ComponentKind::UserContext => "U",
            ComponentKind::Perturbation => "PT",
        }
    }

    pub fn file_stem(self) -> &'static str {
        match self {
            ComponentKind::Condition => "conditions",
            ComponentKind::UserContext => "user-contexts",
            ComponentKind::Perturbation => "perturbations",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ComponentKind::Condition => "condition",
            ComponentKind::UserContext => "user_context",
            ComponentKind::Perturbation => "perturbation",
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
    fn impossible(&self) -> Option<String> {
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
    pub hash: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsConfig {
    #[serde(default)]
    pub marking_model: Option<String>,
    #[serde(default)]
    pub models: Vec<ModelEntry>,
}

/// One model of `models.yml` with its request parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

impl ModelEntry {
    pub fn new(id: impl Into<String>) -> Self {
        ModelEntry {
            id: id.into(),
            temperature: None,
            seed: None,
            max_tokens: None,
        }
    }
}

/// `scoring.yaml`: relative behaviour weights and safety floors.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoringConfig {
    #[serde(default)]
    pub weights: BTreeMap<String, f64>,
    #[serde(default)]
    pub floors: BTreeMap<String, f64>,
}

impl ScoringConfig {
    /// A behaviour's weight; missing behaviours weigh 1.
    pub fn weight(&self, behaviour: &str) -> f64 {
        self.weights.get(behaviour).copied().unwrap_or(1.0)
    }
}

/// Loads the benchmark at `root`. Returns what loaded and every problem;
/// scenarios with problems are left out of the benchmark.
pub fn load(root: &Path) -> (Benchmark, Vec<ContentError>) {
    let mut errors = Vec::new();
    let mut hasher = Sha256::new();
    if !root.is_dir() {
        errors.push(ContentError::new(
            root,
            "benchmark folder not found (expected a folder holding models.yml and scenarios/; set --benchmark-dir or HELMBENCH_BENCHMARK_DIR)",
        ));
    }
    let models = load_models(root, &mut errors, &mut hasher);
    let scoring = load_scoring(root, &mut errors, &mut hasher);

    let (dirs, mut walk_errors) = discovery::find_scenarios(&root.join("scenarios"));
    if root.is_dir() {
        errors.append(&mut walk_errors);
    }
    let mut scenarios = Vec::with_capacity(dirs.len());
    let mut pillars: BTreeMap<String, Pillar> = BTreeMap::new();
    let mut behaviours: BTreeMap<String, Behaviour> = BTreeMap::new();
    for dir in &dirs {
        note_pillar_and_behaviour(dir, &mut pillars, &mut behaviours);
        let before = errors.len();
        if let Some(s) = load_scenario(dir, &mut errors)
            && errors.len() == before
        {
            scenarios.push(s);
        }
    }
    for s in &scenarios {
        hasher.update(s.hash.as_bytes());
    }
    let judged = scenarios.iter().any(|s| s.evaluation.is_judged());
    if let Some(m) = &models
        && judged
        && m.marking_model.as_deref().is_none_or(str::is_empty)
    {
        errors.push(ContentError::new(
            root.join("models.yml"),
            "`marking_model` is missing but sqe/mcsqe scenarios need a judge (expected `marking_model: provider/model`)",
        ));
    }
    check_scoring(root, &scoring, &behaviours, &mut errors);

    let mut pillars: Vec<Pillar> = pillars.into_values().collect();
    pillars.sort_by(|a, b| natural_cmp(&a.code, &b.code));
    let mut behaviours: Vec<Behaviour> = behaviours.into_values().collect();
    behaviours.sort_by(|a, b| natural_cmp(&a.code, &b.code));
    let benchmark = Benchmark {
        root: root.to_path_buf(),
        models,
        scoring,
        pillars,
        behaviours,
        scenarios,
        content_hash: hex(&hasher.finalize()[..]),
    };
    (benchmark, errors)
}

/// Loads and fails on any problem.
pub fn load_strict(root: &Path) -> Result<Benchmark, ContentErrors> {
    let (b, errors) = load(root);
    if errors.is_empty() {
        Ok(b)
    } else {
        Err(ContentErrors(errors))
    }
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

pub fn sha256_hex(parts: &[&[u8]]) -> String {
    hex(&sha256(parts))
}

/// The digest [`sha256_hex`] spells out: each part prefixed by its length.
pub fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().into()
}

/// Reads a text file: size-capped, UTF-8 checked, errors naming the line.
pub fn read_text(path: &Path, errors: &mut Vec<ContentError>) -> Option<String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            errors.push(ContentError::new(path, format!("cannot read file: {e}")));
            return None;
        }
    };
    if meta.len() > MAX_FILE_BYTES {
        errors.push(ContentError::new(
            path,
            format!(
                "file is {:.1} MB (expected at most {} MB of text)",
                meta.len() as f64 / 1e6,
                MAX_FILE_BYTES / 1024 / 1024
            ),
        ));
        return None;
    }
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            errors.push(ContentError::new(path, format!("cannot read file: {e}")));
            return None;
        }
    };
    match String::from_utf8(bytes) {
        Ok(s) => {
            if let Some(line) = markdown::lone_cr_line(&s) {
                errors.push(
                    ContentError::new(
                        path,
                        "line ends with a lone carriage return (classic Mac line endings; expected LF or CRLF)",
                    )
                    .at(line),
                );
                return None;
            }
            Some(s)
        }
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            errors.push(
                ContentError::new(
                    path,
                    format!("not valid UTF-8 at byte {at} (expected UTF-8 text)"),
                )
                .at(line),
            );
            None
        }
    }
}

/// Parses a YAML mapping into JSON, positioning errors at the file's line.
fn parse_yaml_map(
    yaml: &str,
    path: &Path,
    first_line: usize,
    section: Option<&str>,
) -> Result<Map<String, Value>, ContentError> {
    let located = |msg: String, line: usize| {
        let e = ContentError::new(path, msg).at(line);
        match section {
            Some(s) => e.in_section(s),
            None => e,
        }
    };
    if yaml.trim().is_empty() {
        return Ok(Map::new());
    }
    if let Some(msg) = yaml_too_complex(yaml) {
        return Err(located(msg, first_line));
    }
    let value: serde_yaml::Value = serde_yaml::from_str(yaml).map_err(|e| {
        // An error at the end of input is reported past the block: clamp it.
        let last = first_line + yaml.lines().count().max(1) - 1;
        let line = e
            .location()
            .map_or(first_line, |l| (first_line + l.line() - 1).min(last));
        let msg = e.to_string();
        // The library appends its own position; ours is the file's.
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        located(format!("invalid YAML: {msg}"), line)
    })?;
    // JSON has no NaN or infinity: converted, `.nan`, `.inf` and `1e999`
    // would silently become null, i.e. "absent, default 0".
    if let Some(key) = non_finite_number(&value, "") {
        return Err(located(
            format!(
                "`{key}` is not a finite number (expected a number such as 5 or -2.5, not .nan, .inf or an overflowing value)"
            ),
            first_line,
        ));
    }
    let value: Value = serde_yaml::from_value(value)
        .map_err(|e| located(format!("invalid YAML: {e}"), first_line))?;
    match value {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(Map::new()),
        other => Err(located(
            format!(
                "frontmatter is a {} (expected a YAML mapping of keys to values)",
                json_type(&other)
            ),
            first_line,
        )),
    }
}

/// Most `[`/`{` a YAML text may hold. The YAML parser's time grows with the
/// square of flow-collection nesting (20,000 nested `[` take seconds, an
/// 8 MB file hours), so a nesting bomb must be refused before parsing.
/// Counting every bracket, quoted or not, cannot be evaded by hiding
/// closers in strings; real frontmatter and models.yml hold a handful.
const MAX_YAML_FLOW_BRACKETS: usize = 2000;

fn yaml_too_complex(yaml: &str) -> Option<String> {
    let n = yaml.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
    (n > MAX_YAML_FLOW_BRACKETS).then(|| {
        format!(
            "YAML holds {n} `[`/`{{` brackets (expected at most {MAX_YAML_FLOW_BRACKETS}; write long or nested lists in block style, one `- item` per line)"
        )
    })
}

/// The key path of the first NaN or infinite number in `v`, if any.
fn non_finite_number(v: &serde_yaml::Value, at: &str) -> Option<String> {
    match v {
        serde_yaml::Value::Number(n) if !n.is_finite() => Some(at.to_string()),
        serde_yaml::Value::Sequence(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, x)| non_finite_number(x, &format!("{at}[{i}]"))),
        serde_yaml::Value::Mapping(m) => m.iter().find_map(|(k, x)| {
            let k = match k {
                serde_yaml::Value::String(s) => s.clone(),
                other => serde_yaml::to_string(other)
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
            };
            let path = if at.is_empty() {
                k
            } else {
                format!("{at}.{k}")
            };
            non_finite_number(x, &path)
        }),
        serde_yaml::Value::Tagged(t) => non_finite_number(&t.value, at),
        _ => None,
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "mapping",
    }
}

fn load_models(
    root: &Path,
    errors: &mut Vec<ContentError>,
    hasher: &mut Sha256,
) -> Option<ModelsConfig> {
    let path = root.join("models.yml");
    if !path.is_file() {
        return None;
    }
    let text = read_text(&path, errors)?;
    hasher.update(text.as_bytes());
    if let Some(msg) = yaml_too_complex(&text) {
        errors.push(ContentError::new(&path, msg));
        return None;
    }
    match serde_yaml::from_str::<ModelsConfig>(&text) {
        Ok(m) => {
            let mut seen = BTreeSet::new();
            for (i, model) in m.models.iter().enumerate() {
                if model.id.trim().is_empty() {
                    errors.push(ContentError::new(
                        &path,
                        format!("models[{i}] has an empty `id` (expected provider/model)"),
                    ));
                } else if !seen.insert(model.id.as_str()) {
                    errors.push(ContentError::new(
                        &path,
                        format!("model `{}` is listed twice", model.id),
                    ));
                }
                if let Some(t) = model.temperature
                    && !(0.0..=2.0).contains(&t)
                {
                    errors.push(ContentError::new(
                        &path,
                        format!(
                            "model `{}`: temperature {t} is out of range (expected 0 to 2)",
                            model.id
                        ),
                    ));
                }
            }
            Some(m)
        }
        Err(e) => {
            let line = e.location().map(|l| l.line());
            let mut err = ContentError::new(
                &path,
                format!(
                    "invalid models.yml: {e} (expected `marking_model: ...` and `models: [{{id: ...}}]` with optional temperature, seed, max_tokens)"
                ),
            );
            err.line = line;
            errors.push(err);
            None
        }
    }
}

fn load_scoring(root: &Path, errors: &mut Vec<ContentError>, hasher: &mut Sha256) -> ScoringConfig {
    let path = root.join("scoring.yaml");
    if !path.is_file() {
        return ScoringConfig::default();
    }
    let Some(text) = read_text(&path, errors) else {
        return ScoringConfig::default();
    };
    hasher.update(text.as_bytes());
    if let Some(msg) = yaml_too_complex(&text) {
        errors.push(ContentError::new(&path, msg));
        return ScoringConfig::default();
    }
    match serde_yaml::from_str::<Option<ScoringConfig>>(&text) {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => {
            let mut err = ContentError::new(
                &path,
                format!(
                    "invalid scoring.yaml: {e} (expected `weights: {{P1-B1: 12}}` and optional `floors: {{P1-B1: 0.8}}`)"
                ),
            );
            err.line = e.location().map(|l| l.line());
            errors.push(err);
            ScoringConfig::default()
        }
    }
}

fn check_scoring(
    root: &Path,
    scoring: &ScoringConfig,
    behaviours: &BTreeMap<String, Behaviour>,
    errors: &mut Vec<ContentError>,
) {
    let path = root.join("scoring.yaml");
    for (code, w) in &scoring.weights {
        if !w.is_finite() || *w < 0.0 {
            errors.push(ContentError::new(
                &path,
                format!("weight of {code} is {w} (expected a number of 0 or more)"),
            ));
        }
        if !behaviours.contains_key(code) {
            errors.push(ContentError::new(&path, format!("weights names {code}, which has no scenarios (expected a behaviour code such as P1-B1)")));
        }
    }
    for (code, f) in &scoring.floors {
        if !(0.0..=1.0).contains(f) {
            errors.push(ContentError::new(
                &path,
                format!("floor of {code} is {f} (expected a score from 0 to 1)"),
            ));
        }
        if !behaviours.contains_key(code) {
            errors.push(ContentError::new(&path, format!("floors names {code}, which has no scenarios (expected a behaviour code such as P1-B1)")));
        }
    }
}

/// Pillar and behaviour names from the nested layout's README.md files; the
/// code when there is none. These are free-form notes and never fail a load.
fn note_pillar_and_behaviour(
    dir: &ScenarioDir,
    pillars: &mut BTreeMap<String, Pillar>,
    behaviours: &mut BTreeMap<String, Behaviour>,
) {
    pillars.entry(dir.pillar.clone()).or_insert_with(|| {
        let (name, description) = readme(dir.pillar_dir.as_deref(), &dir.pillar);
        Pillar {
            code: dir.pillar.clone(),
            name,
            description,
        }
    });
    behaviours.entry(dir.behaviour.clone()).or_insert_with(|| {
        let (name, description) = readme(dir.behaviour_dir.as_deref(), &dir.behaviour);
        Behaviour {
            code: dir.behaviour.clone(),
            pillar: dir.pillar.clone(),
            name,
            description,
        }
    });
}

fn readme(dir: Option<&Path>, code: &str) -> (String, String) {
    let fallback = (code.to_string(), String::new());
    let Some(text) = dir.and_then(|d| std::fs::read_to_string(d.join("README.md")).ok()) else {
        return fallback;
    };
    let body = match split_frontmatter(&text) {
        Ok(fm) => fm.body,
        Err(_) => text.as_str(),
    };
    for level in 1..=6 {
        if let Some(h) = markdown::headings(body, level).into_iter().next()
            && !h.text.is_empty()
        {
            let rest = format!("{}{}", &body[..h.range.start], &body[h.range.end..]);
            return (h.text, markdown::trim_blank_lines(&rest).to_string());
        }
    }
    (
        code.to_string(),
        markdown::trim_blank_lines(body).to_string(),
    )
}

/// Finds `S1.md` / `S1--suffix.md` (or `MCSQE.md`) and the matching `.json`.
fn find_file(dir: &Path, stem: &str, ext: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            p.extension().and_then(|e| e.to_str()) == Some(ext)
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .is_some_and(|s| strip_suffix(s) == stem)
        })
        .collect();
    out.sort();
    out
}

fn load_scenario(dir: &ScenarioDir, errors: &mut Vec<ContentError>) -> Option<Scenario> {
    let s_files = find_file(&dir.dir, &dir.short, "md");
    let mc_files = find_file(&dir.dir, "MCSQE", "md");
    let prompt_file = match (s_files.as_slice(), mc_files.as_slice()) {
        ([one], []) | ([], [one]) => one.clone(),
        ([], []) => {
            errors.push(ContentError::new(
                &dir.dir,
                format!("scenario {} has no prompt file (expected {}.md, or MCSQE.md for multi-criteria SQE)", dir.code, dir.short),
            ));
            return None;
        }
        _ => {
            let names = file_names(s_files.iter().chain(&mc_files));
            errors.push(ContentError::new(
                &dir.dir,
                format!(
                    "scenario {} has several prompt files ({}); expected exactly one",
                    dir.code, names
                ),
            ));
            return None;
        }
    };
    let is_mcsqe = !mc_files.is_empty();
    let text = read_text(&prompt_file, errors)?;
    let mut hash_parts: Vec<Vec<u8>> = vec![text.as_bytes().to_vec()];
    let fm = match split_frontmatter(&text) {
        Ok(fm) => fm,
        Err(e) => {
            errors.push(ContentError::new(&prompt_file, e.message).at(e.line));
            return None;
        }
    };
    let frontmatter = match fm
        .yaml
        .map(|y| parse_yaml_map(y, &prompt_file, fm.yaml_line, None))
    {
        Some(Ok(m)) => m,
        Some(Err(e)) => {
            errors.push(e);
            Map::new()
        }
        None => Map::new(),
    };
    let body_line = line_of(&text, fm.body_offset);
    let body = fm.body.to_string();
    let prompt = match markdown::to_xml(fm.body) {
        Ok(p) if p.is_empty() => {
            errors.push(ContentError::new(&prompt_file, "scenario prompt is empty (expected the scenario's instructions, e.g. under `## Your job`)"));
            String::new()
        }
        Ok(p) => p,
        Err(e) => {
            errors.push(ContentError::new(&prompt_file, e.message).at(body_line + e.line - 1));
            String::new()
        }
    };
    let evaluation = parse_evaluation(&frontmatter, &prompt_file, is_mcsqe, errors);

    // Response format: required for deterministic checks, optional for
    // judges. It is `<code>.json` whatever the prompt file is called; an
    // older `MCSQE.json` beside MCSQE.md is still read when it is the only one.
    let mut json_files = find_file(&dir.dir, &dir.short, "json");
    if is_mcsqe {
        let mc_json = find_file(&dir.dir, "MCSQE", "json");
        if !json_files.is_empty() && !mc_json.is_empty() {
            let names = file_names(json_files.iter().chain(&mc_json));
            errors.push(ContentError::new(
                &dir.dir,
                format!(
                    "several schema files ({}); expected one ({}.json beside MCSQE.md)",
                    names, dir.short
                ),
            ));
            return None;
        }
        if json_files.is_empty() {
            json_files = mc_json;
        }
    }
    let response_format = match json_files.as_slice() {
        [] => {
            if let Some(ev) = &evaluation
                && !ev.is_judged()
            {
                errors.push(ContentError::new(
                    &dir.dir,
                    format!(
                        "{} evaluation needs a response schema (expected {}.json beside {})",
                        ev.type_name(),
                        dir.short,
                        file_name(&prompt_file)
                    ),
                ));
            }
            None
        }
        [one] => {
            let raw = read_text(one, errors);
            if let Some(raw) = &raw {
                hash_parts.push(raw.as_bytes().to_vec());
            }
            raw.and_then(|raw| parse_response_format(&raw, one, errors))
        }
        many => {
            let names = file_names(many);
            errors.push(ContentError::new(
                &dir.dir,
                format!("several schema files ({}); expected one", names),
            ));
            None
        }
    };
    if let (Some(ev), Some(rf)) = (&evaluation, &response_format) {
        check_field_in_schema(ev, rf, &json_files[0], errors);
    }

    let code = &dir.code;
    let conditions = load_components(&dir.dir, code, ComponentKind::Condition, errors);
    let user_contexts = load_components(&dir.dir, code, ComponentKind::UserContext, errors);
    let perturbations = load_components(&dir.dir, code, ComponentKind::Perturbation, errors);
    for (kind, list) in [
        (ComponentKind::Condition, &conditions),
        (ComponentKind::Perturbation, &perturbations),
    ] {
        if list.as_ref().is_some_and(|l| l.is_empty()) {
            errors.push(ContentError::new(
                &dir.dir,
                format!(
                    "scenario {code} has no {}s (expected {}.md with `# {}1` sections, or {}/{}1.md)",
                    kind.as_str(),
                    kind.file_stem(),
                    kind.prefix(),
                    kind.file_stem(),
                    kind.prefix()
                ),
            ));
        }
    }

    let rubrics = match &evaluation {
        Some(Evaluation::Sqe) => {
            let found = find_file(&dir.dir, "criteria", "md");
            if let [path] = found.as_slice() {
                load_rubric(path, "criteria", errors).into_iter().collect()
            } else if found.len() > 1 {
                let names = file_names(&found);
                errors.push(ContentError::new(
                    &dir.dir,
                    format!("several rubric files ({}); expected one", names),
                ));
                Vec::new()
            } else {
                errors.push(ContentError::new(
                    &dir.dir,
                    "sqe evaluation needs a rubric (expected criteria.md in the scenario folder)",
                ));
                Vec::new()
            }
        }
        Some(Evaluation::Mcsqe) => {
            let mut files = cr_files(&dir.dir);
            files.sort_by(|a, b| natural_cmp(&a.0, &b.0));
            if files.is_empty() {
                errors.push(ContentError::new(
                    &dir.dir,
                    "mcsqe evaluation needs rubrics (expected CR1.md, CR2.md, ... beside MCSQE.md)",
                ));
            }
            for pair in files.windows(2) {
                if pair[0].0 == pair[1].0 {
                    errors.push(ContentError::new(
                        &pair[1].1,
                        format!(
                            "duplicate criterion {} (also {})",
                            pair[1].0,
                            file_name(&pair[0].1)
                        ),
                    ));
                }
            }
            files
                .iter()
                .filter_map(|(c, p)| load_rubric(p, c, errors))
                .collect()
        }
        _ => Vec::new(),
    };
    for r in &rubrics {
        hash_parts.push(r.hash.as_bytes().to_vec());
    }

    let (conditions, user_contexts, perturbations) = (conditions?, user_contexts?, perturbations?);
    let evaluation = evaluation?;
    let (conditions, user_contexts, perturbations, has_overrides) = apply_overrides(
        &evaluation,
        conditions,
        user_contexts,
        perturbations,
        errors,
    )?;
    for c in conditions
        .iter()
        .chain(&user_contexts)
        .chain(&perturbations)
    {
        hash_parts.push(c.hash.as_bytes().to_vec());
    }
    let parts: Vec<&[u8]> = hash_parts.iter().map(Vec::as_slice).collect();
    Some(Scenario {
        code: code.clone(),
        pillar: dir.pillar.clone(),
        behaviour: dir.behaviour.clone(),
        dir: dir.dir.clone(),
        prompt_file,
        frontmatter: Value::Object(frontmatter),
        evaluation,
        prompt,
        body,
        body_line,
        has_overrides,
        response_format,
        conditions,
        user_contexts,
        perturbations,
        rubrics,
        hash: sha256_hex(&parts),
    })
}

/// `S1.json, MCSQE.json`: the files an error about several files names.
fn file_names<'a>(paths: impl IntoIterator<Item = &'a PathBuf>) -> String {
    let names: Vec<String> = paths.into_iter().map(|p| file_name(p)).collect();
    names.join(", ")
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

fn cr_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().and_then(|e| e.to_str()) == Some("md"))
        .filter_map(|p| {
            let stem = strip_suffix(p.file_stem()?.to_str()?).to_string();
            matches!(parse_segment(&stem), Some(("CR", _, _))).then_some((stem, p))
        })
        .collect()
}

const EVALUATION_TYPES: &str = "category_match, list_includes, tag_threshold, sqe or mcsqe";

fn parse_evaluation(
    fm: &Map<String, Value>,
    path: &Path,
    is_mcsqe: bool,
    errors: &mut Vec<ContentError>,
) -> Option<Evaluation> {
    let mut fail = |msg: String| {
        errors.push(ContentError::new(path, msg).in_section("frontmatter `evaluation`"));
        None
    };
    let empty = Map::new();
    let block = match fm.get("evaluation") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(other) => {
            return fail(format!(
                "`evaluation` is a {} (expected a mapping with `type` and its keys)",
                json_type(other)
            ));
        }
    };
    let default_type = if is_mcsqe { "mcsqe" } else { "category_match" };
    let ty = match block.get("type") {
        None | Some(Value::Null) => default_type,
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return fail(format!(
                "`type` is a {} (expected one of {EVALUATION_TYPES})",
                json_type(other)
            ));
        }
    };
    if is_mcsqe && ty != "mcsqe" {
        return fail(format!(
            "MCSQE.md declares evaluation type `{ty}` (expected mcsqe or no type)"
        ));
    }
    if ty == "mcsqe" && !is_mcsqe {
        return fail("mcsqe evaluation belongs in MCSQE.md (expected the scenario prompt in MCSQE.md beside CR1.md, CR2.md, ...)".into());
    }
    let string = |key: &str| -> Result<Option<String>, String> {
        match block.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(other) => Err(format!(
                "`{key}` is a {} (expected a non-empty string)",
                json_type(other)
            )),
        }
    };
    let list = |key: &str| -> Result<Option<Vec<String>>, String> {
        match block.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) if !items.is_empty() => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    other => Err(format!(
                        "`{key}` holds a {} (expected strings)",
                        json_type(other)
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(vec![s.clone()])),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(vec![v.to_string()])),
            Some(other) => Err(format!(
                "`{key}` is a {} (expected a non-empty list of strings)",
                json_type(other)
            )),
        }
    };
    let count = |key: &str, default: usize| -> Result<usize, String> {
        match block.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64().unwrap_or(0) as usize),
            Some(other) => Err(format!(
                "`{key}` is {other} (expected a whole number of 0 or more)"
            )),
        }
    };
    let result = (|| -> Result<Evaluation, String> {
        Ok(match ty {
            "category_match" => {
                let field = string("field")?.unwrap_or_else(|| "category".into());
                let expected = match list("expected")? {
                    Some(e) => e,
                    None => match fm.get("category") {
                        Some(Value::String(s)) if !s.trim().is_empty() => vec![s.clone()],
                        _ => return Err("category_match needs the expected value (expected `evaluation.expected` or a frontmatter `category`)".into()),
                    },
                };
                Evaluation::CategoryMatch { field, expected }
            }
            "list_includes" => Evaluation::ListIncludes {
                field: string("field")?.unwrap_or_else(|| "tags".into()),
                required: list("required")?.ok_or(
                    "list_includes needs `required` (expected a non-empty list of values)",
                )?,
            },
            "tag_threshold" => {
                let expected = list("expected")?
                    .ok_or("tag_threshold needs `expected` (expected a non-empty list of tags)")?;
                let min_correct = count("min_correct", 1)?;
                let ev = Evaluation::TagThreshold {
                    field: string("field")?.unwrap_or_else(|| "tags".into()),
                    expected,
                    min_correct,
                    max_incorrect: count("max_incorrect", 0)?,
                };
                if let Some(why) = ev.impossible() {
                    return Err(why);
                }
                ev
            }
            "sqe" => Evaluation::Sqe,
            "mcsqe" => Evaluation::Mcsqe,
            other => {
                return Err(format!(
                    "unknown evaluation type `{other}` (expected one of {EVALUATION_TYPES})"
                ));
            }
        })
    })();
    match result {
        Ok(ev) => Some(ev),
        Err(msg) => fail(msg),
    }
}

/// Accepts the full OpenRouter wrapper or a bare schema (wrapped as
/// `response`, strict), and checks the schema is itself valid JSON Schema.
fn parse_response_format(raw: &str, path: &Path, errors: &mut Vec<ContentError>) -> Option<Value> {
    let value: Value = match serde_json::from_str(raw) {
        Ok(v) => v,
        Err(e) => {
            errors.push(ContentError::new(path, format!("invalid JSON: {e}")).at(e.line()));
            return None;
        }
    };
    let wrapper = if value.get("type").and_then(Value::as_str) == Some("json_schema")
        && value.get("json_schema").is_some()
    {
        let inner = &value["json_schema"];
        if !inner.get("name").is_some_and(Value::is_string) {
            errors.push(ContentError::new(
                path,
                "`json_schema.name` is missing (expected a string name for the schema)",
            ));
            return None;
        }
        if !inner.get("schema").is_some_and(Value::is_object) {
            errors.push(ContentError::new(
                path,
                "`json_schema.schema` is missing (expected the JSON Schema object)",
            ));
            return None;
        }
        value
    } else if value.is_object() {
        json!({"type": "json_schema", "json_schema": {"name": "response", "strict": true, "schema": value}})
    } else {
        errors.push(ContentError::new(path, format!("schema is a {} (expected a JSON Schema object or the {{\"type\":\"json_schema\",...}} wrapper)", json_type(&value))));
        return None;
    };
    let schema = &wrapper["json_schema"]["schema"];
    if let Err(e) = jsonschema::meta::validate(schema) {
        errors.push(ContentError::new(
            path,
            format!("not a valid JSON Schema: {e} (at {})", e.instance_path()),
        ));
        return None;
    }
    if let Err(e) = jsonschema::validator_for(schema) {
        errors.push(ContentError::new(
            path,
            format!("JSON Schema cannot be compiled: {e}"),
        ));
        return None;
    }
    Some(wrapper)
}

/// The evaluated field must exist in the schema, or no reply could carry
/// it. (Expected values outside the field's `enum` are a `check` warning.)
fn check_field_in_schema(ev: &Evaluation, rf: &Value, path: &Path, errors: &mut Vec<ContentError>) {
    let Some(field) = ev.field() else { return };
    let Some(props) = rf
        .pointer("/json_schema/schema/properties")
        .and_then(Value::as_object)
    else {
        return;
    };
    if !props.contains_key(field) {
        errors.push(ContentError::new(path, format!("the evaluation reads field `{field}`, which the schema does not define (expected it under `properties`)")));
    }
}

/// Reads each component's `evaluation:` override against the scenario's
/// evaluation type, and checks that every test case's resulting evaluation
/// can be passed. Returns the components with their overrides set.
#[allow(clippy::type_complexity)]
fn apply_overrides(
    ev: &Evaluation,
    mut conditions: Vec<Component>,
    mut user_contexts: Vec<Component>,
    mut perturbations: Vec<Component>,
    errors: &mut Vec<ContentError>,
) -> Option<(Vec<Component>, Vec<Component>, Vec<Component>, bool)> {
    let before = errors.len();
    let mut any = false;
    for c in conditions
        .iter_mut()
        .chain(user_contexts.iter_mut())
        .chain(perturbations.iter_mut())
    {
        c.overrides = parse_override(c, ev, errors);
        any |= c.overrides.is_some();
    }
    if any {
        // Overrides from several components combine; check each combination
        // once (only scenarios with overrides pay for this).
        let no_context = [None];
        let contexts: Vec<Option<&Component>> = no_context
            .into_iter()
            .chain(user_contexts.iter().map(Some))
            .collect();
        let mut seen = BTreeSet::new();
        'all: for c in &conditions {
            for u in &contexts {
                for p in &perturbations {
                    let mut combined = ev.clone();
                    let mut last = None;
                    for part in [Some(c), *u, Some(p)].into_iter().flatten() {
                        if let Some(o) = &part.overrides {
                            combined = combined.with_override(o);
                            last = Some(part);
                        }
                    }
                    if let (Some(why), Some(part)) = (combined.impossible(), last)
                        && seen.insert(why.clone())
                    {
                        errors.push(
                            ContentError::new(&part.source, why)
                                .at(part.line)
                                .in_section(part.section_label()),
                        );
                        if seen.len() > 10 {
                            break 'all;
                        }
                    }
                }
            }
        }
    }
    (errors.len() == before).then_some((conditions, user_contexts, perturbations, any))
}

/// One component's `evaluation:` frontmatter, checked against the keys the
/// scenario's evaluation type can override.
fn parse_override(
    c: &Component,
    ev: &Evaluation,
    errors: &mut Vec<ContentError>,
) -> Option<EvalOverride> {
    let block = c.metadata.get("evaluation")?;
    let mut fail = |msg: String| {
        errors.push(
            ContentError::new(&c.source, msg)
                .at(c.line)
                .in_section(c.section_label()),
        );
        None
    };
    let Value::Object(block) = block else {
        return fail(format!(
            "`evaluation` is a {} (expected a mapping of the keys this {} overrides, e.g. `evaluation: {{expected: ...}}`)",
            json_type(block),
            c.kind.as_str()
        ));
    };
    let allowed: &[&str] = match ev {
        Evaluation::CategoryMatch { .. } => &["expected"],
        Evaluation::ListIncludes { .. } => &["required"],
        Evaluation::TagThreshold { .. } => &["expected", "min_correct", "max_incorrect"],
        Evaluation::Sqe | Evaluation::Mcsqe => &[],
    };
    for key in block.keys() {
        if !allowed.contains(&key.as_str()) {
            let expected = if allowed.is_empty() {
                "none: the rubric decides a judged evaluation".to_string()
            } else {
                allowed.join(", ")
            };
            return fail(format!(
                "`evaluation.{key}` cannot be overridden by a {} of a {} scenario (expected: {expected})",
                c.kind.as_str(),
                ev.type_name()
            ));
        }
    }
    let list = |key: &str| -> Result<Option<Vec<String>>, String> {
        match block.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(vec![s.clone()])),
            Some(Value::Array(items)) if !items.is_empty() => items
                .iter()
                .map(|v| match v {
                    Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
                    Value::Number(_) | Value::Bool(_) => Ok(v.to_string()),
                    other => Err(format!(
                        "`evaluation.{key}` holds {other} (expected non-empty strings)"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(format!(
                "`evaluation.{key}` is {other} (expected a value or a non-empty list of values)"
            )),
        }
    };
    let count = |key: &str| -> Result<Option<usize>, String> {
        match block.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64().map(|v| v as usize)),
            Some(other) => Err(format!(
                "`evaluation.{key}` is {other} (expected a whole number of 0 or more)"
            )),
        }
    };
    let parsed = (|| -> Result<EvalOverride, String> {
        Ok(EvalOverride {
            expected: list("expected")?,
            required: list("required")?,
            min_correct: count("min_correct")?,
            max_incorrect: count("max_incorrect")?,
        })
    })();
    match parsed {
        Ok(o) if o == EvalOverride::default() => None,
        Ok(o) => Some(o),
        Err(msg) => fail(msg),
    }
}

fn load_rubric(path: &Path, code: &str, errors: &mut Vec<ContentError>) -> Option<Rubric> {
    let text = read_text(path, errors)?;
    let fm = match split_frontmatter(&text) {
        Ok(fm) => fm,
        Err(e) => {
            errors.push(ContentError::new(path, e.message).at(e.line));
            return None;
        }
    };
    let Some(yaml) = fm.yaml else {
        errors.push(ContentError::new(path, "rubric has no frontmatter (expected `options`, `pass_values`, `response_field` and `response_type`)"));
        return None;
    };
    let map = match parse_yaml_map(yaml, path, fm.yaml_line, None) {
        Ok(m) => m,
        Err(e) => {
            errors.push(e);
            return None;
        }
    };
    let mut problems = Vec::new();
    let strings = |key: &str, problems: &mut Vec<String>| -> Vec<String> {
        match map.get(key) {
            Some(Value::Array(a))
                if !a.is_empty()
                    && a.iter()
                        .all(|v| v.is_string() || v.is_number() || v.is_boolean()) =>
            {
                a.iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    .collect()
            }
            _ => {
                problems.push(format!(
                    "`{key}` is missing or not a list (expected a non-empty list of strings)"
                ));
                Vec::new()
            }
        }
    };
    let options = strings("options", &mut problems);
    let pass_values = strings("pass_values", &mut problems);
    for p in &pass_values {
        if !options.is_empty() && !options.contains(p) {
            problems.push(format!(
                "pass value `{p}` is not among the options ({})",
                options.join(", ")
            ));
        }
    }
    let response_field = match map.get("response_field") {
        None | Some(Value::Null) => "judgment".to_string(),
        Some(Value::String(s)) if !s.trim().is_empty() && s != "justification" => s.clone(),
        Some(other) => {
            problems.push(format!(
                "`response_field` is {other} (expected a field name other than `justification`)"
            ));
            String::new()
        }
    };
    let response_type = match map.get("response_type") {
        None | Some(Value::Null) => ResponseType::Single,
        Some(Value::String(s)) if s == "single" => ResponseType::Single,
        Some(Value::String(s)) if s == "multi" => ResponseType::Multi,
        Some(other) => {
            problems.push(format!(
                "unknown `response_type` {other} (expected single or multi)"
            ));
            ResponseType::Single
        }
    };
    let body_line = line_of(&text, fm.body_offset);
    let prompt = match markdown::to_xml(fm.body) {
        Ok(p) if p.is_empty() => {
            problems.push("rubric has no text (expected the criteria the judge applies)".into());
            String::new()
        }
        Ok(p) => p,
        Err(e) => {
            errors.push(ContentError::new(path, e.message).at(body_line + e.line - 1));
            return None;
        }
    };
    if !problems.is_empty() {
        for p in problems {
            errors.push(ContentError::new(path, p).at(fm.yaml_line));
        }
        return None;
    }
    Some(Rubric {
        code: code.to_string(),
        file: path.to_path_buf(),
        options,
        pass_values,
        response_field,
        response_type,
        prompt,
        hash: sha256_hex(&[code.as_bytes(), text.as_bytes()]),
    })
}

/// Loads one kind of component: the consolidated file when present, else the
/// individual files. `None` when the files could not be read at all.
fn load_components(
    dir: &Path,
    scenario: &str,
    kind: ComponentKind,
    errors: &mut Vec<ContentError>,
) -> Option<Vec<Component>> {
    // `conditions.md` or `conditions--any-suffix.md`, like every other file.
    let consolidated = match find_file(dir, kind.file_stem(), "md").as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        many => {
            let names = file_names(many);
            errors.push(ContentError::new(
                dir,
                format!(
                    "several {} files ({}); expected one",
                    kind.file_stem(),
                    names
                ),
            ));
            return None;
        }
    };
    let folder = dir.join(kind.file_stem());
    let before = errors.len();
    let mut out = Vec::new();
    if let Some(consolidated) = consolidated {
        let text = read_text(&consolidated, errors)?;
        out = parse_consolidated(&consolidated, &text, scenario, kind, errors);
    } else if folder.is_dir() {
        let entries = match std::fs::read_dir(&folder) {
            Ok(e) => e,
            Err(e) => {
                errors.push(ContentError::new(
                    &folder,
                    format!("cannot read folder: {e}"),
                ));
                return None;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for path in files {
            if path.extension().and_then(|e| e.to_str()) != Some("md") {
                continue;
            }
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            let code = strip_suffix(stem).to_string();
            if !crate::discovery::is_segment(&code, kind.prefix()) {
                errors.push(ContentError::new(
                    &path,
                    format!(
                        "file name is not a {} code (expected {}<n>.md, e.g. {}1.md)",
                        kind.as_str(),
                        kind.prefix(),
                        kind.prefix()
                    ),
                ));
                continue;
            }
            let Some(text) = read_text(&path, errors) else {
                continue;
            };
            if let Some(c) =
                build_component(kind, scenario, &code, None, &path, None, &text, 1, errors)
            {
                out.push(c);
            }
        }
    } else {
        return Some(out);
    }
    out.sort_by(|a, b| natural_cmp(&a.code, &b.code));
    for pair in out.windows(2) {
        if pair[0].code == pair[1].code {
            let (a, b) = (&pair[0], &pair[1]);
            errors.push(
                ContentError::new(
                    &b.source,
                    format!(
                        "duplicate {} code {} (first defined at {}:{})",
                        kind.as_str(),
                        b.code,
                        a.source.display(),
                        a.line
                    ),
                )
                .at(b.line),
            );
        }
    }
    (errors.len() == before).then_some(out)
}

/// Parses the text of a consolidated component file (`conditions.md`, ...):
/// one component per `# C1` section, each with optional frontmatter. Public
/// so the fuzz targets can drive exactly what the loader does with a file.
pub fn parse_consolidated(
    path: &Path,
    text: &str,
    scenario: &str,
    kind: ComponentKind,
    errors: &mut Vec<ContentError>,
) -> Vec<Component> {
    let mut out = Vec::new();
    let is_code =
        |h: &str| leading_code(h).is_some_and(|c| parse_segment(&c.to_ascii_uppercase()).is_some());
    let (preamble, sections) = match split_sections(text, is_code) {
        Ok(x) => x,
        Err(e) => {
            errors.push(ContentError::new(path, e.message).at(e.line));
            return out;
        }
    };
    if sections.is_empty() {
        errors.push(ContentError::new(
            path,
            format!(
                "no `# {}1` sections found (expected one H1 heading per component)",
                kind.prefix()
            ),
        ));
    } else if !preamble_is_ignorable(preamble) {
        tracing::warn!(file = %path.display(), "text before the first section is not part of any component and is not sent");
    }
    for s in sections {
        let code = leading_code(&s.heading).unwrap_or_default();
        let label = format!("# {}", s.heading);
        if !crate::discovery::is_segment(&code, kind.prefix()) {
            errors.push(
                ContentError::new(
                    path,
                    format!(
                        "section code `{code}` is not a {} code (expected {}<n>, upper case)",
                        kind.as_str(),
                        kind.prefix()
                    ),
                )
                .at(s.line)
                .in_section(label),
            );
            continue;
        }
        let title = title_after_code(&s.heading, &code);
        let first_line = s.line + 1;
        if let Some(c) = build_component(
            kind,
            scenario,
            &code,
            title,
            path,
            Some(&label),
            s.text,
            first_line,
            errors,
        ) {
            out.push(c);
        }
    }
    out
}

fn preamble_is_ignorable(preamble: &str) -> bool {
    let body = split_frontmatter(preamble).map_or(preamble, |f| f.body);
    body.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || (t.starts_with("<!--") && t.ends_with("-->"))
    })
}

/// The leading ASCII-alphanumeric run of a heading: `C2: friendly` -> `C2`.
fn leading_code(heading: &str) -> Option<String> {
    let code: String = heading
        .trim()
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    (!code.is_empty()).then_some(code)
}

fn title_after_code(heading: &str, code: &str) -> Option<String> {
    let rest = heading.trim()[code.len()..].trim_start_matches(|c: char| {
        c.is_whitespace() || matches!(c, ':' | '-' | '\u{2013}' | '\u{2014}' | '.')
    });
    (!rest.trim().is_empty()).then(|| rest.trim().to_string())
}

#[allow(clippy::too_many_arguments)]
fn build_component(
    kind: ComponentKind,
    scenario: &str,
    code: &str,
    title: Option<String>,
    path: &Path,
    section: Option<&str>,
    text: &str,
    first_line: usize,
    errors: &mut Vec<ContentError>,
) -> Option<Component> {
    let err = |msg: String, line: usize| {
        let e = ContentError::new(path, msg).at(line);
        match section {
            Some(s) => e.in_section(s),
            None => e,
        }
    };
    let fm = match split_frontmatter(text) {
        Ok(fm) => fm,
        Err(e) => {
            errors.push(err(e.message, first_line + e.line - 1));
            return None;
        }
    };
    let metadata = match fm.yaml {
        Some(y) => match parse_yaml_map(y, path, first_line + fm.yaml_line - 1, section) {
            Ok(m) => m,
            Err(e) => {
                errors.push(e);
                return None;
            }
        },
        None => Map::new(),
    };
    let mut body = fm.body;
    let mut body_line = first_line + line_of(text, fm.body_offset) - 1;
    // An individual file may repeat its code as an H1; it is not sent.
    if section.is_none()
        && let Some(h) = markdown::headings(body, 1).first()
        && leading_code(&h.text).as_deref() == Some(code)
        && body[..h.range.start].trim().is_empty()
    {
        body_line += line_of(body, h.range.end) - 1;
        body = &body[h.range.end..];
    }
    let yaml_line = first_line + fm.yaml_line.saturating_sub(1);
    let mut bad = false;
    let mut number = |key: &str, lo: f64, hi: f64| -> f64 {
        match metadata.get(key) {
            None | Some(Value::Null) => 0.0,
            Some(Value::Number(n)) if n.as_f64().is_some_and(|v| (lo..=hi).contains(&v)) => {
                n.as_f64().unwrap_or(0.0)
            }
            Some(other) => {
                errors.push(err(
                    format!("`{key}` is {other} (expected a number from {lo} to {hi})"),
                    yaml_line,
                ));
                bad = true;
                0.0
            }
        }
    };
    let severity = number("severity", -10.0, 10.0);
    let difficulty = if kind == ComponentKind::Condition {
        number("difficulty", 0.0, 10.0)
    } else {
        0.0
    };
    let prompt = match markdown::to_xml(body) {
        Ok(p) => p,
        Err(e) => {
            errors.push(err(e.message, body_line + e.line - 1));
            return None;
        }
    };
    if bad {
        return None;
    }
    let full_code = format!("{scenario}-{code}");
    let hash = sha256_hex(&[
        kind.as_str().as_bytes(),
        full_code.as_bytes(),
        text.as_bytes(),
    ]);
    Some(Component {
        kind,
        code: code.to_string(),
        full_code,
        title,
        source: path.to_path_buf(),
        line: first_line.saturating_sub(usize::from(section.is_some())),
        metadata: Value::Object(metadata),
        severity,
        difficulty,
        prompt,
        body: body.to_string(),
        body_line,
        overrides: None,
        hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_spells_bytes_in_lower_case() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff, 0x10]), "000fa5ff10");
        assert_eq!(hex(&[]), "");
        // The length-prefixed digest, as stored in every database so far.
        assert_eq!(
            sha256_hex(&[b"abc"]),
            hex(&Sha256::digest([&3u64.to_le_bytes()[..], b"abc"].concat()))
        );
        assert_eq!(sha256_hex(&[b"a", b"b"]), hex(&sha256(&[b"a", b"b"])));
    }
}
