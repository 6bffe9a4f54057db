//! The domain's shared values, used by every other module and using none of
//! them: models and their request settings, the stored words (run status,
//! error kind), results and judgements as written and as read, the keyword
//! quality scores of a reply, and how text is shown in one line; and every
//! record the store reads or writes for others: what runs cost and what
//! served them, human labels, the Batch API's batches, the reply cache, a
//! seeded benchmark's ids, what a read of results selects, and what the
//! viewer shows. A leaf: nothing here imports another module of the crate
//! (nor a database crate: the store maps its rows to these types), so the
//! layers above (benchmark, content, openrouter, judging, scoring, store,
//! run, report, review, view, cli) can all name these types without
//! importing each other.

pub mod batch;
pub mod block;
pub mod cache;
pub mod copy;
pub mod kinds;
pub mod model;
pub mod quality;
pub mod query;
pub mod result;
pub mod review;
pub mod run;
pub mod seed;
pub mod served;
pub mod spend;
pub mod text;
pub mod turn;
pub mod view;

pub use batch::{BatchItem, BatchRow, ItemOutcome, uncertain_batches, uncertain_line};
pub use block::{Block, BlockKind, BlockedAs};
pub use cache::{CachedReply, request_key};
pub use copy::{CopyStep, TableCopy, redact_password};
pub use kinds::{ErrorKind, RunStatus};
pub use model::{
    Api, ModelEntry, Price, ProviderPreferences, Reasoning, check_model_id, deserialize_judges,
    same_model,
};
pub use quality::{Band, QualityScores};
pub use query::{Detail, Direction, ReadPlan, ResultFilter, RowKey, StatusFilter, Which};
pub use result::{
    CriterionCount, DiscardedCharge, JudgementRecord, NewJudgement, NewResult, ResultRecord,
    ServedBy, StoredResult,
};
pub use review::{Imported, LabelRow, LabelledJudgement, NewLabel, ReviewItem, VoteRow};
pub use run::{RunHost, RunRecord};
pub use seed::{CodeBook, SeedIds};
pub use served::{Caller, ErrorTypeCount, ServedCount, TokenDetails};
pub use spend::{BudgetState, DiscardedSpendRow, JudgeSpendRow, Reuse, ScenarioSpendRow, Spend};
pub use text::excerpt;
pub use turn::{ConversationOutcome, SimulatedCall, SimulatorCost, TurnRecord, UnfinishedTurns};
pub use view::{
    CaseDetail, CaseJudgement, CaseLabel, CaseVariant, Cell, CellStatus, DownloadRow, LaterMessage,
    SearchProgress, Sibling,
};
