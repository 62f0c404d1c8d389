//! The pure parts and the corpora, in one test binary (one link instead of seven): the scorer
//! against the conformance set, the golden documents and its properties, the rubric file, the x402
//! parsers, the screens' corpus and their hostile texts. No lab, no network.

mod hostile_screens;
mod score_conformance;
mod score_golden;
mod score_properties;
mod score_rubric;
mod screen_corpus;
mod x402_parse;
