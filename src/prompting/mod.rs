//! Prompt assembly: token budgets per context section with a ledger of what was kept
//! and dropped, the templates in `prompts/`, and the macros of card and lore text.
//!
//! Invariant: assembling a prompt decides nothing about the story; it only fits what
//! the capabilities hand it into the budgets and says exactly what it did.

pub mod budget;
pub mod echo;
pub mod macros;
pub mod salvage;
pub mod templates;

pub use budget::{
    BudgetItem, BudgetLedger, BudgetPlan, DropPolicy, DroppedItem, Section, SectionLedger, allocate, enforce,
};
pub use macros::{Expanded, MacroContext, expand, greeting_seed};
pub use templates::{PromptTemplates, TemplateError};
