//! The scorer: rubric + outcome history + as_of -> score document. Pure.
