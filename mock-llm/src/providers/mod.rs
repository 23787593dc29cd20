//! One module per provider's native API. Each validates requests, answers
//! in its provider's shape and reports errors in its provider's format. They
//! depend on `core` only; the router (`app`) dispatches to them.

pub mod anthropic;
pub mod bedrock;
pub mod gemini;
pub mod openai;
pub mod openai_responses;
